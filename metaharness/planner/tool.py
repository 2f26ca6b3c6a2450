"""The planning call as a tool any agent harness can use without changing its loop.

- ``openai_tool`` / ``anthropic_tool``: tool definitions for the OpenAI (Chat Completions) and Anthropic
  (Messages) tool-calling APIs; ``PLAN_TOOL`` is the same tool for metaharness's own model clients.
  ``openai_tool("solve")`` / ``anthropic_tool("solve")`` and ``SOLVE_TOOL`` are the second tool;
  ``openai_tools`` / ``anthropic_tools`` give both.
- ``call_plan_tool``: run a tool call's arguments and return the tool result (a JSON object with the route
  as guidance, or ``status: "no_route"`` and the reason); ``call_solve_tool`` solves a given plan graph;
  ``call_tool`` dispatches by name.
- ``build_mcp_server``: an MCP server (official ``mcp`` SDK) with the tools ``plan`` and ``solve``;
  ``metaharness plan serve --model SPEC`` runs it over stdio.

``plan`` takes the history so far, the goal and the remaining budget per limit, and per call optionally the number
of plans to sample, the horizon, the solver and the caller's own tools (then every route step is a tool call)::
    {"history": ["player at (1,1), box at (2,1)"], "goal": "box on (3,1)", "budget": {"steps": 6},
     "plans": 4, "horizon": 6, "solver": "exact",
     "tools": [{"name": "move", "description": "...", "parameters": {"type": "object", ...}}]}

``solve`` takes ``{"graph": PLAN_GRAPH, "solver": "exact", "time_limit": 10}`` with the plan graph of
``docs/plan-graph.md`` and returns that document's result object. The whole contract, results included, is
``docs/planning-session.md``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypedDict, overload

import jsonschema

from metaharness.errors import InputError, MetaharnessError
from metaharness.json_types import JSONObject
from metaharness.models.protocol import ModelClient, Tool
from metaharness.planner.graph import PlanGraph
from metaharness.planner.solve import solve
from metaharness.planner.subagents.tool_calls import ToolCallJSON
from metaharness.planner.tps import plan

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from metaharness.planner.result import PlanResultJSON
    from metaharness.planner.solve import SolverName

PLAN_TOOL_NAME = "plan"
PLAN_TOOL_DESCRIPTION = (
    "Plan the next actions under a budget. Give what happened so far (the last entry describes the current state), "
    "the goal, and the remaining budget per limit. Planning subagents sample several plans, predict the state and "
    "cost after each step, merge equal states into a graph and an exact solver picks the best route to the goal "
    "within the budget. Returns the route as guidance (each step's action, expected state and cost) or says that no "
    "feasible route exists. Follow it step by step and call again when what you observe differs from the expected "
    "state."
)
TOOL_SOLVERS: tuple[SolverName, ...] = ("exact", "ilp", "auto")
MAX_PLANS = 16
PLAN_TOOL_PARAMETERS: JSONObject = {
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
        "plans": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_PLANS,
            "description": "How many candidate plans to sample (M; default 4).",
        },
        "horizon": {"type": "integer", "minimum": 1, "description": "The most steps the route may take."},
        "solver": {"type": "string", "enum": list(TOOL_SOLVERS), "description": "The route solver (default exact)."},
        "tools": {
            "type": "array",
            "description": (
                "Your tools, to plan with: each step of the route is then one call "
                '{"tool": NAME, "arguments": {...}} whose arguments match that tool\'s JSON schema.'
            ),
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "description": {"type": "string"},
                    "parameters": {"type": "object", "description": "JSON schema of the arguments object."},
                },
                "required": ["name", "parameters"],
            },
        },
    },
    "required": ["history", "goal", "budget"],
    "additionalProperties": False,
}
PLAN_TOOL = Tool(PLAN_TOOL_NAME, PLAN_TOOL_DESCRIPTION, PLAN_TOOL_PARAMETERS)

SOLVE_TOOL_NAME = "solve"
SOLVE_TOOL_DESCRIPTION = (
    "Solve a plan graph you built: nodes (states, with rewards and goals) and edges (actions with a cost per "
    "limit), a start node and a budget. An exact solver returns the best walk from the start to a goal within the "
    "budget and horizon (edge ids, nodes, value, cost), or status infeasible."
)
SOLVE_TOOL_PARAMETERS: JSONObject = {
    "type": "object",
    "properties": {
        "graph": {
            "type": "object",
            "description": (
                'The plan graph, e.g. {"start": "s0", "budget": [6], "horizon": 10, "nodes": [{"id": "s0"}, '
                '{"id": "g", "reward": 1, "goal": true}], "edges": [{"id": "e1", "source": "s0", "target": "g", '
                '"action": "go", "cost": [1]}]}; budget and every cost have one number per limit.'
            ),
            "properties": {
                "start": {"type": ["string", "integer"]},
                "budget": {"type": "array", "items": {"type": "number", "minimum": 0}},
                "horizon": {"type": "integer", "minimum": 1},
                "discount": {"type": "number", "minimum": 0, "maximum": 1},
                "limits": {"type": "array", "items": {"type": "string"}},
                "nodes": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": ["string", "integer"]},
                            "reward": {"type": "number"},
                            "goal": {"type": "boolean"},
                            "dead_end": {"type": "boolean"},
                            "state": {"type": "string"},
                            "key": {"type": ["string", "null"]},
                        },
                        "required": ["id"],
                    },
                },
                "edges": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": ["string", "integer"]},
                            "source": {"type": ["string", "integer"]},
                            "target": {"type": ["string", "integer"]},
                            "action": {"type": "string"},
                            "cost": {"type": "array", "items": {"type": "number", "minimum": 0}},
                        },
                        "required": ["id", "source", "target", "cost"],
                    },
                },
            },
            "required": ["start", "budget", "nodes", "edges"],
        },
        "solver": {"type": "string", "enum": list(TOOL_SOLVERS), "description": "exact (default), ilp or auto."},
        "time_limit": {"type": "number", "exclusiveMinimum": 0, "description": "Seconds the ILP may take."},
    },
    "required": ["graph"],
    "additionalProperties": False,
}
SOLVE_TOOL = Tool(SOLVE_TOOL_NAME, SOLVE_TOOL_DESCRIPTION, SOLVE_TOOL_PARAMETERS)
TOOLS = {PLAN_TOOL_NAME: PLAN_TOOL, SOLVE_TOOL_NAME: SOLVE_TOOL}


def _tool(name: str) -> Tool:
    if name not in TOOLS:
        raise InputError(f"Unknown planner tool {name!r}; the tools are {', '.join(TOOLS)}.")
    return TOOLS[name]


def openai_tool(name: str = PLAN_TOOL_NAME) -> OpenAITool:
    """A tool for OpenAI's Chat Completions ``tools=[...]`` (``{"type": "function", "function": {...}}``)."""
    tool = _tool(name)
    function = FunctionSpec(name=tool.name, description=tool.description, parameters=tool.parameters)
    return OpenAITool(type="function", function=function)


