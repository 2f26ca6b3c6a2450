"""ReAct on a puzzle: each turn the model sees the state and the actions left, writes a thought and an action.

By default the answer is JSON ``{"thought": ..., "action": ...}`` with the action restricted to the environment's
actions by the schema (structured output works on every backend, and small models cannot keep a text format);
``free_text=True`` uses the seeds' text format instead (``Thought: ...`` then ``Action: ...``, the action read
after the last ``Action:``, none readable = the step is spent without moving). Either way the intended action is
read from the thought (the last action it names), as the TAPE appendix does rule-based, so thought/action
disagreements show up as sampling errors. Subclasses add guidance to each turn (Plan-and-Act's plan, the TPS
route) through ``ReActAgent.guidance``.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from typing import Any

from metaharness.agents.environments.puzzle import PuzzleEnv
from metaharness.agents.puzzle_episode import Decision
from metaharness.models.protocol import ChatRequest, ChatResult, ModelClient, StructuredOutputError

INSTRUCTIONS = """You are the player. Each turn you see the current state and how many actions you have left.
Think about how to solve the puzzle within the actions left, then choose the next action.
"""
TEXT_FORMAT = """Answer exactly in this form:
Thought: <your reasoning, ending with the action you take now>
Action: <one action, for example {examples}>"""
JSON_FORMAT = """Reply with JSON only: {{"thought": "<your reasoning, ending with the action you take now>",
"action": "<one action, for example {examples}>"}}"""

_ACTION_LINE = re.compile(r"action\s*:", re.IGNORECASE)


def call_record(stage: str, result: ChatResult) -> dict[str, Any]:
    """What a trace keeps of one model call."""
    return {"stage": stage, "text": result.text, "seconds": round(result.latency_s, 3), "cached": result.cached}


def split_thought_action(env: PuzzleEnv, text: str) -> tuple[str, str | None, str | None]:
    """(thought, intended action read from the thought, action after the last ``Action:`` or None)."""
    marks = list(_ACTION_LINE.finditer(text))
    if not marks:
        thought = text.replace("Thought:", "").strip()
        return thought, env.parse_action(thought), None
    thought = text[: marks[-1].start()].replace("Thought:", "").strip()
    return thought, env.parse_action(thought), env.parse_action(text[marks[-1].end() :].split("\n")[0])


class ReActAgent:
    name = "react"
    env: PuzzleEnv  # the episode's, from reset()

    def __init__(
        self,
        model: ModelClient,
        *,
        free_text: bool = False,
        window: int = 3,
        max_tokens: int = 200,
        temperature: float = 0.0,
    ):
        self.model = model
        self.free_text = free_text
        self.window = window
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.turns: list[dict[str, Any]] = []
        self.taken: list[str | None] = []

    def reset(self, env: PuzzleEnv, budget: int) -> None:
        self.env = env
        self.turns = []
        self.taken = []

    def system_prompt(self) -> str:
        examples = " or ".join(self.env.actions(self.env.start)[:4])
        answer = (TEXT_FORMAT if self.free_text else JSON_FORMAT).format(examples=examples)
        return f"{self.env.rules}\n\n{INSTRUCTIONS}{answer}"

    def guidance(self, state: Hashable, remaining: int, decision: Decision) -> str:
        """Extra text for this turn (none for plain ReAct); may plan and record it on ``decision``."""
        return ""

    def act(self, state: Hashable, remaining: int) -> Decision:
        decision = Decision(None)
        extra = self.guidance(state, remaining, decision)
        user = f"Current state:\n{self.env.render(state)}\nActions left: {remaining}"
        if extra:
            user += f"\n\n{extra}"
        messages = [
            {"role": "system", "content": self.system_prompt()},
            *self.turns[-2 * self.window :],
            {"role": "user", "content": user},
        ]
        schema = (
            None
            if self.free_text
            else {
                "type": "object",
                "required": ["thought", "action"],
                "properties": {
                    "thought": {"type": "string", "maxLength": 400},
                    "action": {"enum": self.env.actions(state)},
                },
            }
        )
        try:
            result = self.model.complete(
                ChatRequest(messages, temperature=self.temperature, max_tokens=self.max_tokens, json_schema=schema),
                role="agent",
            )
        except StructuredOutputError as exc:  # an unusable answer spends the step, as in the text format
            self.turns += [{"role": "user", "content": user}, {"role": "assistant", "content": "(no usable answer)"}]
            self.taken.append(None)
            decision.calls.append({"stage": "act", "text": "", "error": str(exc)})
            return decision
        if schema is None:
            thought, intended, action = split_thought_action(self.env, result.text)
        else:
            thought, action = result.parsed["thought"], result.parsed["action"]
            intended = self.env.parse_action(thought)
        self.turns += [{"role": "user", "content": user}, {"role": "assistant", "content": result.text}]
        self.taken.append(action)
        decision.action, decision.intended, decision.thought = action, intended, thought
        decision.calls.append(call_record("act", result))
        return decision
