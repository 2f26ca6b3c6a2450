"""The embedded model through the package API: real completions in-process, with no network and no key."""

from __future__ import annotations

import socket

import jsonschema
import pytest
from model_server import ADD_TOOL, ANSWER_SCHEMA

from metaharness.errors import BudgetExceeded, ConfigurationError
from metaharness.models import ChatRequest, Ledger, ModelClient, ResponseCache, connect

SPEC = "local:smollm2-135m"


def ask(text: str, **fields) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": text}], **fields)


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a network connection fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("the embedded model tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def test_snippet_gets_a_real_completion_offline_without_a_key(no_network):
    client = connect(SPEC, cache=False)
    assert isinstance(client, ModelClient)
    result = client.complete(ask("What is the capital of France? Answer in one word.", max_tokens=16))
    assert result.text.strip()
    assert result.usage.input_tokens > 5 and 0 < result.usage.output_tokens <= 16
    assert result.model == SPEC and not result.cached
    assert client.ledger.totals()["by_role"]["task"]["calls"] == 1


def test_json_schema_output_is_constrained_and_parsed(no_network):
    client = connect(SPEC, cache=False)
    result = client.complete(
        ask("Is the sky blue? Give answer and confidence.", json_schema=ANSWER_SCHEMA, max_tokens=40)
    )
    jsonschema.validate(result.parsed, ANSWER_SCHEMA)
    assert result.parsed["answer"] in ("yes", "no")


def test_forced_tool_call_returns_a_valid_tool_call(no_network):
    client = connect(SPEC, cache=False)
    result = client.complete(ask("What is 2 plus 3?", tools=[ADD_TOOL], tool_choice="add", max_tokens=30))
    [call] = result.tool_calls
    assert call.name == "add" and call.id
    jsonschema.validate(call.arguments, ADD_TOOL.parameters)
    assert result.choices[0].finish_reason == "tool_calls"


def test_log_probabilities_with_alternatives(no_network):
    client = connect(SPEC, cache=False)
    result = client.complete(ask("Say yes or no.", max_tokens=4, logprobs=3))
    tokens = result.choices[0].logprobs
    assert tokens and len(tokens) <= 4
    for token in tokens:
        assert token.logprob <= 0.0
        assert 1 <= len(token.top) <= 3
        assert [lp for _, lp in token.top] == sorted((lp for _, lp in token.top), reverse=True)
    # Greedy decoding picks the most likely token at every step.
    assert all(abs(t.logprob - t.top[0][1]) < 1e-4 for t in tokens)


def test_n_samples_are_seeded_and_reproducible(no_network):
    client = connect(SPEC, cache=False)
    request = ask("Name a colour.", temperature=1.0, n=2, seed=7, max_tokens=6)
    first = client.complete(request)
    assert len(first.choices) == 2
    assert [c.text for c in client.complete(request).choices] == [c.text for c in first.choices]


def test_cache_hit_skips_the_model(no_network, tmp_path):
    cache = ResponseCache(tmp_path / "responses.sqlite")
    client = connect(SPEC, cache=cache)
    request = ask("Say hello.", max_tokens=8)
    first = client.complete(request)
    again = client.complete(request)
    assert not first.cached and again.cached and again.text == first.text
    totals = client.ledger.totals()
    assert totals["calls"] == 1 and totals["cache_hits"] == 1
    assert len(cache) == 1


def test_token_cap_stops_before_the_next_call(no_network):
    ledger = Ledger(max_tokens=10)
    client = connect(SPEC, cache=False, ledger=ledger)
    client.complete(ask("Say hello.", max_tokens=4))
    with pytest.raises(BudgetExceeded, match="Token cap"):
        client.complete(ask("Say hello again.", max_tokens=4))
    assert ledger.totals()["calls"] == 1


def test_unknown_local_model_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="Unknown local model"):
        connect("local:no-such-model", cache=False)
