"""A model as the EGB ``ToolChooser``: constrained tool votes and arguments.

Every choice is constrained output: the tool is a JSON-schema enum of the step's candidate names, and each
argument an enum of the values that fit it, so even the embedded 135M model gives valid calls.

- ``uncertainty="sample"`` (black-box): one request with ``n = samples`` at ``temperature``; the vote shares are the
  distribution.
- ``uncertainty="logprobs"`` (white-box): one greedy request with top-5 token log-probabilities; the distribution
  over candidates comes from ``distribution_from_logprobs``.
- ``thought=True`` (ReAct): the answer object starts with a short ``thought`` before the tool.
"""

from __future__ import annotations

import json
import random
import re
from typing import Literal

from metaharness.agents.branching import (
    Meter,
    StepView,
    Vote,
    distribution_from_logprobs,
    vote_from_samples,
)
from metaharness.json_types import JSONObject, JSONValue
from metaharness.models.protocol import ChatRequest, ChatResult, ModelClient, StructuredOutputError, Tool

Uncertainty = Literal["sample", "logprobs"]

SYSTEM = (
    "You execute a fixed plan with API tools, one step at a time. For the current step, pick the one tool whose "
    "description does exactly what the step asks: no archived, pending, regional or deprecated variant unless the "
    "step asks for it."
)
_NAME_START = re.compile(r'"tool"\s*:\s*"')
THOUGHT_PATTERN = "^[A-Za-z0-9 ,.;:'()_-]{1,160}$"


def _short(value: JSONValue) -> str:
    return json.dumps(value, ensure_ascii=False)[:80]


def step_prompt(view: StepView, *, recent: int = 3) -> str:
    """The user message for a tool choice: goal, the last few results, notes, the step and its candidates."""
    lines = [f"Goal: {view.goal}"]
    done = view.history[-recent:]
    if done:
        lines.append("Recent results:")
        lines += [f"  step {s.index + 1}: {s.tool} -> {_short(s.observation)}" for s in done]
    if view.notes:
        lines.append("Notes from earlier attempts:")
        lines += [f"  - {note}" for note in view.notes]
    lines.append(f"Current step {view.index + 1}: {view.instruction}")
    lines.append("Tools:")
    lines += [f"- {t.name}: {t.description}" for t in view.candidates]
    return "\n".join(lines)


class ModelToolChooser:
    """Tool votes and argument fills from a ``ModelClient``, charged to ``meter``."""

    def __init__(
        self,
        client: ModelClient,
        *,
        uncertainty: Uncertainty = "sample",
        temperature: float = 0.7,
        thought: bool = False,
        seed: int = 0,
        meter: Meter | None = None,
    ):
        self.client = client
        self.uncertainty = uncertainty
        self.temperature = temperature
        self.thought = thought
        self.meter = meter or Meter()
        # Sampled requests carry a seed drawn from this stream: reruns are reproducible (and cacheable), while
        # repeated questions within a run still get fresh samples.
        self.rng = random.Random(seed)

    def _complete(self, request: ChatRequest) -> ChatResult:
        if request.temperature > 0:
            request.seed = self.rng.randrange(2**31)
        result = self.client.complete(request, role="agent")
        self.meter.add(request.n, result.usage)
        return result

    def _schema(self, names: list[str]) -> JSONObject:
        properties: JSONObject = {}
        if self.thought:
            # one plain line: a grammar-constrained small model otherwise slips raw line breaks into the string
            properties["thought"] = {"type": "string", "pattern": THOUGHT_PATTERN}
        properties["tool"] = {"type": "string", "enum": [name for name in names]}
        return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}

    def vote(self, view: StepView, samples: int) -> Vote:
        names = [t.name for t in view.candidates]
        white_box = self.uncertainty == "logprobs"
        n = 1 if white_box else samples
        reply = (
            'Reply as JSON: {"thought": "<one short sentence>", "tool": "<name>"}.'
            if self.thought
            else 'Reply as JSON: {"tool": "<name>"}.'
        )
        request = ChatRequest(
            messages=[
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": step_prompt(view) + "\n" + reply},
            ],
            temperature=0.0 if white_box else self.temperature,
            max_tokens=96 if self.thought else 48,
            n=n,
            json_schema=self._schema(names),
            logprobs=5 if white_box else None,
        )
        result = self._complete(request)
        if not white_box:
            return vote_from_samples([c.parsed["tool"] for c in result.choices], names)
        choice = result.choices[0]
        match = _NAME_START.search(choice.text)
        try:
            if match is None or not choice.logprobs:
                raise ValueError("no tool name or no log-probabilities in the answer")
            probs = distribution_from_logprobs(choice.text, choice.logprobs, names, match.end())
        except ValueError as exc:
            raise StructuredOutputError(
                f"white-box vote impossible ({exc}); answer {choice.text[:200]!r}. "
                f"Use --uncertainty sample with this backend."
            ) from exc
        return Vote(probs, "logprobs", tuple(names))

    def fill(self, view: StepView, tool: Tool, options: dict[str, list[JSONValue]]) -> JSONObject:
        known = "\n".join(f"  {label}: {_short(value)}" for label, value in view.known)
        properties = {name: {"enum": values} for name, values in options.items() if values}
        prompt = (
            f"Goal: {view.goal}\nKnown values:\n{known}\nCurrent step {view.index + 1}: {view.instruction}\n"
            f"Fill the arguments of {tool.name} ({tool.description}). Reply as JSON with keys "
            f"{', '.join(properties)}."
        )
        schema = {
            "type": "object",
            "properties": properties,
            "required": list(properties),
            "additionalProperties": False,
        }
        request = ChatRequest(
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
            temperature=0.0,
            max_tokens=96,
            json_schema=schema,
        )
        return dict(self._complete(request).parsed)
