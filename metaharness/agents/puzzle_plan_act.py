"""Plan-and-Act on a puzzle: the model first writes a whole plan, then a ReAct executor carries it out.

The planner answers once, at the start, with a JSON list of actions (the schema restricts items to the
environment's actions, so the plan is well-formed but not necessarily right). Each turn the executor sees the plan,
where it is in it, and the state, and still chooses the action itself; there is no replanning, as in the baseline
the seeds compare against.
"""

from __future__ import annotations

from collections.abc import Hashable

from metaharness.agents.environments.puzzle import PuzzleEnv
from metaharness.agents.puzzle_episode import Decision
from metaharness.agents.puzzle_react import ReActAgent, call_record
from metaharness.models.protocol import ChatRequest, StructuredOutputError

PLANNER_INSTRUCTIONS = """You are the planner. Write the complete sequence of actions that solves the puzzle from the
current state using at most {budget} actions. Reply with JSON only: {{"plan": [actions in order]}}."""


class PlanActAgent(ReActAgent):
    name = "plan-act"

    def reset(self, env: PuzzleEnv, budget: int) -> None:
        super().reset(env, budget)
        self.plan: list[str] | None = None

    def make_plan(self, state: Hashable, remaining: int, decision: Decision) -> list[str]:
        schema = {
            "type": "object",
            "required": ["plan"],
            "properties": {
                "plan": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": remaining,
                    "items": {"enum": self.env.actions(state)},
                }
            },
        }
        messages = [
            {"role": "system", "content": f"{self.env.rules}\n\n{PLANNER_INSTRUCTIONS.format(budget=remaining)}"},
            {"role": "user", "content": f"Current state:\n{self.env.render(state)}\nActions left: {remaining}"},
        ]
        decision.plans += 1
        try:
            result = self.model.complete(
                ChatRequest(messages, temperature=self.temperature, max_tokens=self.max_tokens, json_schema=schema),
                role="agent",
            )
        except StructuredOutputError as exc:
            decision.calls.append({"stage": "plan", "text": "", "error": str(exc)})
            return []
        decision.calls.append(call_record("plan", result))
        return list(result.parsed["plan"])

    def guidance(self, state: Hashable, remaining: int, decision: Decision) -> str:
        if self.plan is None:
            self.plan = self.make_plan(state, remaining, decision)
        if not self.plan:
            return "Plan: (the planner gave no usable plan)"
        done = len(self.taken)
        upcoming = self.plan[done] if done < len(self.plan) else "(the plan is finished)"
        return (
            f"Plan made at the start: {', '.join(self.plan)}\n"
            f"Actions taken so far: {', '.join(a or '-' for a in self.taken) or 'none'}\n"
            f"Next action in the plan: {upcoming}"
        )
