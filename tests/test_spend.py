"""Spend journaled as it happens: the ledger's listeners, the run's spend.jsonl, caps carried across sessions."""

from __future__ import annotations

import math
import threading

import pytest
from fakes import ScriptedModel

from metaharness.budget import Budget
from metaharness.errors import BudgetExceeded
from metaharness.models.client import Client
from metaharness.models.ledger import Charge, Ledger
from metaharness.models.prices import Price, PriceTable
from metaharness.models.protocol import ChatRequest, Usage
from metaharness.runner.ledger import run_ledger
from metaharness.store import RunDirectory
from metaharness.store.files import append_jsonl

CONFIG = {"dataset": "toy", "task_model": "fake", "val_limit": 3}
SPEC = "openai:priced-fake"
# 10 input tokens at $100 per million: $0.001 per call of ScriptedModel (10 in, 5 out).
PRICES = PriceTable({SPEC: Price(100.0, 0.0)}, use_env=False)
ASK = ChatRequest([{"role": "user", "content": "hi"}])


def client(ledger: Ledger, model: ScriptedModel | None = None) -> Client:
    return Client(SPEC, model or ScriptedModel("ok"), cache=None, ledger=ledger)


def test_listeners_get_every_recorded_call_but_not_cache_hits():
    ledger = Ledger(prices=PRICES)
    seen: list[Charge] = []
    ledger.add_listener(seen.append)
    ledger.record(SPEC, "task", Usage(10, 5))
    ledger.record("local:x", "proposer", Usage(3, 4))
    ledger.record_cache_hit(SPEC, "task")
    assert [(c.model, c.role, c.tokens) for c in seen] == [(SPEC, "task", 15), ("local:x", "proposer", 7)]
    assert seen[0].dollars == pytest.approx(0.001) and seen[1].dollars == 0.0
    assert ledger.totals()["cache_hits"] == 1


def test_every_call_is_journaled_before_it_returns_and_a_new_session_starts_from_the_journal(tmp_path):
    run = RunDirectory.open(tmp_path / "run", CONFIG)
    costs = run_ledger(run, prices=PRICES)
    model = client(costs.ledger)
    for calls in range(1, 4):
        model.complete(ASK)
        assert run.spent() == {"usd": pytest.approx(0.001 * calls), "tokens": 15 * calls, "calls": calls}
    lines = run.spend.records()
    assert [(e["model"], e["role"], e["input_tokens"], e["output_tokens"]) for e in lines] == [
        (SPEC, "task", 10, 5)
    ] * 3
    assert len({e["session"] for e in lines}) == 1
    run.close()
    # No iteration or stop line was logged (as when a run is killed mid-iteration): the next session still knows.
    assert run.log_records() == []
    again = RunDirectory.open(tmp_path / "run", CONFIG)
    resumed = run_ledger(again, Budget(usd=0.005), prices=PRICES)
    assert resumed.previous == {"usd": pytest.approx(0.003), "tokens": 45}
    assert resumed.left().usd == pytest.approx(0.002) and resumed.left().tokens == math.inf
    second = client(resumed.ledger)
    second.complete(ASK)
    second.complete(ASK)
    with pytest.raises(BudgetExceeded):  # $0.005 reached over both sessions: refused before it is sent
        second.complete(ASK)
    assert again.spent()["usd"] == pytest.approx(0.005) and again.spent()["calls"] == 5
    assert resumed.spent() == {"usd": pytest.approx(0.005), "tokens": 75}
    assert len({e["session"] for e in again.spend.records()}) == 2
    again.close()


def test_a_token_cap_holds_over_sessions(tmp_path):
    run = RunDirectory.open(tmp_path / "run", CONFIG)
    model = client(run_ledger(run, Budget(tokens=40), prices=PRICES).ledger)
    model.complete(ASK)
    model.complete(ASK)
    run.close()
    run = RunDirectory.open(tmp_path / "run", CONFIG)
    resumed = run_ledger(run, Budget(tokens=40), prices=PRICES)
    assert resumed.ledger.max_tokens == 10 and resumed.left() == Budget(tokens=10)
    backend = ScriptedModel("ok")
    model = client(resumed.ledger, backend)
    model.complete(ASK)  # 30 of 40: allowed, and it takes the run to 45
    with pytest.raises(BudgetExceeded, match="Token cap"):
        model.complete(ASK)
    assert len(backend.requests) == 1 and run.spent()["tokens"] == 45
    run.close()


def test_calls_from_many_threads_are_all_journaled(tmp_path):
    run = RunDirectory.open(tmp_path / "run", CONFIG)
    costs = run_ledger(run, prices=PRICES)
    model = client(costs.ledger)
    threads = [threading.Thread(target=lambda: [model.complete(ASK) for _ in range(25)]) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(run.spend.records()) == 200
    assert run.spent() == {"usd": pytest.approx(0.2), "tokens": 3000, "calls": 200}
    assert costs.ledger.totals()["calls"] == 200
    run.close()


def test_a_run_from_before_the_journal_carries_its_logged_spend(tmp_path):
    run = RunDirectory.open(tmp_path / "run", CONFIG)
    append_jsonl(run.summary_path, {"type": "iteration", "iteration": 0, "spent": {"usd": 0.25, "tokens": 900}})
    append_jsonl(run.summary_path, {"type": "stop", "reason": "x", "spent": {"usd": 0.5, "tokens": 1200}})
    run.close()
    assert not run.spend.exists()
    run = RunDirectory.open(tmp_path / "run", CONFIG)
    assert run.spent() == {"usd": 0.5, "tokens": 1200, "calls": 0}
    assert run.spend.records()[0]["carried"] is True
    run.close()
    run = RunDirectory.open(tmp_path / "run", CONFIG)  # carried once, not again
    assert len(run.spend.records()) == 1
    run.close()


def test_a_torn_line_is_never_dropped_from_the_total_and_the_next_one_still_counts(tmp_path):
    """A torn line whose cost cannot be read stops the total (tests/test_run_damage.py has the whole story); once
    its loss is accepted, the line after it still counts."""
    from metaharness.errors import InputError

    run = RunDirectory.open(tmp_path / "run", CONFIG)
    append_jsonl(run.spend.path, {"usd": 0.001, "tokens": 15})
    with open(run.spend.path, "a") as handle:
        handle.write('{"usd": 0.0')
    run.spend.record(SPEC, "task", 0.002, input_tokens=20, output_tokens=0)
    with pytest.raises(InputError, match="line 2 is damaged"):
        run.spent()
    run.spend.accept_loss()
    assert run.spent() == {"usd": pytest.approx(0.003), "tokens": 35, "calls": 3}
    run.close()
