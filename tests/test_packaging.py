"""The distribution installs everything under the ``metaharness`` namespace and lists every package."""

from __future__ import annotations

import importlib
import subprocess
import sys

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
    for name in MAPPED.values():
        module = importlib.import_module(name)
        assert module.__name__ == name


def test_no_generic_top_level_names_installed():
    # Run outside the repository so the working tree cannot shadow site-packages.
    code = "import importlib.util as u; print([n for n in ('tasks','proposers','candidates') if u.find_spec(n)])"
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
