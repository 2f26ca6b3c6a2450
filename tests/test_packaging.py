"""The distribution installs everything under the ``metaharness`` namespace and lists every package."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import tomllib
from conftest import REPO_ROOT

MAPPED = {"proposers": "metaharness.proposers", "tasks": "metaharness.tasks", "candidates": "metaharness.candidates"}


def _declared_packages() -> set[str]:
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    return set(config["tool"]["setuptools"]["packages"])


def _package_folders() -> set[str]:
    found = set()
    for init in REPO_ROOT.glob("**/__init__.py"):
        rel = init.parent.relative_to(REPO_ROOT)
        top = rel.parts[0]
        if top == "metaharness":
            found.add(".".join(rel.parts))
        elif top in MAPPED:
            found.add(".".join((MAPPED[top], *rel.parts[1:])))
    return found


def test_every_package_folder_is_declared():
    assert _package_folders() == _declared_packages()


def test_mapped_folders_import_under_namespace():
    """Each installed name resolves to its folder at the top of the repository, from any working directory, and
    so do its subpackages and the seed harnesses shipped as data."""
    names = [*MAPPED.values(), "metaharness.tasks.text.metrics", "metaharness.proposers.operators"]
    code = (
        "import importlib, json, sys; from metaharness.candidates import ROOT; "
        "print(json.dumps({'ROOT': str(ROOT), **{n: importlib.import_module(n).__file__ for n in sys.argv[1:]}}))"
    )
    out = subprocess.run([sys.executable, "-c", code, *names], cwd="/", capture_output=True, text=True, check=True)
    files = {name: Path(file).resolve() for name, file in json.loads(out.stdout).items()}
    for top, name in MAPPED.items():
        assert files[name] == REPO_ROOT / top / "__init__.py", name
    assert files["metaharness.tasks.text.metrics"] == REPO_ROOT / "tasks" / "text" / "metrics.py"
    assert files["metaharness.proposers.operators"] == REPO_ROOT / "proposers" / "operators.py"
    assert files["ROOT"] == REPO_ROOT / "candidates" and (files["ROOT"] / "symptom2disease" / "zero_shot.py").is_file()


def test_no_generic_top_level_names_installed():
    # Run outside the repository so the working tree cannot shadow site-packages.
    code = "import importlib.util as u; print([n for n in ('tasks','proposers','candidates') if u.find_spec(n)])"
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