def anthropic_tool(name: str = PLAN_TOOL_NAME) -> AnthropicTool:
    """A tool for Anthropic's Messages ``tools=[...]`` (``{"name", "description", "input_schema"}``)."""
    tool = _tool(name)
    return AnthropicTool(name=tool.name, description=tool.description, input_schema=tool.parameters)


def openai_tools() -> list[OpenAITool]:
    """Both tools, ``plan`` and ``solve``, for OpenAI."""
    return [openai_tool(name) for name in TOOLS]


def anthropic_tools() -> list[AnthropicTool]:
    """Both tools, ``plan`` and ``solve``, for Anthropic."""
    return [anthropic_tool(name) for name in TOOLS]


class FunctionSpec(TypedDict):
    name: str
    description: str
    parameters: JSONObject


class OpenAITool(TypedDict):
    """A tool for OpenAI's Chat Completions."""

    type: Literal["function"]
    function: FunctionSpec


class AnthropicTool(TypedDict):
    """A tool for Anthropic's Messages."""

    name: str
    description: str
    input_schema: JSONObject


class RouteStepResult(TypedDict, total=False):
    """A route step in the ``plan`` tool's result (``call`` only in a tool plan)."""

    action: str
    expected_state: str
    cost: dict[str, float]
    call: ToolCallJSON


