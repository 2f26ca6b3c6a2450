"""The planning call as a tool any agent harness can use without changing its loop.

- :func:`openai_tool` / :func:`anthropic_tool`: tool definitions for the OpenAI (Chat Completions) and Anthropic
  (Messages) tool-calling APIs; :data:`PLAN_TOOL` is the same tool for metaharness's own model clients.
- :func:`call_plan_tool`: run a tool call's arguments and return the tool result (a JSON object with the route
  as guidance, or ``status: "no_route"`` and the reason).
- :func:`build_mcp_server`: an MCP server (official ``mcp`` SDK) with one tool, ``plan``;
  ``metaharness plan serve --model SPEC`` runs it over stdio.

The tool takes the history so far, the goal and the remaining budget per limit::

    {"history": ["player at (1,1), box at (2,1)"], "goal": "box on (3,1)", "budget": {"steps": 6}}
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import jsonschema

from metaharness.errors import InputError
from metaharness.models.types import ModelClient, Tool
from metaharness.planner.tps import plan

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

PLAN_TOOL_NAME = "plan"
PLAN_TOOL_DESCRIPTION = (
    "Plan the next actions under a budget. Give what happened so far (the last entry describes the current state), "
    "the goal, and the remaining budget per limit. Planning subagents sample several plans, predict the state and "
    "cost after each step, merge equal states into a graph and an exact solver picks the best route to the goal "
    "within the budget. Returns the route as guidance (each step's action, expected state and cost) or says that no "
    "feasible route exists. Follow it step by step and call again when what you observe differs from the expected "
    "state."
)
PLAN_TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "history": {
            "type": "array",
            "items": {"type": "string"},
            "description": "What happened so far, oldest first; the last entry describes the current state.",
        },
        "goal": {"type": "string", "description": "What counts as done."},
        "budget": {
            "type": "object",
            "additionalProperties": {"type": "number", "minimum": 0},
            "description": 'Remaining budget per limit, e.g. {"steps": 12} or {"steps": 12, "usd": 0.5}.',
        },
    },
    "required": ["history", "goal", "budget"],
    "additionalProperties": False,
}
PLAN_TOOL = Tool(PLAN_TOOL_NAME, PLAN_TOOL_DESCRIPTION, PLAN_TOOL_PARAMETERS)


def openai_tool() -> dict[str, Any]:
    """The tool for OpenAI's Chat Completions ``tools=[...]`` (``{"type": "function", "function": {...}}``)."""
    return {
        "type": "function",
        "function": {"name": PLAN_TOOL_NAME, "description": PLAN_TOOL_DESCRIPTION, "parameters": PLAN_TOOL_PARAMETERS},
    }


def anthropic_tool() -> dict[str, Any]:
    """The tool for Anthropic's Messages ``tools=[...]`` (``{"name", "description", "input_schema"}``)."""
    return {"name": PLAN_TOOL_NAME, "description": PLAN_TOOL_DESCRIPTION, "input_schema": PLAN_TOOL_PARAMETERS}


def call_plan_tool(arguments: Mapping[str, Any], *, model: ModelClient, **options: Any) -> dict[str, Any]:
    """Run the ``plan`` tool on a tool call's arguments; ``options`` go to :func:`metaharness.planner.tps.plan`.

    Arguments that do not match the tool's schema raise :class:`InputError` (send its message back to the model).
    """
    try:
        jsonschema.validate(dict(arguments), PLAN_TOOL_PARAMETERS)
    except jsonschema.ValidationError as exc:
        raise InputError(f"Bad arguments for the plan tool: {exc.message}.") from None
    result = plan(arguments["history"], arguments["goal"], arguments["budget"], model=model, **options)
    return {
        "status": result.status,
        "guidance": result.guidance(),
        "route": [
            {"action": s.action, "expected_state": s.state, "cost": dict(zip(result.task.limits, s.cost, strict=False))}
            for s in result.route
        ],
        "cost": dict(zip(result.task.limits, result.cost, strict=False)),
        "reason": result.reason,
    }


def build_mcp_server(model: ModelClient, **options: Any) -> MCPServer:
    """An MCP server whose ``plan`` tool runs :func:`call_plan_tool`; ``.run("stdio")`` serves it.

    mcp 2.x calls the high-level server ``MCPServer`` (``mcp.server.mcpserver``); 1.x called it ``FastMCP``
    (``mcp.server.fastmcp``), with the same ``tool`` decorator and ``run``.
    """
    import anyio

    server_class: type[MCPServer]
    try:
        from mcp.server import mcpserver

        server_class = mcpserver.MCPServer
    except ImportError:  # mcp 1.x, looked up by name: mypy reads the installed 2.x, which has no FastMCP
        server_class = importlib.import_module("mcp.server.fastmcp").FastMCP

    server = server_class("metaharness-planner")

    @server.tool(name=PLAN_TOOL_NAME, description=PLAN_TOOL_DESCRIPTION)
    async def plan_tool(history: list[str], goal: str, budget: dict[str, float]) -> dict[str, Any]:
        arguments = {"history": history, "goal": goal, "budget": budget}
        # Model calls block; run them off the event loop so the session keeps answering.
        return await anyio.to_thread.run_sync(lambda: call_plan_tool(arguments, model=model, **options))

    return server
