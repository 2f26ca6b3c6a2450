"""The anthropic: backend at the HTTP layer: the real anthropic SDK against a mock transport that answers exactly
like the Messages API (content blocks, tool_use, prompt-cache usage fields, 429 with retry-after, 529 overloaded)."""

from __future__ import annotations

import json

import pytest
from fakes import MessagesAPI

from metaharness.errors import ConfigurationError, InputError
from metaharness.models import ChatRequest, RetryPolicy, Tool, ToolCall, UnsupportedFeature, Usage

MODEL = "claude-sonnet-4-6"
WEATHER = Tool(
    "get_weather",
    "Get the current weather in a given location.",
    {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
)


def message(content: list[dict], *, stop_reason: str = "end_turn", usage: dict | None = None) -> dict:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage
        or {
            "input_tokens": 12,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            "output_tokens": 6,
            "service_tier": "standard",
        },
    }


def error(kind: str, text: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": text}, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}


@pytest.fixture
def api(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    sleeps: list[float] = []
    monkeypatch.setattr("metaharness.models.retry.time.sleep", sleeps.append)

    def make(*responses):
        fake = MessagesAPI(*responses)
        return fake.client(MODEL, retry=RetryPolicy(max_attempts=4, base_delay=0.5)), fake, sleeps

    return make


def test_text_completion_with_prompt_cache_usage(api):
    usage = {
        "input_tokens": 50,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 2000,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 9,
        "service_tier": "standard",
    }
    client, fake, _ = api(message([{"type": "text", "text": "Paris."}], usage=usage))
    long_context = "Background. " * 500
    result = client.complete(
        ChatRequest(
            [{"role": "system", "content": long_context}, {"role": "user", "content": "Capital of France?"}],
            max_tokens=20,
            stop=["\n\n"],
        ),
        role="proposer",
    )
    assert result.text == "Paris." and result.raw_id == "msg_01XFDUDYJgAACzvnptvVoYEL"
    assert result.choices[0].finish_reason == "stop"
    assert result.usage == Usage(input_tokens=2050, output_tokens=9, cached_tokens=2000, cache_write_tokens=0)
    sent = fake.requests[0]
    assert sent["model"] == MODEL and sent["max_tokens"] == 20 and sent["stop_sequences"] == ["\n\n"]
    assert sent["system"] == [{"type": "text", "text": long_context, "cache_control": {"type": "ephemeral"}}]
    assert sent["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    totals = client.ledger.totals()["by_role"]["proposer"]
    # 50 fresh * $3 + 2000 cached * $0.30 + 9 out * $15, per million tokens
    assert totals["dollars"] == pytest.approx((50 * 3 + 2000 * 0.3 + 9 * 15) / 1e6)


def test_short_prompts_are_not_marked_for_caching(api):
    client, fake, _ = api(message([{"type": "text", "text": "Hi"}]))
    client.complete(ChatRequest([{"role": "user", "content": "Hello"}], max_tokens=5))
    assert "cache_control" not in json.dumps(fake.requests[0]) and "system" not in fake.requests[0]


def test_forced_tool_use(api):
    tool_use = {
        "type": "tool_use",
        "id": "toolu_01A09q90qw90lq917835lq9",
        "name": "get_weather",
        "input": {"location": "Paris"},
    }
    body = message([{"type": "text", "text": "Let me check."}, tool_use], stop_reason="tool_use")
    client, fake, _ = api(body)
    result = client.complete(
        ChatRequest([{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER], tool_choice="get_weather")
    )
    assert result.tool_calls == [ToolCall("toolu_01A09q90qw90lq917835lq9", "get_weather", {"location": "Paris"})]
    assert result.choices[0].finish_reason == "tool_calls"
    sent = fake.requests[0]
    assert sent["tool_choice"] == {"type": "tool", "name": "get_weather"}
    assert sent["tools"] == [
        {"name": "get_weather", "description": WEATHER.description, "input_schema": WEATHER.parameters}
    ]


def test_tool_results_are_sent_as_tool_result_blocks(api):
    client, fake, _ = api(message([{"type": "text", "text": "It is sunny."}]))
    client.complete(
        ChatRequest(
            [
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "toolu_1", "name": "get_weather", "arguments": {"location": "Paris"}}],
                },
                {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny, 21 C"},
            ],
            tools=[WEATHER],
        )
    )
    assert fake.requests[0]["messages"][1:] == [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"location": "Paris"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21 C"}]},
    ]
    assert fake.requests[0]["tool_choice"] == {"type": "auto"}


def test_json_schema_through_a_forced_respond_tool(api):
    schema = {"type": "string", "enum": ["yes", "no"]}
    answer = {"type": "tool_use", "id": "toolu_2", "name": "respond", "input": {"value": "yes"}}
    client, fake, _ = api(message([answer], stop_reason="tool_use"))
    result = client.complete(ChatRequest([{"role": "user", "content": "Is water wet?"}], json_schema=schema))
    assert result.parsed == "yes" and result.text == '"yes"'
    assert fake.requests[0]["tool_choice"] == {"type": "tool", "name": "respond"}
    assert fake.requests[0]["tools"][0]["input_schema"]["properties"]["value"] == schema


def test_retries_429_with_retry_after_and_529_overloaded(api, caplog):
    client, fake, sleeps = api(
        (
            429,
            error("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
            {"retry-after": "7"},
        ),
        (529, error("overloaded_error", "Overloaded"), {}),
        message([{"type": "text", "text": "Done."}]),
    )
    result = client.complete(ChatRequest([{"role": "user", "content": "Hi"}]))
    assert result.text == "Done." and len(fake.requests) == 3
    assert sleeps[0] == 7.0  # the server's retry-after
    assert 0.0 <= sleeps[1] <= 1.0  # backoff with jitter: uniform(0, 0.5 * 2**1)
    assert "HTTP 429" in caplog.text and "retrying in 7.0 s (attempt 2 of 4)" in caplog.text


def test_n_samples_are_separate_requests(api):
    client, fake, _ = api(*(message([{"type": "text", "text": t}]) for t in ("A", "B")))
    result = client.complete(ChatRequest([{"role": "user", "content": "Letter?"}], n=2, temperature=1.0))
    assert [c.text for c in result.choices] == ["A", "B"] and len(fake.requests) == 2
    assert result.usage.output_tokens == 12


def test_log_probabilities_are_unsupported(api):
    client, fake, _ = api()
    with pytest.raises(UnsupportedFeature, match="log-probabilities"):
        client.complete(ChatRequest([{"role": "user", "content": "Hi"}], logprobs=1))
    assert fake.requests == []


def test_bad_key_and_bad_request_are_clear_errors(api):
    client, _, _ = api((401, error("authentication_error", "invalid x-api-key"), {}))
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        client.complete(ChatRequest([{"role": "user", "content": "Hi"}]))
    client, _, _ = api((400, error("invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum"), {}))
    with pytest.raises(InputError, match="prompt is too long"):
        client.complete(ChatRequest([{"role": "user", "content": "Hi"}]))