class PlanToolResult(TypedDict):
    """The ``plan`` tool's result (``docs/planning-session.md``)."""

    status: Literal["route", "no_route"]
    guidance: str
    route: list[RouteStepResult]
    cost: dict[str, float]
    reason: str


def _validated(name: str, arguments: Mapping[str, object]) -> dict[str, object]:
    if not isinstance(arguments, Mapping):
        raise InputError(f"Bad arguments for the {name} tool: a JSON object is needed.")
    try:
        jsonschema.validate(dict(arguments), TOOLS[name].parameters)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        at = f" (at {where})" if where else ""
        raise InputError(f"Bad arguments for the {name} tool: {exc.message}{at}.") from None
    return dict(arguments)


PLAN_NEEDS_A_MODEL = (
    "The plan tool needs a model for its planning subagents: pass model=connect(SPEC) in Python, or start the "
    "server with `metaharness plan serve --model SPEC` (e.g. openai:MODEL@http://127.0.0.1:8000/v1); the solve "
    "tool needs none."
)


def call_plan_tool(
    arguments: Mapping[str, object], *, model: ModelClient | None = None, **options: Any
) -> PlanToolResult:
    """Run the ``plan`` tool on a tool call's arguments; ``options`` (the server's defaults) go to
    ``metaharness.planner.tps.plan``, and the call's own ``plans``, ``horizon``, ``solver`` and ``tools``
    override them.

    Arguments that do not match the tool's schema, and a call without ``model`` (and without stages in
    ``options``), raise ``InputError`` (send its message back to the model). The result's route steps carry
    ``call`` (``{"tool", "arguments"}``) when the call gave ``tools``.
    """
    arguments = _validated(PLAN_TOOL_NAME, arguments)
    if model is None and not all(options.get(stage) for stage in ("sampler", "simulator", "labeler")):
        raise InputError(PLAN_NEEDS_A_MODEL)
    per_call = ("plans", "horizon", "solver", "tools")
    options = {**options, **{key: arguments[key] for key in per_call if key in arguments}}
    history, goal, budget = arguments["history"], arguments["goal"], arguments["budget"]
    if not (isinstance(history, list) and isinstance(goal, str) and isinstance(budget, dict)):
        raise InputError("Bad arguments for the plan tool: history, goal and budget do not match the schema.")
    limits = {str(k): float(v) for k, v in budget.items()}
    result = plan([str(h) for h in history], goal, limits, model=model, **options)
    route = []
    for s in result.route:
        step = RouteStepResult(action=s.action, expected_state=s.expected_state, cost=dict(s.cost))
        if s.call is not None:
            step["call"] = s.call
        route.append(step)
    return PlanToolResult(
        status=result.status, guidance=result.guidance(), route=route, cost=result.cost, reason=result.reason
    )


def call_solve_tool(arguments: Mapping[str, object]) -> PlanResultJSON:
    """Run the ``solve`` tool: the result object of ``docs/plan-graph.md`` for the call's graph.

    A graph that does not match the schema, or that ``docs/plan-graph.md`` rejects, raises ``InputError``.
    """

    arguments = _validated(SOLVE_TOOL_NAME, arguments)
    graph = PlanGraph.from_json(arguments["graph"])
    solver = next(s for s in TOOL_SOLVERS if s == arguments.get("solver", "exact"))  # the schema checked the name
    time_limit = arguments.get("time_limit")
    result = solve(graph, solver=solver, time_limit=float(time_limit) if isinstance(time_limit, (int, float)) else None)
    return result.to_json()


