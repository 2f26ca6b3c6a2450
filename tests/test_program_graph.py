"""Program graphs on the planner's one graph type: the PlanGraph additions and the helpers of planner.program."""

from __future__ import annotations

import json

import pytest

from metaharness.errors import InputError
from metaharness.planner.graph import PlanGraph
from metaharness.planner.program import (
    EVALUATED,
    FAILED,
    IMPLEMENTED,
    LIMITS,
    PREDICTED,
    add_evaluated,
    add_predicted,
    add_revision,
    chain,
    cost_vector,
    depth,
    incumbent,
    mark,
    nodes_with,
    program_graph,
)


def _graph() -> PlanGraph:
    g = program_graph("seed", [3, 10_000, 1.0])
    add_evaluated(g, "seed", 0.30, cost={"input_tokens": 900, "output_tokens": 100, "usd": 0.01})
    add_evaluated(g, "c2", 0.35, "seed", data={"summary": "few-shot"})
    add_predicted(g, "a", "seed", 0.40, std=0.05, cost={"tokens": 1200}, edit_cost={"tokens": 300}, summary="labels")
    add_predicted(g, "b", "a", 0.55, std=0.1, label=1, summary="vote", data={"source": "def run(): ..."})
    add_predicted(g, "b", "c2", 0.55, edit_cost={"tokens": 50}, summary="vote too")  # merged: a second revision
    add_predicted(g, "x", "seed", 0.10, label=-1, summary="drop the prompt")
    return g


def test_helpers_build_nodes_and_revisions() -> None:
    g = _graph()
    assert g.problem == "selection" and g.limits == LIMITS
    seed, a, b, x = (g.node(n) for n in ("seed", "a", "b", "x"))
    assert seed.status == EVALUATED and seed.cost == (1.0, 1000.0, 0.01)
    assert a.status == PREDICTED and a.cost == (1.0, 1200.0, 0.0) and a.std == 0.05
    assert b.goal and b.reward == 1 and b.data == {"source": "def run(): ..."}
    assert x.dead_end and x.reward == -1
    assert [e.id for e in g.in_edges("b")] == ["a->b", "c2->b"]  # the merge kept both revisions, b its first data
    assert g.edge("seed->a").cost == (0.0, 300.0, 0.0) and g.edge("seed->a").action == "labels"
    assert add_revision(g, "a", "b", summary="again").id == "a->b#2"
    assert [n.id for n in nodes_with(g, PREDICTED)] == ["a", "b", "x"]
    assert incumbent(g) == 0.35
    assert incumbent(program_graph("s")) == 0.0


def test_chain_and_depth_follow_the_first_or_the_given_revision() -> None:
    g = _graph()
    assert [e.id for e in chain(g, "b")] == ["seed->a", "a->b"]
    assert [e.id for e in chain(g, "b", via={"b": "c2->b"})] == ["c2->b"]
    assert depth(g, "b") == 2 and depth(g, "seed") == 0
    with pytest.raises(InputError, match="does not lead"):
        chain(g, "b", via={"b": "seed->a"})


def test_chain_skips_a_failed_parent_and_fails_without_any_route() -> None:
    g = _graph()
    mark(g, "a", FAILED)
    assert [e.id for e in chain(g, "b")] == ["c2->b"]
    add_predicted(g, "orphan", "a", 0.9)
    with pytest.raises(InputError, match="cannot be reached"):
        chain(g, "orphan")


def test_mark_realises_a_prediction_and_relabels_it() -> None:
    g = _graph()
    node = mark(g, "a", IMPLEMENTED, new_id="c3")
    assert node.id == "c3" and node.status == IMPLEMENTED and node.score == 0.40
    assert node.data["prediction"] == {"score": 0.40, "std": 0.05, "cost": [1.0, 1200.0, 0.0]}
    assert "a" not in g.nx and [e.id for e in g.in_edges("b")] == ["a->b", "c2->b"]
    assert g.edge("a->b").source == "c3" and g.edge("seed->a").target == "c3"  # edge ids stay
    assert chain(g, "b") == [g.edge("a->b")]
    done = mark(g, "c3", EVALUATED, score=0.42, cost={"tokens": 1100, "usd": 0.02})
    assert (done.score, done.std, done.cost) == (0.42, 0.0, (1.0, 1100.0, 0.02))
    assert done.data["prediction"]["score"] == 0.40  # the first prediction is kept
    assert incumbent(g) == 0.42


def test_update_remove_and_relabel() -> None:
    g = _graph()
    assert g.update_node("a", score=0.45, std=0.02).score == 0.45
    with pytest.raises(InputError, match="relabel"):
        g.update_node("a", id="z")
    with pytest.raises(InputError, match="std"):
        g.update_node("a", std=-1)
    with pytest.raises(InputError, match="status"):
        g.update_node("a", status="guessed")
    with pytest.raises(InputError, match="exists already"):
        g.relabel("a", "b")
    g.relabel("seed", "root")
    assert g.start == "root" and [n.id for n in g.nodes][0] == "root"
    g.remove_node("a")
    assert not g.has_edge("seed->a") and not g.has_edge("a->b") and "a" not in g.nx
    assert [e.id for e in g.in_edges("b")] == ["c2->b"]


def test_json_round_trip_keeps_every_program_field() -> None:
    g = _graph()
    data = json.loads(json.dumps(g.to_json()))
    assert data["problem"] == "selection"
    back = PlanGraph.from_json(data)
    assert back.to_json() == g.to_json()
    assert back.node("b").data == {"source": "def run(): ..."} and back.node("a").std == 0.05
    plain = PlanGraph.from_json({"start": "s", "budget": [], "nodes": [{"id": "s"}], "edges": []})
    assert plain.problem == "path" and "problem" not in plain.to_json()
    assert plain.to_json()["nodes"] == [{"id": "s", "reward": 0.0}]


def test_cost_vector_reads_measured_and_predicted_costs() -> None:
    assert cost_vector({"input_tokens": 10, "output_tokens": 5, "usd": 0.5, "context_tokens": 99}, evals=1) == (
        1.0,
        15.0,
        0.5,
    )
    assert cost_vector({"tokens": 7}, evals=0) == (0.0, 7.0, 0.0)
    assert cost_vector(None, evals=1) == (1.0, 0.0, 0.0)
    assert program_graph("s", {"evals": 2, "tokens": 5, "usd": 1}).budget == (2.0, 5.0, 1.0)
    with pytest.raises(InputError, match="every limit"):
        program_graph("s", {"evals": 2})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["nodes"][2].pop("score"), "needs a score"),
        (lambda d: d["nodes"][2].update(status=""), "has status ''"),
        (lambda d: d["nodes"][2].update(cost=[1, 2]), "cost entries"),
        (lambda d: d["edges"].pop(1), "no revision leading to it"),
        (lambda d: d["edges"].append({"id": "loop", "source": "b", "target": "a", "cost": [0, 0, 0]}), "cycle"),
        (lambda d: d["nodes"][2].update(data=[1]), '"data"'),
        (lambda d: d.update(problem="tsp"), '"problem"'),
    ],
)
def test_bad_program_graphs_are_rejected(change, message) -> None:
    data = _graph().to_json()
    change(data)
    with pytest.raises(InputError, match=message):
        PlanGraph.from_json(data)
