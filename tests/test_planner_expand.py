"""grow(): the four TPS stages over a program graph, with scripted stages."""

from __future__ import annotations

from fakes import FixedPlans, TableSimulator

from metaharness.planner.expand import grow
from metaharness.planner.program import PREDICTED, add_evaluated, depth, nodes_with, program_graph
from metaharness.planner.subagents import (
    DEAD_END,
    GOAL,
    CandidatePlan,
    KeyJudgeMerger,
    PlanningTask,
    ScoreLabeler,
    SimulatedStep,
)

TASK = PlanningTask.create(["c1 scored 0.3"], "beat 0.3", {"evals": 3, "tokens": 1e6, "usd": 1.0})


def revisions(table: dict[str, tuple[str, float | None]]) -> TableSimulator:
    """Each revision text maps to (behaviour key, predicted score or None for 'breaks')."""
    return TableSimulator(
        {
            text: SimulatedStep(
                f"behaves {key}", (0.0, 0.0, 0.01), f"c1|{key}", score, 0.05, (1.0, 1000.0, 0.0), {"summary": text}
            )
            for text, (key, score) in table.items()
        }
    )


def _graph():
    graph = program_graph("c1")
    add_evaluated(graph, "c1", 0.3)
    return graph


def _grow(graph, plans, table, depth_limit=3):
    names = iter(f"p{i}" for i in range(100))
    return grow(
        graph,
        TASK,
        sampler=FixedPlans(*plans),
        simulator=revisions(table),
        merger=KeyJudgeMerger(),
        labeler=ScoreLabeler(0.3),
        plans=len(plans),
        depth_limit=depth_limit,
        new_id=lambda: next(n for n in names if n not in graph.nx),
    )


def test_plans_become_chains_and_labels_follow_the_predicted_score() -> None:
    graph = _graph()
    growth = _grow(
        graph,
        [CandidatePlan(("a", "b"), start="c1"), CandidatePlan(("x",), start="c1")],
        {"a": ("A", 0.25), "b": ("B", 0.5), "x": ("X", None)},
    )
    assert growth.added == ["p0", "p1", "p2"]
    assert [e.source for e in graph.in_edges("p1")] == ["p0"] and depth(graph, "p1") == 2
    assert graph.node("p1").reward == GOAL and graph.node("p2").reward == DEAD_END
    assert graph.node("p0").cost == (1.0, 1000.0, 0.0) and graph.in_edges("p0")[0].cost == (0.0, 0.0, 0.01)


def test_same_behaviour_merges_into_the_known_node_and_the_plan_stops_there() -> None:
    graph = _graph()
    _grow(graph, [CandidatePlan(("a",), start="c1")], {"a": ("A", 0.4)})
    growth = _grow(graph, [CandidatePlan(("a2", "b"), start="c1")], {"a2": ("A", 0.4), "b": ("B", 0.6)})
    assert growth.added == [] and growth.merged == [("a2", "p0")]
    assert len(graph.in_edges("p0")) == 2 and len(nodes_with(graph, PREDICTED)) == 1


def test_extensions_of_predicted_nodes_stop_at_the_depth_limit() -> None:
    graph = _graph()
    _grow(graph, [CandidatePlan(("a", "b"), start="c1")], {"a": ("A", 0.4), "b": ("B", 0.45)})
    growth = _grow(graph, [CandidatePlan(("c", "d"), start="p1")], {"c": ("C", 0.5), "d": ("D", 0.6)})
    assert growth.added == ["p2"] and depth(graph, "p2") == 3
    assert not _grow(graph, [CandidatePlan(("e",), start="p2")], {"e": ("E", 0.7)}).added
