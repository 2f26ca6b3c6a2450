"""The planning tool: OpenAI/Anthropic tool definitions, the Python call, and a real MCP client session against
``metaharness plan serve`` backed by a scripted model the test serves over OpenAI's HTTP API."""

from __future__ import annotations

import json
import os
import re
import sys

import anyio
import jsonschema
import pytest
from fakes import ScriptedModel, ServedModel
from pydantic import TypeAdapter

from metaharness.errors import InputError
from metaharness.planner.tool import PLAN_TOOL_PARAMETERS, anthropic_tool, call_plan_tool, openai_tool


def test_openai_tool_matches_the_published_shape():
    from openai.types.chat import ChatCompletionToolParam

    tool = openai_tool()
    TypeAdapter(ChatCompletionToolParam).validate_python(tool)
    assert tool["type"] == "function" and set(tool["function"]) == {"name", "description", "parameters"}
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", tool["function"]["name"])  # OpenAI's rule for function names
    jsonschema.Draft202012Validator.check_schema(tool["function"]["parameters"])


def test_anthropic_tool_matches_the_published_shape():
    from anthropic.types import ToolParam

    tool = anthropic_tool()
    TypeAdapter(ToolParam).validate_python(tool)
    assert set(tool) == {"name", "description", "input_schema"} and tool["input_schema"]["type"] == "object"
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", tool["name"])
    jsonschema.Draft202012Validator.check_schema(tool["input_schema"])


def test_tool_arguments_are_validated():
    jsonschema.validate({"history": ["x"], "goal": "y", "budget": {"steps": 3}}, PLAN_TOOL_PARAMETERS)
    with pytest.raises(InputError, match="Bad arguments for the plan tool"):
        call_plan_tool({"history": ["x"], "goal": "y", "budget": {"steps": -1}}, model=None)


# --- a scripted model served over HTTP: the model backend this test controls -----------------------------------


def _answer(request) -> dict:
    system, user = request.messages[0]["content"], request.messages[-1]["content"]
    if system.startswith("You are the plan sampler"):
        return {"plans": [{"subplans": ["take key", "open door"]}, {"subplans": ["kick door"]}]}
    if system.startswith("You are the state simulator"):
        if "kick door" in user:
            return {"steps": [{"state": "door broken", "cost": [3]}]}
        return {"steps": [{"state": "holding the key", "cost": [1]}, {"state": "door open", "cost": [1]}]}
    if system.startswith("You are the state merger"):
        return {"same": False}
    if system.startswith("You are the reward labeler"):
        states = re.findall(r"^\d+\. (.*)$", user.split("States:")[-1], flags=re.MULTILINE)
        return {"labels": [1 if "door open" in s else -1 if "broken" in s else 0 for s in states]}
    raise AssertionError(f"unexpected prompt: {system[:60]}")


@pytest.fixture
def scripted_model_url():
    served = ServedModel(ScriptedModel(_answer))
    yield served.base_url
    served.close()


def test_mcp_session_lists_and_calls_plan(scripted_model_url, tmp_path):
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
            return tools, found, starved

    tools, found, starved = anyio.run(session_run)
    # by_alias gives the wire names (inputSchema, isError) under mcp 1.x and 2.x alike.
    tools = [t.model_dump(by_alias=True) for t in tools]
    found, starved = found.model_dump(by_alias=True), starved.model_dump(by_alias=True)
    assert [t["name"] for t in tools] == ["plan"]
    assert set(tools[0]["inputSchema"]["required"]) == {"history", "goal", "budget"}
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
