"""An answer that stopped by itself answers the same request under any length limit it fits in, for free in the
run that paid for it (and in its replays); a cut answer or a sampled request never stands for another."""

from __future__ import annotations

from pathlib import Path

from fakes import ScriptedModel

from metaharness.models.cache import ResponseCache
from metaharness.models.client import Client
from metaharness.models.ledger import Ledger
from metaharness.models.protocol import ChatRequest, Choice
from metaharness.models.replaying import NotRecorded, ReplayingClient

MESSAGES = [{"role": "user", "content": "Name the disease: fever and a rash."}]


def client(tmp_path: Path, finish: str, cache: ResponseCache | None = None) -> tuple[Client, ScriptedModel]:
    model = ScriptedModel(lambda request: Choice("dengue", finish_reason=finish), spec="openai:toy-model")
    cache = cache or ResponseCache(tmp_path / "cache.sqlite")
    return Client("openai:toy-model", model, cache=cache, ledger=Ledger()), model


def test_a_stopped_answer_stands_for_any_limit_it_fits_in_and_costs_nothing_again(tmp_path: Path) -> None:
    paid, model = client(tmp_path, "stop")  # 5 output tokens per answer (ScriptedModel's usage)
    first = paid.complete(ChatRequest(MESSAGES, max_tokens=24))
    assert first.charged and len(model.requests) == 1
    for limit in (64, 5, 512):
        again = paid.complete(ChatRequest(MESSAGES, max_tokens=limit))
        assert again.text == "dengue" and again.cached and not again.charged
    assert len(model.requests) == 1 and paid.ledger.tokens == 15
    paid.complete(ChatRequest(MESSAGES, max_tokens=4))  # shorter than the answer: the model is asked
    assert len(model.requests) == 2
    replaying = ReplayingClient.of(paid)
    assert replaying is not None and replaying.complete(ChatRequest(MESSAGES, max_tokens=96)).text == "dengue"


def test_a_cut_or_sampled_answer_stands_for_nothing_else(tmp_path: Path) -> None:
    cut, model = client(tmp_path, "length")
    cut.complete(ChatRequest(MESSAGES, max_tokens=24))
    cut.complete(ChatRequest(MESSAGES, max_tokens=64))
    assert len(model.requests) == 2
    sampled, model = client(tmp_path / "sampled", "stop")
    sampled.complete(ChatRequest(MESSAGES, max_tokens=24, temperature=0.7, seed=1))
    sampled.complete(ChatRequest(MESSAGES, max_tokens=64, temperature=0.7, seed=1))
    assert len(model.requests) == 2


def test_an_answer_another_run_left_is_paid_for_again_and_never_replayed(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache.sqlite")
    client(tmp_path, "stop", cache)[0].complete(ChatRequest(MESSAGES, max_tokens=24))
    other, model = client(tmp_path, "stop", cache)  # a new run: a new ledger over the same cache
    replaying = ReplayingClient.of(other)
    assert replaying is not None
    try:
        replaying.complete(ChatRequest(MESSAGES, max_tokens=64))
        raise AssertionError("a replay answered a call this run never paid for")
    except NotRecorded:
        pass
    hit = other.complete(ChatRequest(MESSAGES, max_tokens=64))
    assert hit.cached and hit.charged and not model.requests and other.ledger.tokens == 15
