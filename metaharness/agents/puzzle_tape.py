"""TAPE on a puzzle: plan graph + solver route, constrained execution, and replanning on a mismatch.

The route's next action is executed exactly: the model is asked for the action under a JSON schema whose only
allowed value is the planned action (a one-value enum), so sampling noise cannot change it; without a model (the
oracle benchmark) the planned action is executed directly. After each step the observed state is compared with the
state the route predicted; when they differ, or the route is used up, the agent plans again. With no route to the
goal it takes the first sampled action that does not enter a predicted dead end (or wastes the step when there is
none) and plans again next turn.
"""

from __future__ import annotations

from collections.abc import Hashable

from metaharness.agents.environments.puzzle import PuzzleEnv
from metaharness.agents.puzzle_episode import Decision
from metaharness.agents.puzzle_planning import PuzzlePlanner, RouteFollower, fallback_action
from metaharness.agents.puzzle_react import call_record
from metaharness.models.protocol import ChatRequest, ModelClient
from metaharness.planner.tps import RouteResult

EXECUTE = 'Execute the next planned action of your route. Reply with JSON only: {"action": ...}.'


class TapeAgent:
    name = "tape"
    env: PuzzleEnv  # the episode's, from reset()

    def __init__(self, planner: PuzzlePlanner, model: ModelClient | None = None) -> None:
        self.planner = planner
        self.model = model

    def reset(self, env: PuzzleEnv, budget: int) -> None:
        self.env = env
        self.follower = RouteFollower(self.planner, budget)
        self.taken: list[str | None] = []

    def act(self, state: Hashable, remaining: int) -> Decision:
        decision = Decision(None)
        step = self.follower.next_step(state, remaining, self.taken, decision)
        action = fallback_action(step) if isinstance(step, RouteResult) else step.action
        if action is not None and self.model is not None:
            action = self.execute(self.model, state, remaining, action, decision)
        decision.action = decision.intended = action
        self.taken.append(action)
        return decision

    def execute(self, model: ModelClient, state: Hashable, remaining: int, action: str, decision: Decision) -> str:
        """Constrained execution: the model's answer can only be ``action``."""
        schema = {"type": "object", "properties": {"action": {"enum": [action]}}, "required": ["action"]}
        route = ", ".join(s.action for s in self.follower.route) or action
        messages = [
            {"role": "system", "content": f"{self.env.rules}\n\n{EXECUTE}"},
            {
                "role": "user",
                "content": f"Current state:\n{self.env.render(state)}\nActions left: {remaining}\nRoute: {route}",
            },
        ]
        result = model.complete(ChatRequest(messages, max_tokens=32, json_schema=schema), role="agent")
        decision.calls.append(call_record("execute", result))
        return result.parsed["action"]
