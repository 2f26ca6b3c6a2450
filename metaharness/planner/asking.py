"""Asking a model for JSON that must also make sense: schema-constrained requests, checks, and re-asking.

The model client already enforces the JSON schema (with one repair request). The planner adds semantic checks a
schema cannot express (a cost vector per limit, one state per subplan) and re-asks with the problem named, so a
malformed subagent answer is repaired or re-asked and never crashes a planning call. Every attempt is returned for
the planning record.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypedDict

import jsonschema

from metaharness.json_types import JSONValue
from metaharness.models.protocol import ChatRequest, ModelClient, StructuredOutputError

DEFAULT_ATTEMPTS = 3


class Attempt(TypedDict):
    """One attempt of ``ask_json``, for the planning record: the answer's text, its JSON, what was wrong."""

    text: str
    parsed: JSONValue
    error: str | None


def members(answer: JSONValue, key: str) -> list[JSONValue]:
    """``answer[key]`` of a schema-checked answer where the schema makes it a list; [] where it is not one."""
    found = answer.get(key) if isinstance(answer, dict) else None
    return found if isinstance(found, list) else []


def text_at(answer: JSONValue, key: str) -> str:
    """``answer[key]`` where the schema makes it a string; "" where it is not one."""
    found = answer.get(key) if isinstance(answer, dict) else None
    return found if isinstance(found, str) else ""


def strings(values: list[JSONValue]) -> list[str]:
    """The strings of a schema-checked list of strings."""
    return [v for v in values if isinstance(v, str)]


def numbers(values: list[JSONValue]) -> list[float]:
    """The numbers of a schema-checked list of numbers, as floats."""
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def ask_json(
    model: ModelClient,
    messages: list[dict[str, str]],
    schema: dict[str, Any],
    *,
    check: Callable[[JSONValue], str | None] | None = None,
    attempts: int = DEFAULT_ATTEMPTS,
    max_tokens: int = 512,
    temperature: float = 0.0,
) -> tuple[Any | None, list[Attempt]]:
    """Return (the first answer that validates and passes ``check``, or None; the log of every attempt).

    ``check`` returns what is wrong with a parsed answer, or None when it is usable. Model failures the user must
    fix (missing key, budget exceeded) propagate; malformed answers only cost an attempt. An attempt that fails
    exactly as the one before it ends the asking: the model repeats itself (at temperature 0 it always will), and
    each further attempt would cost as much for the same answer.
    """
    conversation = list(messages)
    log: list[Attempt] = []
    for _ in range(max(1, attempts)):
        request = ChatRequest(conversation, temperature=temperature, max_tokens=max_tokens, json_schema=schema)
        text, value = "", None
        try:
            result = model.complete(request, role="subagent")
            text, value = result.text, result.parsed
            if value is None:
                value = json.loads(text)
            jsonschema.validate(value, schema)
            problem = check(value) if check else None
        except StructuredOutputError as exc:
            problem = str(exc)
        except json.JSONDecodeError as exc:
            problem = f"the answer is not valid JSON ({exc.msg})"
        except jsonschema.ValidationError as exc:
            problem = f"the JSON does not match the schema: {exc.message}"
        repeated = bool(log) and log[-1]["text"] == text and log[-1]["error"] == problem
        log.append({"text": text, "parsed": value, "error": problem})
        if problem is None:
            return value, log
        if repeated:
            break
        conversation = [
            *conversation,
            {"role": "assistant", "content": text or "(no usable answer)"},
            {
                "role": "user",
                "content": f"That answer cannot be used: {problem}. Reply again with JSON only, fixing this.",
            },
        ]
    return None, log
