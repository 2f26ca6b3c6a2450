"""`metaharness history` on a run with a lasting program graph: implemented candidates marked as such, and
``--predicted`` listing the predictions not yet chosen apart from the candidates."""

from __future__ import annotations

from pathlib import Path

import pytest
from command_line import run_metaharness as _cli

from metaharness.candidate import Candidate, Evaluation, Prediction
from metaharness.planner import program
from metaharness.store import RunDirectory


def _commit(run, cid, parent, iteration, *, score=None, status="evaluated", prediction=None):
    evaluation = None if score is None else Evaluation("val", {"primary": score}, {"input_tokens": 500}, 3)
    run.commit(
        Candidate(
            cid,
            parent,
            iteration,
            f"# {cid}\nclass Harness: pass\n",
            status=status,
            summary=f"step to {cid}",
            prediction=prediction,
            evaluation=evaluation,
        )
    )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "graph"
    run = RunDirectory.open(path, {"dataset": "toy", "task_model": "fake", "val_limit": 3, "proposer": "offline"})
    _commit(run, "c001", None, 0, score=0.25)
    graph = run.graph.read()
    program.add_predicted(graph, "b", "c001", 0.35, std=0.04, summary="step to b", data={"iteration": 1})
    program.add_predicted(graph, "c", "b", 0.5, summary="step to c", data={"iteration": 1})
    program.add_predicted(
        graph,
        "z",
        "c",
        0.62,
        std=0.08,
        cost={"tokens": 4200, "usd": 0.0123},
        label=1,
        summary="vote over labels",
        data={"iteration": 1},
    )
    program.add_predicted(graph, "d", "c001", 0.1, label=-1, summary="drop the examples", data={"iteration": 1})
    run.graph.write(graph)
    _commit(run, "c002", "c001", 1, status="implemented", prediction=Prediction(score=0.35, std=0.04, node="b"))
    _commit(run, "c003", "c002", 1, score=0.45, prediction=Prediction(score=0.5, node="c"))
    run.close()
    return path


def test_history_marks_implemented_candidates(run_dir):
    out = _cli("history", "--run-dir", str(run_dir))
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if "c002" in line)
    assert "implemented" in row and "0.350" in row  # not evaluated, its prediction shown
    assert "c003 *" in out.stdout and "2 predicted programs not yet chosen (--predicted lists them)" in out.stdout
    assert "vote over labels" not in out.stdout  # predictions only on request


def test_history_predicted_lists_the_unchosen_predictions_apart(run_dir):
    out = _cli("history", "--run-dir", str(run_dir), "--predicted")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "predicted programs not yet chosen (2, best predicted first)" in text
    waiting = text[text.index("predicted programs not yet chosen") :]
    rows = [line for line in waiting.splitlines() if line.startswith("│ z") or line.startswith("│ d")]
    assert [r.split()[1] for r in rows] == ["z", "d"]  # best predicted first
    z, d = rows
    for cell in ("c003", "0.620 +- 0.080", "goal", "4200 tok $0.0123", "vote over labels"):
        assert cell in z
    assert z.split("│")[6].strip() == "1" and z.split("│")[7].strip() == "1"  # depth 1 from c003, predicted in 1
    assert "dead end" in d and "c001" in d
    assert "c002" not in "".join(rows) and "│ b " not in waiting  # realised predictions are candidates now
