"""The client layer's own logic (cache, ledger, prices, retries, structured-output repair) over a scripted backend."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any

import pytest
from fakes import ScriptedModel, in_order

from metaharness.errors import BudgetExceeded, ConfigurationError, InputError
from metaharness.models import (
    ChatRequest,
    ChatResult,
    Choice,
    Client,
    Ledger,
    Price,
    PriceTable,
    ResponseCache,
    RetriesExhausted,
    RetryPolicy,
    StructuredOutputError,
    TokenLogprob,
    Tool,
    ToolCall,
    Usage,
    connect,
)
from metaharness.models.cache import is_cacheable, request_key
from metaharness.models.retry import Transient, backend_slots, retry_after_seconds

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def backend(*texts: str | Choice) -> ScriptedModel:
    """A backend (below the client layer, so its answers are unchecked) giving ``texts`` in order."""
    return ScriptedModel(in_order(*texts), raw=True)


def ask(text: str = "hi", **fields) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": text}], **fields)


# -- structured output ------------------------------------------------------------------------------------------


def test_invalid_json_gets_one_repair_request():
    scripted = backend("not json", '{"n": 3}')
    client = Client("local:x", scripted, cache=None, ledger=Ledger())
    result = client.complete(ask(json_schema=SCHEMA))
    assert result.parsed == {"n": 3}
    assert len(scripted.requests) == 2
    repair = scripted.requests[1]
    assert repair.messages[-2] == {"role": "assistant", "content": "not json"}
    assert "not valid JSON" in repair.messages[-1]["content"]
    assert result.usage == Usage(20, 10)  # the repair's tokens are counted
    assert client.ledger.totals()["input_tokens"] == 20


def test_schema_mismatch_twice_raises_structured_output_error():
    scripted = backend('{"n": "three"}', '{"m": 1}')
    client = Client("local:x", scripted, cache=None, ledger=Ledger())
    with pytest.raises(StructuredOutputError, match="even after a repair"):
        client.complete(ask(json_schema=SCHEMA))
    assert client.ledger.totals()["calls"] == 1 and client.ledger.tokens == 30


def test_fenced_json_is_accepted_without_repair():
    scripted = backend('```json\n{"n": 1}\n```')
    result = Client("local:x", scripted, cache=None, ledger=Ledger()).complete(ask(json_schema=SCHEMA))
    assert result.parsed == {"n": 1} and len(scripted.requests) == 1


def test_forced_tool_without_call_is_repaired():
    tool = Tool("f", "a function", SCHEMA)

    scripted = backend("I will not call it", Choice("", tool_calls=[ToolCall("c1", "f", {"n": 2})]))
    result = Client("local:x", scripted, cache=None, ledger=Ledger()).complete(ask(tools=[tool], tool_choice="f"))
    assert result.tool_calls == [ToolCall("c1", "f", {"n": 2})]
    assert "no call of the tool 'f'" in scripted.requests[1].messages[-1]["content"]


def test_bad_requests_are_input_errors():
    client = Client("local:x", backend("never asked"), cache=None, ledger=Ledger())
    with pytest.raises(InputError, match="not among the tools"):
        client.complete(ask(tools=[Tool("f", "", SCHEMA)], tool_choice="g"))
    with pytest.raises(InputError, match="n must be"):
        client.complete(ask(n=0))


# -- cache -----------------------------------------------------------------------------------------------------


def test_cache_keys_cover_the_whole_request_and_the_spec():
    base = ask()
    assert request_key("a:m", base) == request_key("a:m", ask())
    assert request_key("a:m", base) != request_key("b:m", base)
    assert request_key("a:m", base) != request_key("a:m", ask(max_tokens=7))
    assert request_key("a:m", base) != request_key("a:m", ask(tools=[Tool("f", "", SCHEMA)]))
    assert is_cacheable(ask()) and is_cacheable(ask(temperature=1.0, seed=3))
    assert not is_cacheable(ask(temperature=0.7))


def test_cache_round_trips_every_field(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    result = ChatResult(
        [
            Choice(
                "t",
                parsed={"n": 1},
                tool_calls=[ToolCall("id", "f", {"a": [1]})],
                logprobs=[TokenLogprob("t", -0.5, (("t", -0.5), ("u", -1.5)))],
                finish_reason="stop",
            )
        ],
        Usage(3, 4, 1, 2),
        0.5,
        "m",
        raw_id="x",
    )
    cache.put("k", "local:x", result)
    assert ResponseCache(tmp_path / "c.sqlite").get("k") == result
    assert cache.get("missing") is None


def test_only_deterministic_requests_are_cached(tmp_path):
    scripted = backend("a", "b", "c", "d")
    client = Client("local:x", scripted, cache=ResponseCache(tmp_path / "c.sqlite"), ledger=Ledger())
    assert client.complete(ask()).text == "a"
    assert client.complete(ask()).cached
    assert client.complete(ask(temperature=0.9)).text == "b"
    assert client.complete(ask(temperature=0.9)).text == "c"
    assert len(scripted.requests) == 3


def test_spend_is_counted_per_run_whatever_the_shared_cache_holds(tmp_path):
    """A run pays for a call the first time it makes it, even when another run filled the cache; a repeat is free,
    also in a later session that remembers the run's keys."""
    cache = ResponseCache(tmp_path / "c.sqlite")
    first_run = Ledger()
    Client("local:x", backend("a"), cache=cache, ledger=first_run).complete(ask())
    charges: list[Any] = []
    second_run = Ledger()
    second_run.add_listener(charges.append)
    client = Client("local:x", backend("never asked"), cache=cache, ledger=second_run)
    shared = client.complete(ask())
    assert shared.cached and shared.charged  # answered by the cache, paid as if made: another run filled it
    repeat = client.complete(ask())
    assert repeat.cached and not repeat.charged
    assert second_run.tokens == first_run.tokens > 0 and len(charges) == 1 and charges[0].key
    resumed = Ledger()
    resumed.remember([charges[0].key])
    again = Client("local:x", backend("never asked"), cache=cache, ledger=resumed).complete(ask())
    assert not again.charged and resumed.tokens == 0


