"""Shared by the model-backed stages: the model, answer length, re-asks, and a log of every model exchange."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from metaharness.models.protocol import ModelClient
from metaharness.planner.asking import DEFAULT_ATTEMPTS, ask_json


class ModelStage:
    """A stage that asks ``model`` for schema-constrained JSON; :meth:`take_calls` hands its log to the record."""

    def __init__(
        self, model: ModelClient, *, max_tokens: int = 512, attempts: int = DEFAULT_ATTEMPTS, temperature: float = 0.0
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.attempts = attempts
        self.temperature = temperature
        self._calls: list[dict[str, Any]] = []

    def ask(
        self, system: str, user: str, schema: dict[str, Any], check: Callable[[Any], str | None] | None = None
    ) -> Any | None:
        """The parsed answer, or None when every attempt was malformed (the log says how)."""
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

    def take_calls(self) -> list[dict[str, Any]]:
        calls, self._calls = self._calls, []
        return calls
