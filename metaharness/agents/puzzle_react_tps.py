"""ReAct + TPS on a puzzle: the loop calls the planning tool and shows the route as guidance; the model still acts.

The planning call (history, goal, remaining budget -> route) is made at the start and again whenever the route no
longer applies: it ran out, or the state observed after the last turn is not the state the route expected (the
model did something else, or the prediction was wrong). Each turn the model sees the remaining route and the state
the next step should lead to, then writes its own ``Thought``/``Action`` as in ReAct, so it may deviate.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from metaharness.agents.environments.puzzle import PuzzleEnv
from metaharness.agents.puzzle_episode import Decision
from metaharness.agents.puzzle_planning import PuzzlePlanner, RouteFollower
from metaharness.agents.puzzle_react import ReActAgent
from metaharness.models.protocol import ModelClient
from metaharness.planner.tps import RouteResult


class TPSAgent(ReActAgent):
    name = "tps"

    def __init__(self, model: ModelClient, planner: PuzzlePlanner, **options: Any) -> None:
        super().__init__(model, **options)
        self.planner = planner

    def reset(self, env: PuzzleEnv, budget: int) -> None:
        super().reset(env, budget)
        self.follower = RouteFollower(self.planner, budget)

    def guidance(self, state: Hashable, remaining: int, decision: Decision) -> str:
        step = self.follower.next_step(state, remaining, self.taken, decision)
        if isinstance(step, RouteResult):
            return f"Planning tool: {step.guidance()}"
        route = self.follower.route
        return (
            f"Planning tool route (guidance; {len(route)} steps left): {', '.join(s.action for s in route)}\n"
            f"Next step: {step.action}; expected state after it:\n{step.expected_state}"
        )
