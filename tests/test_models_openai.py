"""The openai: backend: the real openai SDK against a real OpenAI-compatible server (llama-cpp-python's) running the
embedded model, through a proxy that counts requests and injects faults."""

from __future__ import annotations

from types import SimpleNamespace

import jsonschema
import pytest
from model_server import ADD_TOOL, ANSWER_SCHEMA, FaultProxy

from metaharness.errors import ConfigurationError
from metaharness.models import ChatRequest, ResponseCache, RetriesExhausted, RetryPolicy, Tool, connect
from metaharness.models.llama_server import free_port
from metaharness.models.openai_api import listed_window, overflow_window
from metaharness.models.protocol import ContextOverflow, context_window

FAST_RETRY = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.05)


@pytest.fixture(scope="module")
def proxy(local_openai_server):
    proxy = FaultProxy(local_openai_server)
    yield proxy
    proxy.close()


def client_for(proxy: FaultProxy, **kwargs):
    kwargs.setdefault("cache", False)
    return connect(f"openai:smollm2-135m@{proxy.base_url}", retry=FAST_RETRY, **kwargs)


def ask(text: str, **fields) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": text}], **fields)


def test_plain_completion(proxy):
    client = client_for(proxy)
    result = client.complete(ask("What is the capital of France? One word.", max_tokens=12))
    assert result.text.strip()
    assert result.usage.input_tokens > 5 and 0 < result.usage.output_tokens <= 12
    assert result.raw_id and not result.cached
    assert client.backend.dialect.name == "llama-cpp-python"  # detected from GET /models
    assert client.ledger.totals()["by_model"][client.spec]["dollars"] == 0  # self-hosted: free


def test_n_samples_from_a_server_that_ignores_n(proxy):
    client = client_for(proxy)
    before = proxy.posts()
    result = client.complete(ask("Name an animal.", temperature=1.0, n=2, seed=11, max_tokens=6))
    assert len(result.choices) == 2 and all(c.text.strip() for c in result.choices)
    assert proxy.posts() - before == 2  # one sample per request, seeds 11 and 12
    assert [b["seed"] for b in proxy.bodies[-2:]] == [11, 12]


def test_json_schema_output_parses(proxy):
    client = client_for(proxy)
    result = client.complete(ask("Is water wet? Give answer and confidence.", json_schema=ANSWER_SCHEMA, max_tokens=40))
    jsonschema.validate(result.parsed, ANSWER_SCHEMA)
    assert proxy.bodies[-1]["response_format"] == {"type": "json_object", "schema": ANSWER_SCHEMA}


def test_server_that_rejects_json_schema_format_is_switched(proxy):
    # Configured as a generic OpenAI-like server, the client first sends OpenAI's json_schema format, which
    # llama-cpp-python's server rejects; the client switches to json_object + schema and succeeds.
    client = client_for(proxy, server="generic")
    before = proxy.posts()
    result = client.complete(ask("Is fire hot?", json_schema=ANSWER_SCHEMA, max_tokens=40))
    jsonschema.validate(result.parsed, ANSWER_SCHEMA)
    sent = [b["response_format"]["type"] for b in proxy.bodies[-(proxy.posts() - before) :]]
    assert sent == ["json_schema", "json_object"]
    assert client.backend.dialect.schema_format == "json_object"


def test_forced_tool_call(proxy):
    client = client_for(proxy)
    result = client.complete(ask("What is 2 plus 3?", tools=[ADD_TOOL], tool_choice="add", max_tokens=30))
    [call] = result.tool_calls
    assert call.name == "add" and call.id
    jsonschema.validate(call.arguments, ADD_TOOL.parameters)
    assert proxy.bodies[-1]["tool_choice"] == {"type": "function", "function": {"name": "add"}}


def test_log_probabilities(proxy):
    client = client_for(proxy)
    result = client.complete(ask("Say yes or no.", max_tokens=4, logprobs=2))
    tokens = result.choices[0].logprobs
    assert tokens and all(t.logprob <= 0 and 1 <= len(t.top) <= 2 for t in tokens)