def test_cache_is_shared_by_threads_and_processes(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    result = ChatResult([Choice("x")], Usage(1, 1), 0.1, "m")
    writer = (
        "import sys; from metaharness.models.cache import ResponseCache; "
        "from metaharness.models.protocol import ChatResult, Choice, Usage; "
        "c = ResponseCache(sys.argv[1]); r = ChatResult([Choice('x')], Usage(1, 1), 0.1, 'm'); "
        "[c.put(f'p{sys.argv[2]}-{i}', 's', r) for i in range(100)]"
    )
    processes = [subprocess.Popen([sys.executable, "-c", writer, str(path), str(k)]) for k in range(2)]

    def put_many(k: int) -> None:
        for i in range(100):
            cache.put(f"t{k}-{i}", "s", result)

    threads = [threading.Thread(target=put_many, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(p.wait(timeout=60) == 0 for p in processes)
    assert len(cache) == 500
    assert cache.get("p1-99") == result


# -- ledger and prices ------------------------------------------------------------------------------------------


def test_ledger_prices_tokens_per_model_and_role():
    ledger = Ledger()
    ledger.record("anthropic:claude-sonnet-4-5-20250929", "proposer", Usage(1_000_000, 100_000, 200_000, 100_000))
    ledger.record("local:smollm2-135m", "task", Usage(500, 50))
    totals = ledger.totals()
    # 700k fresh * $3 + 200k read * $0.30 + 100k written * $3.75 + 100k out * $15 (per million)
    assert totals["dollars"] == pytest.approx(2.1 + 0.06 + 0.375 + 1.5)
    assert totals["by_role"]["task"]["dollars"] == 0 and totals["by_role"]["task"]["tokens"] == 550
    assert totals["by_model"]["local:smollm2-135m"]["calls"] == 1
    assert totals["unpriced_models"] == []
    json.dumps(totals)


def test_dollar_cap_raises_before_the_next_call():
    ledger = Ledger(max_dollars=0.01)
    ledger.check("openai:gpt-4.1-mini")
    ledger.record("openai:gpt-4.1-mini", "subagent", Usage(10_000, 5_000))  # $0.004 + $0.008
    with pytest.raises(BudgetExceeded, match="Dollar cap"):
        ledger.check("openai:gpt-4.1-mini")


def test_dollar_cap_refuses_an_unpriced_model():
    ledger = Ledger(max_dollars=1.0)
    with pytest.raises(ConfigurationError, match="METAHARNESS_PRICES"):
        ledger.check("openai:some-future-model")
    uncapped = Ledger()
    uncapped.record("openai:some-future-model", "task", Usage(1, 1))  # without a cap it is only listed
    assert uncapped.totals()["unpriced_models"] == ["openai:some-future-model"]


def test_price_table_is_extended_from_json_toml_and_env(tmp_path, monkeypatch):
    (tmp_path / "p.json").write_text(json.dumps({"openai:some-future-model": {"input": 1, "output": 2}}))
    (tmp_path / "p.toml").write_text('["anthropic:claude-next"]\ninput = 4\noutput = 8\ncache_read = 0.4\n')
    table = PriceTable()
    table.load(tmp_path / "p.json")
    table.load(tmp_path / "p.toml")
    assert table.lookup("openai:some-future-model") == Price(1, 2)
    price = table.lookup("anthropic:claude-next")
    assert price is not None and price.cache_read == 0.4
    assert table.lookup("openai:gpt-4.1-mini-2025-04-14") == table.lookup("openai:gpt-4.1-mini")
    assert table.lookup("openai:gpt-5.4") is None  # a different model, not a snapshot of gpt-5
    assert table.lookup("openai:gpt-oss-20b@http://127.0.0.1:8000/v1") == Price(0, 0)
    monkeypatch.setenv("METAHARNESS_PRICES", str(tmp_path / "p.json"))
    assert PriceTable().lookup("openai:some-future-model") == Price(1, 2)
    (tmp_path / "bad.json").write_text('{"x:y": {"inp": 1}}')
    with pytest.raises(ConfigurationError, match="input, output"):
        table.load(tmp_path / "bad.json")


# -- retries ---------------------------------------------------------------------------------------------------


def test_retry_honours_retry_after_and_backs_off_with_jitter():
    policy = RetryPolicy(max_attempts=4, base_delay=1.0, max_delay=10.0)
    assert policy.delay(0, 2.5) == 2.5 and policy.delay(0, 100.0) == 10.0
    assert all(0.0 <= policy.delay(3, None) <= 8.0 for _ in range(50))
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert retry_after_seconds({}) is None

    calls: list[int] = []
    sleeps: list[float] = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise Transient("429", retry_after=0.5)
        return "ok"

    assert policy.run(flaky, classify=lambda e: e, sleep=sleeps.append) == "ok"
    assert sleeps == [0.5, 0.5]


def test_retry_gives_up_with_a_clear_error():
    policy = RetryPolicy(max_attempts=3, base_delay=0.0)

    def always():
        raise Transient("HTTP 503")

    with pytest.raises(RetriesExhausted, match="gave up after 3 attempts"):
        policy.run(always, classify=lambda e: e, sleep=lambda s: None)

    def unreachable():
        raise Transient("refused", attempts=2, final=ConfigurationError("Cannot reach http://x"))

    with pytest.raises(ConfigurationError, match="Cannot reach http://x"):
        policy.run(unreachable, classify=lambda e: e, sleep=lambda s: None)

    with pytest.raises(InputError):
        policy.run(lambda: 1 / 0, classify=lambda e: InputError("bad"), sleep=lambda s: None)


# -- connect ---------------------------------------------------------------------------------------------------


def test_connect_rejects_unknown_specs_and_missing_keys(monkeypatch):
    with pytest.raises(InputError, match="Unknown model provider"):
        connect("gemini:pro")
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        connect("openai:gpt-4.1-mini", cache=False)
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        connect("anthropic:claude-sonnet-4-5", cache=False)
    with pytest.raises(InputError, match="does not take the option"):
        connect("local:smollm2-135m", cache=False, colour="red")


def test_concurrency_limit_per_backend():
    slots = backend_slots("test@http://limit", 2)
    assert backend_slots("test@http://limit", 5) is slots  # one limit per backend, shared by its clients
    policy = RetryPolicy()
    lock, state = threading.Lock(), {"now": 0, "max": 0, "done": 0}
    both_in = threading.Barrier(3, timeout=30)  # the two calls the limit lets in, and the test
    release = threading.Event()

    def call():
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        if not release.is_set():  # the first two hold their slots until the test has looked
            both_in.wait()
            release.wait(30)
        with lock:
            state["now"] -= 1
            state["done"] += 1

    threads = [
        threading.Thread(target=policy.run, args=(call,), kwargs={"classify": lambda e: e, "slots": slots})
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    both_in.wait()  # two calls are in flight (a third let in would break the barrier)
    assert not slots.acquire(blocking=False)  # both slots are held: the third call waits for one
    release.set()
    for t in threads:
        t.join()
    assert state == {"now": 0, "max": 2, "done": 3}


def test_a_prompt_with_a_lone_surrogate_reaches_the_model_escaped_and_is_cached(tmp_path):
    """Text a trace or a harness holds may carry a lone surrogate, which no SDK, JSON encoder or cache key takes:
    the client sends it as its backslash escape."""
    model = ScriptedModel(lambda request: request.messages[-1]["content"], spec="openai:toy")
    client = Client("openai:toy", model, cache=ResponseCache(tmp_path / "c.sqlite"), ledger=Ledger())
    request = ChatRequest([{"role": "user", "content": "fever \ud800 and rash"}])
    assert client.complete(request).text == "fever \\ud800 and rash"
    assert client.complete(request).cached and len(model.requests) == 1
