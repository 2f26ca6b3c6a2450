"""ReAct + TPS on a puzzle: the loop calls the planning tool and shows the route as guidance; the model still acts.

The planning call (history, goal, remaining budget -> route) is made at the start and again whenever the route no
longer applies: it ran out, or the state observed after the last turn is not the state the route expected (the
model did something else, or the prediction was wrong). Each turn the model sees the remaining route and the state
the next step should lead to, then writes its own ``Thought``/``Action`` as in ReAct, so it may deviate.
"""

from __future__ import annotations

from metaharness.agents.puzzle_episode import Decision
from metaharness.agents.puzzle_planning import PlannedStep, PuzzlePlanner, planning_record, route_steps
from metaharness.agents.puzzle_react import ReActAgent
from metaharness.models.types import ModelClient
from metaharness.tasks.environments.puzzle import PuzzleEnv


def history_lines(taken: list[str | None]) -> list[str]:
    return [f"actions taken so far: {', '.join(a or '(none)' for a in taken)}"] if taken else []


class TPSAgent(ReActAgent):
    name = "tps"

    def __init__(self, model: ModelClient, planner: PuzzlePlanner, **options) -> None:
        super().__init__(model, **options)
        self.planner = planner

    def reset(self, env: PuzzleEnv, budget: int) -> None:
        super().reset(env, budget)
        self.route: list[PlannedStep] = []
        self.offered: PlannedStep | None = None

    def guidance(self, state, remaining: int, decision: Decision) -> str:
        if self.offered is not None:
            on_route = self.route and self.env.key(state) == self.offered.key
            self.route = self.route[1:] if on_route else []
        if not self.route:
            result = self.planner.plan(state, remaining, history_lines(self.taken))
            decision.plans += 1
            decision.replanned = self.offered is not None
            decision.calls.append(planning_record(result))
            self.route = route_steps(result)
            if not self.route:
                self.offered = None
                return f"Planning tool: {result.guidance()}"
        self.offered = self.route[0]
        decision.predicted = self.offered.key
        return (
            f"Planning tool route (guidance; {len(self.route)} steps left): "
            f"{', '.join(s.action for s in self.route)}\n"
            f"Next step: {self.offered.action}; expected state after it:\n{self.offered.state}"
        )
