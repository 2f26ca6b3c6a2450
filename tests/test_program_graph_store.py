"""The run's lasting program graph (``program-graph.json``): synced with the committed candidates, predictions kept
across sessions, a missing file rebuilt, an unreadable one set aside with a note."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metaharness.candidate import Candidate, Evaluation, PlanEntry, Prediction
from metaharness.errors import InputError
from metaharness.planner import program
from metaharness.planner.graph import PlanGraph
from metaharness.report import RunView
from metaharness.store import RunDirectory, program_graph

CONFIG = {"dataset": "toy", "task_model": "fake", "val_limit": 4, "proposer": "scripted"}


def saved_graph(run_dir: Path) -> PlanGraph:
    """The run's saved program graph (these tests save one first)."""
    graph = program_graph.load(run_dir)
    assert graph is not None
    return graph


def _candidate(cid, parent, score=None, *, status="evaluated", prediction=None, iteration=1):
    evaluation = None
    if score is not None:
        evaluation = Evaluation("val", {"primary": score}, {"input_tokens": 900, "output_tokens": 100, "usd": 0.02}, 4)
    return Candidate(
        cid,
        parent,
        iteration,
        "class Harness: pass\n",
        status=status,
        summary=f"make {cid}",
        prediction=prediction,
        evaluation=evaluation,
        error="boom" if status == "failed" else None,
    )


@pytest.fixture
def run(tmp_path):
    rd = RunDirectory.open(tmp_path / "run", CONFIG)
    rd.journal.save_plan(
        0, [PlanEntry("c001", None, "")]
    )  # iteration 0 under way, as the loop leaves it (plan, then commit)
    rd.commit(_candidate("c001", None, 0.3, iteration=0))
    yield rd
    rd.close()


def test_a_committed_candidate_takes_the_place_of_the_node_it_realises(run):
    graph = run.graph.read()
    program.add_predicted(graph, "a", "c001", 0.5, std=0.1, cost={"tokens": 800}, summary="a", data={"iteration": 1})
    program.add_predicted(graph, "b", "a", 0.6, summary="b", label=1)
    program.add_predicted(graph, "x", "c001", 0.2, summary="x", label=-1)
    run.graph.write(graph)
    run.commit(_candidate("c002", "c001", status="implemented", prediction=Prediction(score=0.5, std=0.1, node="a")))
    run.commit(_candidate("c003", "c002", 0.55, prediction=Prediction(score=0.6, node="b")))
    saved = saved_graph(run.path)
    assert [n.id for n in saved.nodes] == ["c001", "c002", "c003", "x"]
    implemented, evaluated, waiting = saved.node("c002"), saved.node("c003"), saved.node("x")
    assert (implemented.status, implemented.score, implemented.std) == ("implemented", 0.5, 0.1)
    assert implemented.cost == (1.0, 800.0, 0.0)  # still its predicted evaluation cost: it can be chosen later
    assert implemented.data["predicted_in"] == 1 and implemented.data["iteration"] == 1
    assert (evaluated.status, evaluated.score, evaluated.cost, evaluated.std) == (
        "evaluated",
        0.55,
        (1.0, 1000.0, 0.02),
        0,
    )
    assert evaluated.goal and evaluated.data["prediction"]["score"] == 0.6
    assert waiting.status == "predicted" and waiting.dead_end and saved.node("c001").status == "evaluated"
    assert [(e.id, e.source, e.target) for e in saved.edges] == [
        ("c001->a", "c001", "c002"),
        ("a->b", "c002", "c003"),
        ("c001->x", "c001", "x"),
    ]


def test_sync_is_idempotent_and_adds_a_candidate_the_graph_missed(run):
    graph = run.graph.read()
    program.add_predicted(graph, "a", "c001", 0.5)
    before = json.dumps(graph.to_json(), sort_keys=True)
    again = program_graph.sync(graph, run.candidates())
    assert json.dumps(again.to_json(), sort_keys=True) == before
    # a candidate committed without a node of its own (a proposal with no prediction), and a failed one
    candidates = [*run.candidates(), _candidate("c002", "c001", 0.4), _candidate("c003", "c002", status="failed")]
    once = program_graph.sync(graph, candidates).to_json()
    assert program_graph.sync(program_graph.sync(None, []), candidates).to_json()["nodes"][1]["id"] == "c002"
    twice = program_graph.sync(graph, candidates).to_json()
    assert once == twice
    failed = graph.node("c003")
    assert failed.status == "failed" and failed.score is None and [e.source for e in graph.in_edges("c003")] == ["c002"]


def test_predictions_survive_closing_and_reopening_the_run(run, tmp_path):
    graph = run.graph.read()
    program.add_predicted(graph, "later", "c001", 0.45, std=0.05, summary="try later", data={"iteration": 1})
    run.graph.write(graph)
    run.close()
    reopened = RunDirectory.open(tmp_path / "run", CONFIG)
    try:
        assert reopened.recover() == []  # the saved graph agrees with the candidates: nothing to repair
        node = reopened.graph.read().node("later")
        assert (node.status, node.score, node.std, node.data["iteration"]) == ("predicted", 0.45, 0.05, 1)
    finally:
        reopened.close()


def test_a_missing_graph_is_rebuilt_from_the_candidates(run):
    (run.path / program_graph.GRAPH_FILE).unlink()
    assert program_graph.load(run.path) is None
    assert [n.id for n in run.graph.read().nodes] == ["c001"]
    assert run.recover() == []  # nothing to report: there were no predictions to lose
    assert saved_graph(run.path).node("c001").score == 0.3


def test_an_unreadable_graph_is_a_clear_error_and_a_run_sets_it_aside_and_rebuilds(run):
    path = run.path / program_graph.GRAPH_FILE
    path.write_text('{"start": "root", "nodes": [')  # edited by hand, cut short
    with pytest.raises(InputError, match="cannot be read as a program graph.*rebuilt from the committed candidates"):
        program_graph.load(run.path)
    view = RunView.load(RunDirectory.browse(run.path))  # the reports still work, and say so
    assert (
        view.graph is not None
        and [n.id for n in view.graph.nodes] == ["c001"]
        and "rebuilt from the candidates" in view.notes()[-1]
    )
    actions = run.recover()
    assert len(actions) == 1 and "set the unreadable program-graph.json.unreadable-" in actions[0]
    assert saved_graph(run.path).node("c001").status == "evaluated"
    assert len(list(run.path.glob("program-graph.json.unreadable-*"))) == 1


def test_the_graph_is_written_atomically(run, monkeypatch):
    saved = saved_graph(run.path)
    graph = run.graph.read()
    program.add_predicted(graph, "a", "c001", 0.5)

    def killed(path, data):
        raise KeyboardInterrupt  # the write dies before the rename: the old file stays whole

    monkeypatch.setattr("metaharness.store.files.os.replace", killed)
    with pytest.raises(KeyboardInterrupt):
        run.graph.write(graph)
    assert saved_graph(run.path).to_json() == saved.to_json()
    assert not list(run.path.glob(".program-graph.json.*"))
