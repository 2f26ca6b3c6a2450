"""plan() end to end with the embedded model (local:smollm2-135m) as every subagent, on a small Sokoban state.

A 135M model may or may not find a route, so the test asserts what every outcome must satisfy: the record is
JSON, its stages follow what the sampler and simulator produced, the record replays to the same graph and route,
a route is a feasible walk of the graph to a goal, and a missing route gives the reason the graph shows.
"""

from __future__ import annotations

import json
import re

import pytest

from metaharness.planner.path.problem import path_problem
from metaharness.planner.subagents import ModelStateSimulator
from metaharness.planner.tps import plan, replay

STATE = (
    "Sokoban, 5x5 grid, walls on the border. player location: (1, 1); box location: (2, 2); "
    "goal location: (3, 2). Actions: U (y+1), D (y-1), L (x-1), R (x+1); walking into the box pushes it."
)
BUDGET = 8


def sokoban_key(text: str) -> str | None:
    """Canonical form when both positions can be read off the predicted state (else the merger's judge decides)."""
    player = re.search(r"player[^()]*\((\d+),\s*(\d+)\)", text)
    box = re.search(r"box[^()]*\((\d+),\s*(\d+)\)", text)
    return f"p{player.groups()} b{box.groups()}" if player and box else None


@pytest.mark.slow
def test_plan_runs_end_to_end_with_the_embedded_model():
    from metaharness.models import connect

    client = connect("local:smollm2-135m", cache=False)
    result = plan(
        [STATE],
        "the box is on the goal at (3, 2)",
        {"steps": BUDGET},
        model=client,
        plans=2,
        max_tokens=128,
        simulator=ModelStateSimulator(client, canonical_key=sokoban_key, max_tokens=128),
        start_key=sokoban_key(STATE),
    )
    record = json.loads(json.dumps(result.to_json()))  # the whole call is recorded as JSON
    assert record["status"] == result.status and result.status in ("route", "no_route")

    # The stages: one sampling call, a simulation per sampled plan, then merge and label once a plan survived.
    names = [s["stage"] for s in record["stages"]]
    sample = record["stages"][0]
    assert names[0] == "sample" and sample["calls"] and sample["calls"][0]["attempts"]
    plans = sample["output"]
    simulated = [s for s in record["stages"] if s["stage"] == "simulate" and "dropped" not in s]
    assert len(plans) <= 2 and names[1 : 1 + len(plans)] == ["simulate"] * len(plans)
    if not plans:
        assert names == ["sample"] and result.reason == "the plan sampler produced no plan."
    elif not simulated:
        assert result.status == "no_route" and result.reason == "no plan could be simulated."
    else:
        assert names[1 + len(plans) :] == ["merge", "label"]
    assert (result.graph is not None) == bool(simulated)

    if result.graph is not None:
        graph = result.graph
        assert graph.node(graph.start).key == sokoban_key(STATE)
        again = replay(record)  # the record alone rebuilds the graph and the route
        assert again.graph is not None
        assert again.status == result.status and again.graph.to_json() == graph.to_json()
        assert [s.to_json() for s in again.route] == record["route"]
    if result.status == "route":
        assert result.graph is not None and result.solution is not None
        walk = path_problem(result.graph).check_walk(result.solution.path)  # a feasible (possibly poor) route
        assert result.graph.node(walk.nodes[-1]).goal and walk.cost["steps"] <= BUDGET
        assert [step.edge for step in result.route] == result.solution.path
        assert all(step.action and step.expected_state for step in result.route)
        assert result.guidance().startswith(f"Suggested route ({len(result.route)} steps")
    else:
        assert result.route == [] and result.guidance() == f"No feasible route: {result.reason}"
        if result.graph is not None:  # the solver found nothing: either no goal state, or none within budget
            expected = "no predicted state satisfies the goal" if not result.graph.goals() else "within the remaining"
            assert result.solution is not None
            assert expected in result.reason and not result.solution.has_plan
