"""A stand-in for the task model: answers that cost nothing and vary on purpose, to learn whether they matter.

Whether a harness's output depends on what the model answers is a question about the harness, not the model: run
it with two or three stand-ins that answer every request differently (``salt``) and compare. Where every output is
the same, the model's answers did not matter there, so the harness can be scored with no model call at all
(``metaharness.search.model_free``).

A stand-in answers from answers a harness is able to read, so that the paths that read them run: the assistant
turns of the request itself (a few-shot prompt's answers are written the way the harness parses them) and the
``answers`` it was given (the task's training answers, the run's recorded responses), never random text: the first
salt answers like one of the request's assistant turns when it has any, the others take the next answers in turn.
Which one is a function of the request and the salt alone (sha256, no process state), and two salts below the
number of answers never give one request the same answer. A JSON-schema request gets a value of its schema built
from the same choice (an enum's member, a string answer, ...). Nothing is charged: the result's usage is zero and
``charged`` is False; there is no ledger. Like a real server, a stand-in ends a plain answer before the first of
the request's ``stop`` strings (the stop string not included), so a harness sees its answers in the form the model's
come in.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from metaharness.models.protocol import ChatRequest, ChatResult, Choice, Role, Usage

STAND_IN_SPEC = "stand-in:varied-answers"


class StandInClient:
    """A ``ModelClient`` whose answers vary with ``salt`` (see the module docstring); ``context_window`` is the
    real model's, so harnesses that fit their prompts to it build the same requests. With ``repeats``, the n-th
    repeat of a request is answered as salt ``salt + n`` would answer it: one run over the examples repeated
    asks every example under several answers."""

    spec = STAND_IN_SPEC

    def __init__(
        self, answers: Sequence[str], salt: int, context_window: int | None = None, *, repeats: bool = False
    ) -> None:
        self.answers = list(dict.fromkeys(a for a in answers if isinstance(a, str) and a.strip())) or ["yes", "no"]
        self.salt = salt
        if context_window:
            self.context_window = context_window
        self.repeats = repeats
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()

    def complete(self, request: ChatRequest, *, role: Role = "task") -> ChatResult:
        shown = [str(m.get("content")) for m in request.messages if m.get("role") == "assistant" and m.get("content")]
        pool = list(dict.fromkeys([*shown, *self.answers]))
        key = json.dumps(
            [request.messages, request.max_tokens, request.stop, request.json_schema], sort_keys=True, default=str
        )
        start = int.from_bytes(hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()[:8], "big")
        salt = self.salt
        if self.repeats:  # each repeat of a request is answered with the next salt
            with self._lock:
                salt += self._seen[key]
                self._seen[key] += 1
        # The first salt answers as the request's own assistant turns do (the form the harness was written to
        # read), when it has any; every other salt takes the next answers of the pool, so no two salts agree.
        first = start % len(dict.fromkeys(shown)) if shown else start % len(pool)
        choices = []
        for k in range(max(1, request.n)):
            pick = first + salt + k
            text = pool[pick % len(pool)]
            if request.json_schema is not None:
                parsed = schema_value(request.json_schema, text, pick)
                choices.append(Choice(json.dumps(parsed, ensure_ascii=False), parsed=parsed, finish_reason="stop"))
            else:
                choices.append(Choice(_stopped(text, request.stop), finish_reason="stop"))
        return ChatResult(choices, Usage(), 0.0, self.spec, cached=False, charged=False)


def _stopped(text: str, stop: Sequence[str] | None) -> str:
    """``text`` up to the first place any of the ``stop`` strings begins (all of it when none occurs)."""
    ends = [text.find(s) for s in stop or () if s and s in text]
    return text[: min(ends)] if ends else text


def schema_value(schema: Any, text: str, pick: int) -> Any:
    """A value of the JSON ``schema`` made from ``text`` and the number ``pick`` (which member of an enum, which
    branch of an anyOf): an enum's member, ``text`` for a string, a number for a number, an object with its
    required properties (all of them when none is marked), a one-item array, ``None`` for a null."""
    if not isinstance(schema, dict):
        return text
    for choice in ("enum", "anyOf", "oneOf"):
        options = schema.get(choice)
        if isinstance(options, list) and options:
            picked = options[pick % len(options)]
            return picked if choice == "enum" else schema_value(picked, text, pick)
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        given, asked = schema.get("properties"), schema.get("required")
        properties: dict[str, Any] = given if isinstance(given, dict) else {}
        required: list[str] = asked if isinstance(asked, list) else list(properties)
        return {name: schema_value(properties.get(name, {}), text, pick + i) for i, name in enumerate(required)}
    if kind == "array":
        least = schema.get("minItems", 1)
        count = max(1, least if isinstance(least, int) else 1)
        return [schema_value(schema.get("items", {}), text, pick + i) for i in range(count)]
    if kind in ("integer", "number"):
        low = schema.get("minimum", 0)
        return (low if isinstance(low, (int, float)) else 0) + pick % 7
    if kind == "boolean":
        return pick % 2 == 1
    if kind == "null":
        return None
    return text
