"""Tool plans: when the planning call gets the harness's tools, every subplan is one call of one of them.

A tool is a name, a description and the JSON schema of its arguments object (``ToolSpec``; OpenAI's and
Anthropic's tool definitions and metaharness's ``Tool`` are accepted as they are).
A step of a tool plan is the call ``{"tool": NAME, "arguments": {...}}``; as a subplan (the text the simulator and
the graph see) it is that object as canonical JSON (``call_text``). ``check_call`` validates a call
against its tool's schema with ``jsonschema``, so a route's calls can be executed as they are.

``calls_schema`` is the JSON schema a stage-1 sampler asks tool plans under (``ToolCallPlanSampler`` in
``.sampler``): its steps are exactly the tools' calls (one ``anyOf`` branch per tool, with the tool's own argument
schema).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

import jsonschema

from metaharness.errors import InputError
from metaharness.json_types import JSONObject, JSONValue
from metaharness.planner.subagents.model_stage import plans_schema

CALL_FORMAT = 'as JSON {"tool": NAME, "arguments": {...}} with arguments that match the tool\'s schema'
_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,64}")


class ToolCallJSON(TypedDict):
    """A step of a tool plan: ``{"tool": NAME, "arguments": {...}}``."""

    tool: str
    arguments: JSONObject


class ToolSpecJSON(TypedDict):
    name: str
    description: str
    parameters: JSONObject


@dataclass(frozen=True)
class ToolSpec:
    """One of the harness's tools: ``parameters`` is the JSON schema of its arguments object."""

    name: str
    description: str = ""
    parameters: JSONObject = field(default_factory=lambda: {"type": "object"}, hash=False)

    @classmethod
    def of(cls, tool: object) -> ToolSpec:
        """A tool in any accepted form: a ToolSpec or metaharness ``Tool``, OpenAI's
        ``{"type": "function", "function": {...}}``, Anthropic's ``{"name", "description", "input_schema"}``, or
        ``{"name", "description", "parameters"}``. Raises ``InputError`` naming what is wrong."""
        if isinstance(tool, ToolSpec):
            return tool
        if not isinstance(tool, Mapping):
            name, description, parameters = (getattr(tool, a, None) for a in ("name", "description", "parameters"))
        else:
            data = tool.get("function", tool) if tool.get("type") == "function" else tool
            name, description = data.get("name"), data.get("description", "")
            parameters = data.get("parameters", data.get("input_schema", {"type": "object"}))
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InputError(f"A tool needs a name of 1-64 letters, digits, '_', '-' or '.'; got {name!r}.")
        if not isinstance(parameters, Mapping):
            raise InputError(f"The arguments schema of tool {name!r} must be a JSON object; got {parameters!r}.")
        try:
            jsonschema.Draft202012Validator.check_schema(dict(parameters))
        except jsonschema.SchemaError as exc:
            raise InputError(
                f"The arguments schema of tool {name!r} is not a valid JSON schema: {exc.message}."
            ) from None
        return cls(name, str(description or ""), json.loads(json.dumps(dict(parameters))))

    def to_json(self) -> ToolSpecJSON:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


def tool_specs(tools: Sequence[object]) -> tuple[ToolSpec, ...]:
    """Normalise the harness's tools (see ``ToolSpec.of``); names must be unique."""
    if isinstance(tools, (str, Mapping)):
        raise InputError("tools must be a list of tool definitions.")
    specs = tuple(ToolSpec.of(t) for t in tools)
    names = [t.name for t in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InputError(f"Tool names must be unique; repeated: {', '.join(duplicates)}.")
    return specs


def call_text(call: JSONValue) -> str:
    """A call as the subplan text of a tool plan: canonical JSON, so equal calls are equal subplans."""
    if not isinstance(call, dict):
        raise InputError(f"{str(call)[:80]!r} is not a tool call ({CALL_FORMAT})")
    return json.dumps({"tool": call["tool"], "arguments": call["arguments"]}, sort_keys=True)


def check_call(call: object, tools: Sequence[ToolSpec]) -> str | None:
    """What is wrong with ``call`` (a dict, or its JSON text) for these tools, or None when it can be executed."""
    if isinstance(call, str):
        text = call
        try:
            call = json.loads(text)
        except json.JSONDecodeError:
            return f"{text[:80]!r} is not a tool call ({CALL_FORMAT})"
    if not isinstance(call, Mapping):
        return f"{str(call)[:80]!r} is not a tool call ({CALL_FORMAT})"
    if set(call) != {"tool", "arguments"}:
        return f"{str(call)[:80]!r} is not a tool call ({CALL_FORMAT})"
    tool = next((t for t in tools if t.name == call["tool"]), None)
    if tool is None:
        return f"unknown tool {call['tool']!r}; the tools are {', '.join(t.name for t in tools)}"
    try:
        jsonschema.validate(call["arguments"], tool.parameters)
    except jsonschema.ValidationError as exc:
        return f"the arguments of {tool.name} do not match its schema: {exc.message}"
    return None


def parse_call(text: str) -> ToolCallJSON:
    """The call a tool plan's subplan holds (checked with ``check_call`` when the plan was sampled)."""
    call = json.loads(text)
    return {"tool": call["tool"], "arguments": call["arguments"]}


def calls_schema(tools: Sequence[ToolSpec], plans: int, max_steps: int) -> JSONObject:
    """JSON schema of the sampler's answer: up to ``plans`` plans of up to ``max_steps`` calls of these tools."""
    call: JSONObject = {
        "anyOf": [
            {
                "type": "object",
                "properties": {"tool": {"const": t.name}, "arguments": t.parameters},
                "required": ["tool", "arguments"],
            }
            for t in tools
        ]
    }
    return plans_schema(plans, "calls", call, max_steps)
