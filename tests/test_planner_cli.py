"""``metaharness plan solve FILE.json``: result JSON on good files, a clear message and exit code 2 on bad ones."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import pytest

from metaharness.cli import main

GRAPH: dict[str, Any] = {
    "start": "s0",
    "budget": [6, 2.5],
    "horizon": 20,
    "discount": 1.0,
    "nodes": [{"id": "s0", "reward": 0}, {"id": "a", "reward": 0.5}, {"id": "g", "reward": 1, "goal": True}],
    "edges": [
        {"id": "e1", "source": "s0", "target": "g", "action": "R", "cost": [1, 0.5]},
        {"id": "e2", "source": "s0", "target": "a", "action": "U", "cost": [1, 1]},
        {"id": "e3", "source": "a", "target": "g", "action": "R", "cost": [1, 1]},
    ],
}


def _run(argv) -> int:
    """Run the CLI in this process; return its exit code."""
    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code is None or isinstance(exc.code, int), exc.code
        return exc.code or 0
    return 0


def _write(tmp_path, data, name="graph.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_solve_prints_the_design_output_in_a_real_process(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "metaharness", "plan", "solve", _write(tmp_path, GRAPH)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert list(result) == ["status", "path", "nodes", "value", "cost", "solver", "seconds"]
    assert result | {"seconds": 0} == {
        "status": "optimal",
        "path": ["e2", "e3"],
        "nodes": ["s0", "a", "g"],
        "value": 1.5,
        "cost": [2.0, 2.0],
        "solver": "exact",
        "seconds": 0,
    }


def test_bad_file_exits_2_without_a_traceback_in_a_real_process(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "metaharness", "plan", "solve", _write(tmp_path, {**GRAPH, "budget": [6]})],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "cost entries but the budget has 1" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("solver", ["exact", "ilp", "auto"])
def test_solvers_and_infeasible(tmp_path, capsys, solver):
    assert _run(["plan", "solve", _write(tmp_path, GRAPH), "--solver", solver]) == 0
    assert json.loads(capsys.readouterr().out)["value"] == 1.5
    assert _run(["plan", "solve", _write(tmp_path, {**GRAPH, "budget": [0.5, 9]}), "--solver", solver]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "infeasible" and result["path"] == [] and result["value"] is None


def test_stdin(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(GRAPH)))
    assert _run(["plan", "solve", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["path"] == ["e2", "e3"]


BAD = [
    ("{not json", "not valid JSON"),
    ([1, 2], "JSON object"),
    ({k: v for k, v in GRAPH.items() if k != "edges"}, 'missing the required field "edges"'),
    ({**GRAPH, "start": "zz"}, "start node 'zz'"),
    ({**GRAPH, "edges": [{**GRAPH["edges"][0], "source": "q"}]}, "unknown source node 'q'"),
    ({**GRAPH, "edges": [{**GRAPH["edges"][0], "cost": [1, -2]}]}, "negative cost"),
    (
        {
            **GRAPH,
            "horizon": None,
            "edges": [*GRAPH["edges"], {"id": "loop", "source": "a", "target": "a", "cost": [0, 0]}],
        },
        "zero-cost",
    ),
    ({**GRAPH, "nodes": [{"reward": 1}]}, 'missing the required field "id"'),
]


@pytest.mark.parametrize(("data", "message"), BAD)
def test_bad_files_exit_2_with_a_clear_message(tmp_path, capsys, data, message):
    assert _run(["plan", "solve", _write(tmp_path, data)]) == 2
    assert message in capsys.readouterr().err.replace("\n", " ")


def test_missing_file_and_unknown_solver_exit_2(tmp_path, capsys):
    for argv in (
        ["plan", "solve", str(tmp_path / "nope.json")],
        ["plan", "solve", _write(tmp_path, GRAPH), "--solver", "magic"],
    ):
        assert _run(argv) == 2
    err = capsys.readouterr().err
    assert "Cannot read plan graph file" in err and "Unknown solver 'magic'" in err
