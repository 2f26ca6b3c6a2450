"""The planning tool: OpenAI/Anthropic tool definitions, the Python call, and a real MCP client session against
``metaharness plan serve`` backed by a scripted model the test serves over OpenAI's HTTP API."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

import anyio
import jsonschema
import pytest
from fakes import FixedPlans, ScriptedModel, ServedModel
from pydantic import TypeAdapter

from metaharness.errors import InputError
from metaharness.planner.tool import (
    PLAN_TOOL_PARAMETERS,
    anthropic_tool,
    anthropic_tools,
    call_plan_tool,
    call_solve_tool,
    call_tool,
    openai_tool,
    openai_tools,
)


def test_openai_tools_match_the_published_shape():
    from openai.types.chat import ChatCompletionToolParam

    assert openai_tool() == openai_tools()[0]
    for tool in openai_tools():
        TypeAdapter(ChatCompletionToolParam).validate_python(tool)
        assert tool["type"] == "function" and set(tool["function"]) == {"name", "description", "parameters"}
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", tool["function"]["name"])  # OpenAI's rule for function names
        jsonschema.Draft202012Validator.check_schema(tool["function"]["parameters"])
    assert [t["function"]["name"] for t in openai_tools()] == ["plan", "solve"]
    options = openai_tool("plan")["function"]["parameters"]["properties"]
    assert isinstance(options, dict) and {"plans", "horizon", "solver", "tools"} <= set(options)


def test_anthropic_tools_match_the_published_shape():
    from anthropic.types import ToolParam

    assert anthropic_tool() == anthropic_tools()[0]
    for tool in anthropic_tools():
        TypeAdapter(ToolParam).validate_python(tool)
        assert set(tool) == {"name", "description", "input_schema"} and tool["input_schema"]["type"] == "object"
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", tool["name"])
        jsonschema.Draft202012Validator.check_schema(tool["input_schema"])
    assert [t["name"] for t in anthropic_tools()] == ["plan", "solve"]


def test_tool_arguments_are_validated():
    jsonschema.validate({"history": ["x"], "goal": "y", "budget": {"steps": 3}}, PLAN_TOOL_PARAMETERS)
    with pytest.raises(InputError, match="Bad arguments for the plan tool"):
        call_plan_tool({"history": ["x"], "goal": "y", "budget": {"steps": -1}}, model=None)
    with pytest.raises(InputError, match=r"Bad arguments for the plan tool: .* \(at plans\)"):
        call_plan_tool({"history": ["x"], "goal": "y", "budget": {"steps": 1}, "plans": 0}, model=None)
    with pytest.raises(InputError, match="Bad arguments for the solve tool"):
        call_solve_tool({"graph": {"start": "s0"}})
    with pytest.raises(InputError, match="Unknown planner tool 'act'"):
        call_tool("act", {}, model=None)


GRAPH: dict[str, Any] = {
    "start": "s0",
    "budget": [6, 2.5],
    "horizon": 20,
    "nodes": [{"id": "s0"}, {"id": "a"}, {"id": "g", "reward": 1, "goal": True}],
    "edges": [
        {"id": "e1", "source": "s0", "target": "g", "action": "direct", "cost": [1, 3]},
        {"id": "e2", "source": "s0", "target": "a", "action": "walk", "cost": [1, 1]},
        {"id": "e3", "source": "a", "target": "g", "action": "walk", "cost": [1, 1]},
    ],
}


def test_solve_tool_returns_the_plan_graph_result():
    for solver in ("exact", "ilp", "auto"):
        answer = call_tool("solve", {"graph": GRAPH, "solver": solver}, model=None)
        assert (answer["status"], answer["path"], answer["cost"]) == ("optimal", ["e2", "e3"], [2.0, 2.0])
    with pytest.raises(InputError, match="unknown"):
        call_solve_tool({"graph": {**GRAPH, "edges": [{**GRAPH["edges"][0], "target": "nowhere"}]}})


# --- a scripted model served over HTTP: the model backend this test controls -----------------------------------


DOOR_TOOLS = [
    {
        "name": "pick_up",
        "description": "Pick up an object.",
        "parameters": {"type": "object", "properties": {"item": {"enum": ["key", "box"]}}, "required": ["item"]},
    },
    {
        "name": "open",
        "description": "Open something, optionally with an object held.",
        "parameters": {
            "type": "object",
            "properties": {"what": {"type": "string"}, "using": {"type": "string"}},
            "required": ["what"],
            "additionalProperties": False,
        },
    },
]


def _answer(request) -> dict:
    system, user = request.messages[0]["content"], request.messages[-1]["content"]
    if system.startswith("You are the plan sampler") and "calls" in str(request.json_schema):
        m = request.json_schema["properties"]["plans"]["maxItems"]
        return {
            "plans": [
                {
                    "calls": [
                        {"tool": "pick_up", "arguments": {"item": "key"}},
                        {"tool": "open", "arguments": {"what": "door", "using": "key"}},
                    ]
                },
                {"calls": [{"tool": "open", "arguments": {"what": "door"}}]},
            ][:m]
        }
    if system.startswith("You are the state simulator") and '"tool"' in user:
        if "pick_up" in user:
            return {"steps": [{"state": "holding the key", "cost": [1]}, {"state": "door open", "cost": [1]}]}
        return {"steps": [{"state": "door locked", "cost": [1]}]}
    if system.startswith("You are the plan sampler"):  # as a grammar would: no plan longer than the schema allows
        longest = request.json_schema["properties"]["plans"]["items"]["properties"]["subplans"]["maxItems"]
        plans = [{"subplans": ["take key", "open door"]}, {"subplans": ["kick door"]}]
        return {"plans": [p for p in plans if len(p["subplans"]) <= longest]}
    if system.startswith("You are the state simulator"):
        if "kick door" in user:
            return {"steps": [{"state": "door broken", "cost": [3]}]}
        return {"steps": [{"state": "holding the key", "cost": [1]}, {"state": "door open", "cost": [1]}]}
    if system.startswith("You are the state merger"):
        return {"same": False}
    if system.startswith("You are the reward labeler"):
        states = re.findall(r"^\d+\. (.*)$", user.split("States:")[-1], flags=re.MULTILINE)
        return {"labels": [1 if "door open" in s else -1 if "broken" in s or "locked" in s else 0 for s in states]}
    raise AssertionError(f"unexpected prompt: {system[:60]}")


def test_tool_plans_route_through_validated_tool_calls():
    from metaharness.planner import PlanningSession, plan

    model = ScriptedModel(_answer)
    result = plan(
        ["At the door; the key is on the table."], "open the door", {"steps": 4}, model=model, tools=DOOR_TOOLS
    )
    assert result.status == "route"
    assert [s.call for s in result.route] == [
        {"tool": "pick_up", "arguments": {"item": "key"}},
        {"tool": "open", "arguments": {"what": "door", "using": "key"}},
    ]
    sampler_request = model.requests[0]
    assert sampler_request.json_schema is not None
    branches = sampler_request.json_schema["properties"]["plans"]["items"]["properties"]["calls"]["items"]["anyOf"]
    assert [b["properties"]["tool"]["const"] for b in branches] == ["pick_up", "open"]
    assert branches[0]["properties"]["arguments"] == DOOR_TOOLS[0]["parameters"]
    assert "pick_up: Pick up an object." in sampler_request.messages[-1]["content"]  # every stage sees the tools
    # OpenAI's and Anthropic's tool definitions are taken as they are; a session hands out the calls step by step
    tools = [openai_tool_of(DOOR_TOOLS[0]), anthropic_tool_of(DOOR_TOOLS[1])]
    session = PlanningSession("open the door", {"steps": 4}, model=ScriptedModel(_answer), tools=tools)
    session.plan(["At the door; the key is on the table."])
    assert session.step is not None and session.step.call == {"tool": "pick_up", "arguments": {"item": "key"}}
    step = session.observe("holding the key", {"steps": 1}).step
    assert step is not None and step.call is not None and step.call["tool"] == "open"
    assert call_plan_tool(
        {"history": ["At the door."], "goal": "open the door", "budget": {"steps": 4}, "tools": DOOR_TOOLS},
        model=ScriptedModel(_answer),
    )["route"][0]["call"] == {"tool": "pick_up", "arguments": {"item": "key"}}


def openai_tool_of(tool):
    return {"type": "function", "function": tool}


def anthropic_tool_of(tool):
    return {"name": tool["name"], "description": tool["description"], "input_schema": tool["parameters"]}


def test_tool_plans_drop_calls_that_do_not_validate():
    from metaharness.planner import plan

    sampler = FixedPlans(
        ['{"tool": "pick_up", "arguments": {"item": "hammer"}}'],  # not in the enum
        ['{"tool": "fly", "arguments": {}}'],
    )

    result = plan(
        ["At the door."],
        "open the door",
        {"steps": 4},
        model=ScriptedModel(_answer),
        sampler=sampler,
        tools=DOOR_TOOLS,
    )
    assert result.status == "no_route" and "whose tool calls all validate" in result.reason
    dropped = result.stages[0]["dropped"]
    assert "'hammer' is not one of ['key', 'box']" in dropped[0] and "unknown tool 'fly'" in dropped[1]
    with pytest.raises(InputError, match="not a valid JSON schema"):
        plan(["x"], "y", {"steps": 1}, model=ScriptedModel(_answer), tools=[{"name": "t", "parameters": {"type": 5}}])
    with pytest.raises(InputError, match="unique"):
        plan(["x"], "y", {"steps": 1}, model=ScriptedModel(_answer), tools=[DOOR_TOOLS[0], DOOR_TOOLS[0]])


def test_a_tool_plan_record_replays():
    from metaharness.planner import plan, replay

    result = plan(["At the door."], "open the door", {"steps": 4}, model=ScriptedModel(_answer), tools=DOOR_TOOLS)
    again = replay(json.loads(json.dumps(result.to_json())))
    assert [s.call for s in again.route] == [s.call for s in result.route]


@pytest.fixture
def scripted_model():
    model = ScriptedModel(_answer)
    served = ServedModel(model)
    yield model, served.base_url
    served.close()


@pytest.fixture
def scripted_model_url(scripted_model):
    return scripted_model[1]


def test_mcp_session_lists_and_calls_plan_and_solve(scripted_model, tmp_path):
    model, scripted_model_url = scripted_model
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "metaharness", "plan", "serve", "--model", f"openai:scripted@{scripted_model_url}", "--plans", "2"],
        env={**os.environ, "METAHARNESS_CACHE_DIR": str(tmp_path)},
    )

    async def session_run():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = (await session.list_tools()).tools
            found = await session.call_tool(
                "plan",
                {"history": ["At the door; the key is on the table."], "goal": "open the door", "budget": {"steps": 4}},
            )
            starved = await session.call_tool(
                "plan", {"history": ["At the door."], "goal": "open the door", "budget": {"steps": 1}}
            )
            model.requests.clear()
            options = {"plans": 1, "horizon": 3, "solver": "ilp", "tools": DOOR_TOOLS}
            tooled = await session.call_tool(
                "plan", {"history": ["At the door."], "goal": "open the door", "budget": {"steps": 4}, **options}
            )
            solved = await session.call_tool("solve", {"graph": GRAPH, "solver": "auto"})
            bad = await session.call_tool("solve", {"graph": {**GRAPH, "budget": [1]}})
            return tools, found, starved, tooled, solved, bad

    tools, found, starved, tooled, solved, bad = anyio.run(session_run)
    # by_alias gives the wire names (inputSchema, isError) under mcp 1.x and 2.x alike.
    tools = [t.model_dump(by_alias=True) for t in tools]
    found, starved = found.model_dump(by_alias=True), starved.model_dump(by_alias=True)
    assert [t["name"] for t in tools] == ["plan", "solve"]
    assert set(tools[0]["inputSchema"]["required"]) == {"history", "goal", "budget"}
    assert {"plans", "horizon", "solver", "tools"} <= set(tools[0]["inputSchema"]["properties"])
    assert tools[1]["inputSchema"]["required"] == ["graph"]
    assert not found["isError"]
    answer = json.loads(found["content"][0]["text"])
    assert answer["status"] == "route"
    assert [(s["action"], s["expected_state"]) for s in answer["route"]] == [
        ("take key", "holding the key"),
        ("open door", "door open"),
    ]
    assert answer["cost"] == {"steps": 2.0} and "Suggested route" in answer["guidance"]
    refused = json.loads(starved["content"][0]["text"])
    assert refused["status"] == "no_route" and refused["guidance"].startswith("No feasible route")
    # per-call options: one plan asked for, the tools' calls in the route
    tooled = json.loads(tooled.model_dump(by_alias=True)["content"][0]["text"])
    assert "Propose 1 different plans" in model.requests[0].messages[0]["content"]
    assert [s["call"]["tool"] for s in tooled["route"]] == ["pick_up", "open"]
    solved, bad = solved.model_dump(by_alias=True), bad.model_dump(by_alias=True)
    assert not solved["isError"] and json.loads(solved["content"][0]["text"])["path"] == ["e2", "e3"]
    assert bad["isError"] and "budget" in bad["content"][0]["text"]


def test_solve_needs_no_model_and_plan_says_it_needs_one():
    assert call_tool("solve", {"graph": GRAPH})["path"] == ["e2", "e3"]
    with pytest.raises(InputError, match="The plan tool needs a model"):
        call_tool("plan", {"history": ["At the door."], "goal": "open the door", "budget": {"steps": 4}})


def test_mcp_server_without_a_model_solves_and_explains_plan(tmp_path):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "metaharness", "plan", "serve"],
        env={**os.environ, "METAHARNESS_CACHE_DIR": str(tmp_path)},
    )

    async def session_run():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = [t.name for t in (await session.list_tools()).tools]
            solved = await session.call_tool("solve", {"graph": GRAPH})
            planned = await session.call_tool(
                "plan", {"history": ["At the door."], "goal": "open the door", "budget": {"steps": 4}}
            )
            return tools, solved.model_dump(by_alias=True), planned.model_dump(by_alias=True)

    tools, solved, planned = anyio.run(session_run)
    assert tools == ["plan", "solve"]
    assert not solved["isError"] and json.loads(solved["content"][0]["text"])["path"] == ["e2", "e3"]
    assert planned["isError"] and "needs a model" in planned["content"][0]["text"]