@overload
def call_tool(
    name: Literal["solve"], arguments: Mapping[str, object], *, model: ModelClient | None = None, **options: Any
) -> PlanResultJSON: ...


@overload
def call_tool(
    name: Literal["plan"], arguments: Mapping[str, object], *, model: ModelClient | None = None, **options: Any
) -> PlanToolResult: ...


@overload
def call_tool(
    name: str, arguments: Mapping[str, object], *, model: ModelClient | None = None, **options: Any
) -> PlanToolResult | PlanResultJSON: ...


def call_tool(
    name: str, arguments: Mapping[str, object], *, model: ModelClient | None = None, **options: Any
) -> PlanToolResult | PlanResultJSON:
    """Dispatch a tool call by name (``plan`` or ``solve``); ``options`` go to ``call_plan_tool``. ``solve``
    needs no model; ``plan`` without one raises ``InputError`` saying so."""
    if _tool(name).name == SOLVE_TOOL_NAME:
        return call_solve_tool(arguments)
    return call_plan_tool(arguments, model=model, **options)


def build_mcp_server(model: ModelClient | None = None, **options: Any) -> MCPServer:
    """An MCP server with the tools ``plan`` (``call_plan_tool``) and ``solve`` (``call_solve_tool``);
    ``.run("stdio")`` serves it. Without ``model`` it still lists both, ``solve`` works and ``plan`` answers with
    an error saying that it needs a model.

    mcp 2.x calls the high-level server ``MCPServer`` (``mcp.server.mcpserver``); 1.x called it ``FastMCP``
    (``mcp.server.fastmcp``), with the same ``tool`` decorator and ``run``.
    """
    # The MCP libraries are heavy: loaded only to serve.
    import anyio

    server_class: type[MCPServer]
    try:
        from mcp.server import mcpserver

        server_class = mcpserver.MCPServer
    except ImportError:  # mcp 1.x, looked up by name: mypy reads the installed 2.x, which has no FastMCP
        server_class = importlib.import_module("mcp.server.fastmcp").FastMCP

    tool_error: type[Exception]
    try:
        from mcp.server.mcpserver.exceptions import ToolError

        tool_error = ToolError
    except ImportError:  # mcp 1.x
        tool_error = importlib.import_module("mcp.server.fastmcp.exceptions").ToolError

    def run(call: Callable[[], Mapping[str, object]]) -> dict[str, Any]:
        """A user-facing error reaches the client as the tool's error text (the SDK hides other exceptions)."""
        try:
            return dict(call())
        except MetaharnessError as exc:
            raise tool_error(str(exc)) from exc

    server = server_class("metaharness-planner")

    @server.tool(name=PLAN_TOOL_NAME, description=PLAN_TOOL_DESCRIPTION)
    async def plan_tool(
        history: list[str],
        goal: str,
        budget: dict[str, float],
        plans: int | None = None,
        horizon: int | None = None,
        solver: Literal["exact", "ilp", "auto"] | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        given = {"plans": plans, "horizon": horizon, "solver": solver, "tools": tools}
        arguments: dict[str, object] = {"history": history, "goal": goal, "budget": budget}
        arguments.update({k: v for k, v in given.items() if v is not None})
        # Model calls block; run them off the event loop so the session keeps answering.
        return await anyio.to_thread.run_sync(run, lambda: call_plan_tool(arguments, model=model, **options))

    @server.tool(name=SOLVE_TOOL_NAME, description=SOLVE_TOOL_DESCRIPTION)
    async def solve_tool(
        graph: dict[str, Any],
        solver: Literal["exact", "ilp", "auto"] | None = None,
        time_limit: float | None = None,
    ) -> dict[str, Any]:
        given = {"solver": solver, "time_limit": time_limit}
        arguments = {"graph": graph, **{k: v for k, v in given.items() if v is not None}}
        return await anyio.to_thread.run_sync(run, lambda: call_solve_tool(arguments))

    return server