def test_cache_hit_makes_no_request(proxy, tmp_path):
    client = client_for(proxy, cache=ResponseCache(tmp_path / "responses.sqlite"))
    request = ask("Say hello.", max_tokens=8)
    first = client.complete(request)
    before = proxy.posts()
    again = client.complete(request)
    assert proxy.posts() == before
    assert again.cached and again.text == first.text
    # A fresh client (another evaluation run) on the same cache file makes no request either.
    assert client_for(proxy, cache=ResponseCache(tmp_path / "responses.sqlite")).complete(request).cached
    assert proxy.posts() == before


def test_retry_after_injected_429_and_500(proxy):
    client = client_for(proxy)
    proxy.inject(429, headers={"retry-after": "0"}, message="rate limited")
    proxy.inject(500, message="server error")
    before = proxy.posts()
    result = client.complete(ask("Say hi.", max_tokens=4))
    assert result.usage.output_tokens > 0  # the model answered
    assert proxy.posts() - before == 3


def test_persistent_rate_limit_gives_up(proxy):
    client = client_for(proxy)
    for _ in range(FAST_RETRY.max_attempts):
        proxy.inject(429, headers={"retry-after": "0"})
    with pytest.raises(RetriesExhausted, match="HTTP 429"):
        client.complete(ask("Say hi.", max_tokens=4))


def test_unreachable_server_names_the_url():
    url = f"http://127.0.0.1:{free_port()}/v1"
    client = connect(f"openai:m@{url}", cache=False, retry=FAST_RETRY)
    with pytest.raises(ConfigurationError, match=f"Cannot reach the model server at {url}"):
        client.complete(ask("hi", max_tokens=2))


def test_model_that_rejects_temperature_is_sent_none(proxy):
    client = client_for(proxy)
    proxy.inject(
        400,
        message=(
            "Unsupported value: 'temperature' does not support 0.0 with this model. "
            "Only the default (1) value is supported."
        ),
    )
    result = client.complete(ask("Say hi.", max_tokens=4))
    assert result.usage.output_tokens > 0  # the model answered
    assert "temperature" in proxy.bodies[-2] and "temperature" not in proxy.bodies[-1]
    assert client.backend.dialect.temperature is False


def test_required_tool_choice_is_emulated_where_the_server_ignores_it(proxy):
    multiply = Tool("multiply", "Multiply two integers.", ADD_TOOL.parameters)
    client = client_for(proxy)
    result = client.complete(
        ask("What is 2 times 3?", tools=[ADD_TOOL, multiply], tool_choice="required", max_tokens=40)
    )
    [call] = result.tool_calls
    assert call.name in ("add", "multiply")
    jsonschema.validate(call.arguments, ADD_TOOL.parameters)
    assert "tools" not in proxy.bodies[-1] and proxy.bodies[-1]["response_format"]["type"] == "json_object"


def test_the_context_window_is_read_from_the_server_and_a_prompt_past_it_costs_nothing(proxy):
    """llama-cpp-python's server says its window nowhere: the backend asks it once for a prompt longer than any
    context, and reads the window from the refusal; a harness then fits its prompts as in process (lm.context_window).
    A prompt past the window is refused before anything is computed: ContextOverflow, as the embedded model raises,
    and nothing charged."""
    client = client_for(proxy)
    before = proxy.posts()
    assert context_window(client) == 4096 == client.backend.context_window  # the server runs with --n_ctx 4096
    assert proxy.posts() == before + 1  # one probe, then the window is known
    assert context_window(client) == 4096 and proxy.posts() == before + 1
    with pytest.raises(ContextOverflow) as refused:
        client.complete(ask("word " * 5000, max_tokens=4))
    assert refused.value.window == 4096 and "context" in str(refused.value)
    assert client.ledger.tokens == 0 and client.ledger.totals()["calls"] == 0


def test_what_a_server_says_of_its_window_is_read_in_every_form():
    assert overflow_window("This model's maximum context length is 8192 tokens. However, you requested 9000") == 8192
    assert overflow_window("request (5000 tokens) exceeds the available context size (4096 tokens), try again") == 4096
    assert overflow_window("Requested tokens (5000) exceed context window of 2048") == 2048
    assert overflow_window("Invalid value for temperature") is None
    assert listed_window(SimpleNamespace(id="m", model_extra={"max_model_len": 32768})) == 32768  # vLLM
    assert listed_window(SimpleNamespace(id="m", model_extra={"context_length": 131072})) == 131072
    assert listed_window(SimpleNamespace(id="m", model_extra={}, owned_by="me")) is None
