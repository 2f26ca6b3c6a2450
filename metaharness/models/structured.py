"""Checking structured output (JSON-schema answers, forced tool calls) and asking once for a repair.

Backends constrain output where they can (grammars, response formats, forced tools), but a server may ignore the
constraint or cut the answer at ``max_tokens``; the client layer therefore validates every choice here and sends
one repair request for a choice that fails before raising ``StructuredOutputError``.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import jsonschema

from metaharness.json_types import JSONObject
from metaharness.models.protocol import ChatRequest, Choice, Tool, ToolCall

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def schema_error(value: Any, schema: Mapping[str, object]) -> str | None:
    """The first way ``value`` violates ``schema`` as a readable sentence, or None when it validates."""
    validator_cls = jsonschema.validators.validator_for(schema)
    error = jsonschema.exceptions.best_match(validator_cls(schema).iter_errors(value))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "the top level"
    return f"at {where}: {error.message}"


def parse_json(text: str) -> tuple[Any, str | None]:
    """Parse a JSON answer, tolerating a Markdown code fence; returns (value, error)."""
    match = _FENCE.match(text)
    body = match.group(1) if match else text.strip()
    try:
        return json.loads(body), None
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at character {exc.pos})"


def check_choice(request: ChatRequest, choice: Choice) -> str | None:
    """Fill ``choice.parsed`` for schema requests; return what is wrong with the choice, or None."""
    if request.json_schema is not None:
        value, error = parse_json(choice.text)
        if error:
            return error
        error = schema_error(value, request.json_schema)
        if error:
            return f"the JSON does not match the schema {error}"
        choice.parsed = value
    forced = forced_tool_name(request)
    if forced is not None:
        calls = [c for c in choice.tool_calls if forced == "*" or c.name == forced]
        if not calls:
            return f"no call of the tool {forced!r} was made" if forced != "*" else "no tool was called"
        tools = {t.name: t for t in request.tools or []}
        for call in calls:
            tool = tools.get(call.name)
            if tool is None:
                return f"the tool {call.name!r} does not exist"
            error = schema_error(call.arguments, tool.parameters)
            if error:
                return f"the arguments of {call.name!r} do not match its schema {error}"
    return None


def forced_tool_name(request: ChatRequest) -> str | None:
    """The tool every choice must call: its name, ``"*"`` for "required" (any tool), None when not forced."""
    if not request.tools or request.tool_choice in (None, "auto", "none"):
        return None
    return "*" if request.tool_choice == "required" else request.tool_choice


def repair_request(request: ChatRequest, choice: Choice, problem: str) -> ChatRequest:
    """The one follow-up request that shows the model its faulty answer and what is wrong with it."""
    if choice.tool_calls:
        shown = json.dumps([{"name": c.name, "arguments": c.arguments} for c in choice.tool_calls])
    else:
        shown = choice.text
    if request.json_schema is not None:
        ask = (
            f"Your answer was invalid: {problem}. Reply again with only a JSON value that matches this schema, "
            f"nothing else:\n{json.dumps(request.json_schema)}"
        )
    else:
        ask = f"Your tool call was invalid: {problem}. Call the tool again with arguments that match its schema."
    messages = [*request.messages, {"role": "assistant", "content": shown}, {"role": "user", "content": ask}]
    return replace(request, messages=messages, n=1)


def tool_call_schema(tools: list[Tool]) -> JSONObject:
    """Schema of ``{"name": ..., "arguments": {...}}`` for a call of any one of ``tools``."""
    return {
        "anyOf": [
            {
                "type": "object",
                "properties": {"name": {"const": t.name}, "arguments": t.parameters},
                "required": ["name", "arguments"],
            }
            for t in tools
        ]
    }


def tools_prompt(tools: list[Tool], forced: str | None) -> str:
    """A system note describing the tools, for backends whose chat template cannot show them (``forced`` as in
    ``forced_tool_name``)."""
    described = "\n".join(
        f"- {t.name}: {t.description} Arguments (JSON schema): {json.dumps(t.parameters)}" for t in tools
    )
    if forced not in (None, "*"):
        tool = next(t for t in tools if t.name == forced)
        return (
            f"Call the tool {tool.name}: {tool.description}\nReply with only its arguments as one JSON object "
            f"matching this schema: {json.dumps(tool.parameters)}"
        )
    how = 'reply with only {"name": TOOL_NAME, "arguments": {...}}'
    if forced == "*":
        return f"Call one of these tools; {how}.\n{described}"
    return f"You may call one of these tools; to call one, {how}. Otherwise answer normally.\n{described}"


def tool_call_from_text(text: str, request: ChatRequest) -> ToolCall | None:
    """A tool call the model wrote as JSON text (backends that constrain it by grammar or response format): the
    arguments object of the forced tool, or ``{"name": ..., "arguments": {...}}`` naming one of the tools."""
    value, error = parse_json(text)
    if error is not None or not isinstance(value, dict):
        return None
    forced = forced_tool_name(request)
    if forced not in (None, "*"):
        return ToolCall(f"call_{uuid.uuid4().hex[:12]}", forced, value)
    names = {t.name for t in request.tools or []}
    if value.get("name") in names and isinstance(value.get("arguments"), dict):
        return ToolCall(f"call_{uuid.uuid4().hex[:12]}", value["name"], value["arguments"])
    return None
