"""Shared by the model-backed stages: the model, answer length, re-asks, and a log of every model exchange."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

from metaharness.json_types import JSONObject, JSONValue
from metaharness.models.protocol import ModelClient
from metaharness.planner.asking import DEFAULT_ATTEMPTS, Attempt, ask_json

# The longest plan a model sampler proposes (fewer when a steps budget allows fewer: see ``tps.plan``).
DEFAULT_MAX_STEPS = 8


class StageOptions(TypedDict, total=False):
    """The options of a model-backed stage that its subclasses pass on (``**options``)."""

    max_tokens: int
    attempts: int
    temperature: float


class StageCall(TypedDict):
    """One question a stage asked, for the planning record: the prompt, the schema and every attempt."""

    system: str
    user: str
    schema: dict[str, Any]
    attempts: list[Attempt]


class ModelStage:
    """A stage that asks ``model`` for schema-constrained JSON; ``take_calls`` hands its log to the record."""

    def __init__(
        self, model: ModelClient, *, max_tokens: int = 512, attempts: int = DEFAULT_ATTEMPTS, temperature: float = 0.0
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.attempts = attempts
        self.temperature = temperature
        self._calls: list[StageCall] = []

    def ask(
        self, system: str, user: str, schema: dict[str, Any], check: Callable[[JSONValue], str | None] | None = None
    ) -> Any | None:
        """The parsed answer (schema-checked: a JSON object for an object schema), or None when every attempt was
        malformed (the log says how)."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        value, attempts = ask_json(
            self.model,
            messages,
            schema,
            check=check,
            attempts=self.attempts,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
        )
        self._calls.append({"system": system, "user": user, "schema": schema, "attempts": attempts})
        return value

    def take_calls(self) -> list[StageCall]:
        calls, self._calls = self._calls, []
        return calls


def plans_schema(plans: int, key: str, step: JSONObject, max_steps: int) -> JSONObject:
    """JSON schema of a sampler's answer: ``{"plans": [{key: [step, ...]}, ...]}``, 1 to ``plans`` plans of 1 to
    ``max_steps`` steps each."""
    steps: JSONObject = {"type": "array", "minItems": 1, "maxItems": max_steps, "items": step}
    plan: JSONObject = {"type": "object", "properties": {key: steps}, "required": [key]}
    return {
        "type": "object",
        "properties": {"plans": {"type": "array", "minItems": 1, "maxItems": plans, "items": plan}},
        "required": ["plans"],
    }
