"""plan() end to end with the embedded model (local:smollm2-135m) as every subagent, on a small Sokoban state."""

from __future__ import annotations

import json
import re

import pytest

from metaharness.planner.problem import prepare
from metaharness.planner.subagents import ModelStateSimulator
from metaharness.planner.tps import plan

STATE = (
    "Sokoban, 5x5 grid, walls on the border. player location: (1, 1); box location: (2, 2); "
    "goal location: (3, 2). Actions: U (y+1), D (y-1), L (x-1), R (x+1); walking into the box pushes it."
)


def sokoban_key(text: str) -> str | None:
    """Canonical form when both positions can be read off the predicted state (else the merger's judge decides)."""
    player = re.search(r"player[^()]*\((\d+),\s*(\d+)\)", text)
    box = re.search(r"box[^()]*\((\d+),\s*(\d+)\)", text)
    return f"p{player.groups()} b{box.groups()}" if player and box else None


@pytest.mark.slow
def test_plan_runs_end_to_end_with_the_embedded_model():
    models = pytest.importorskip("metaharness.models")
    client = models.connect("local:smollm2-135m", cache=False)
    result = plan(
        [STATE],
        "the box is on the goal at (3, 2)",
        {"steps": 8},
        model=client,
        m=2,
        max_tokens=128,
        simulator=ModelStateSimulator(client, canonical_key=sokoban_key, max_tokens=128),
        start_key=sokoban_key(STATE),
    )
    record = json.loads(json.dumps(result.to_json()))  # the whole call is recorded as JSON
    assert record["stages"][0]["stage"] == "sample" and record["stages"][0]["calls"]
    if result.status == "route":
        walk = prepare(result.graph).check_walk(result.solution.path)  # a valid (possibly poor) route
        assert walk.cost[0] <= 8 and len(result.route) == len(walk.path)
        assert all(step.action and step.state for step in result.route)
    else:
        assert result.status == "no_route" and result.reason
        assert result.guidance().startswith("No feasible route")
