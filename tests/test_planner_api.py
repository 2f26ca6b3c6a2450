"""The public names of ``metaharness.planner``: what ``from metaharness.planner import X`` gives, whatever was
imported before."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import types

import pytest

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


def _graph(**changes):
    data = {
        "start": "s",
        "budget": [2, 2],
        "limits": ["steps", "usd"],
        "nodes": [{"id": "s"}, {"id": "a"}, {"id": "g", "reward": 1, "goal": True}],
        "edges": [
            {"id": "fast", "source": "s", "target": "g", "cost": [1, 3]},
            {"id": "e1", "source": "s", "target": "a", "cost": [1, 1]},
            {"id": "e2", "source": "a", "target": "g", "cost": [2, 1]},
        ],
    }
    return {**data, **changes}


def test_unknown_fields_are_refused_with_the_closest_known_name():
    import pytest

    from metaharness.errors import InputError
    from metaharness.planner import PlanGraph

    with pytest.raises(InputError, match='Unknown field "rewrd" in the node #1 .*did you mean "reward"'):
        PlanGraph.from_json(_graph(nodes=[{"id": "s"}, {"id": "a", "rewrd": 1}]))
    with pytest.raises(InputError, match='Unknown field "horizn" in the plan graph; did you mean "horizon"'):
        PlanGraph.from_json(_graph(horizn=3))
    with pytest.raises(InputError, match='Unknown field "weight" in the edge #0'):
        PlanGraph.from_json(_graph(edges=[{"id": "e", "source": "s", "target": "a", "cost": [1, 1], "weight": 2}]))


def test_an_infeasible_result_says_why_with_the_closest_miss():
    from metaharness.planner import PlanGraph, solve

    over = solve(PlanGraph.from_json(_graph())).to_json()
    assert over["status"] == "infeasible" and over["path"] == []
    assert over["reason"].startswith("No walk to a goal fits every limit at once")
    assert over["closest"] == {"path": ["fast"], "nodes": ["s", "g"], "cost": [1.0, 3.0], "over": {"usd": 1.0}}
    cases = {
        "no goal node": _graph(nodes=[{"id": "s"}, {"id": "a"}, {"id": "g"}]),
        "No goal can be reached from the start 's'": _graph(edges=[]),
        "The nearest goal is 2 steps from the start 's', beyond the horizon of 1": _graph(
            edges=[_graph()["edges"][1], _graph()["edges"][2]], horizon=1, budget=[9, 9]
        ),
        "usd needs 2 (budget 1)": _graph(budget=[9, 1]),
    }
    for reason, data in cases.items():
        for solver in ("exact", "ilp"):
            result = solve(PlanGraph.from_json(data), solver=solver)
            assert result.status == "infeasible" and reason in result.reason, (solver, result.reason)
            assert result.closest is None


def test_solve_takes_the_budget_by_limit_name():
    from metaharness.errors import InputError
    from metaharness.planner import PlanGraph, solve

    graph = PlanGraph.from_json(
        {
            "start": "s",
            "budget": [3, 0.02],
            "limits": ["steps", "usd"],
            "nodes": [{"id": "s"}, {"id": "h"}, {"id": "g", "reward": 1, "goal": True}],
            "edges": [
                {"id": "walk", "source": "s", "target": "h", "cost": [1, 0]},
                {"id": "stairs", "source": "h", "target": "g", "cost": [1, 0]},
                {"id": "taxi", "source": "s", "target": "g", "cost": [1, 0.05]},
            ],
        }
    )
    assert solve(graph).path == ["walk", "stairs"]
    assert solve(graph, {"usd": 0.1}).path == ["taxi"]  # the steps keep the graph's 3; equal value, fewer steps
    assert solve(graph, {"steps": 1}).status == "infeasible"
    with pytest.raises(InputError, match="Unknown budget entries"):
        solve(graph, {"dollars": 1})
    with pytest.raises(InputError, match='did you mean "usd"'):
        solve(graph, {"usdd": 1})
