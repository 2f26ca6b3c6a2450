"""The public names of ``metaharness.planner``: what ``from metaharness.planner import X`` gives, whatever was
imported before."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import types

import metaharness.planner as planner


def _import_every_submodule() -> list[str]:
    names = [m.name for m in pkgutil.walk_packages(planner.__path__, "metaharness.planner.")]
    for name in names:
        importlib.import_module(name)
    return names


def test_no_exported_name_is_shadowed_by_a_submodule() -> None:
    _import_every_submodule()
    for name in planner.__all__:
        value = getattr(planner, name)
        assert not isinstance(value, types.ModuleType), f"metaharness.planner.{name} is a module, not the export"


def test_solve_is_the_function_after_its_module_was_imported_first() -> None:
    """A fresh interpreter that imports the submodule before the name (the order that broke the README example)."""
    code = (
        "import metaharness.planner.solve\n"
        "from metaharness.planner import PlanGraph, solve\n"
        "g = PlanGraph.from_json({'start': 's', 'budget': [1], 'nodes': [{'id': 's'}, "
        "{'id': 'g', 'reward': 1, 'goal': True}], 'edges': [{'id': 'e', 'source': 's', 'target': 'g', 'cost': [1]}]})\n"
        "print(solve(g).path)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['e']"
