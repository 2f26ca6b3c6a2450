"""Evaluation on a Dask cluster through joblib (``joblib.parallel_config(backend="dask")``), for real; Ray too
when it is installed (``pip install -e ".[ray]"``).

A ``dask.distributed.LocalCluster`` with two worker processes runs the evaluator's jobs; the task model is an
OpenAI-compatible HTTP server reached through the real ``openai`` client in the test process, priced, with its own
request counter. The records must equal a local (threaded) run's, and the parent's ledger must count every call
and its dollars: the workers reach the model only through the parent's proxy, never on their own.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
from typing import Any

import pytest
from fakes import ScriptedModel, ServedModel

from metaharness.errors import BudgetExceeded, ConfigurationError
from metaharness.evaluation import evaluate
from metaharness.evaluation import evaluator as evaluator_module
from metaharness.evaluation.proxy import ModelRef
from metaharness.models import Ledger, connect
from metaharness.models.prices import Price, PriceTable
from metaharness.models.protocol import ChatRequest, ChatResult, Role, Usage

distributed = pytest.importorskip("distributed", reason="dask[distributed] is in the dev and cluster extras")

HARNESS = """
class Harness:
    def __init__(self, lm, train):
        self.lm = lm
        self.labels = sorted({item["target"] for item in train})

    def predict(self, x):
        first = self.lm("Labels: " + ", ".join(self.labels) + "\\n" + x, system="Diagnose.", max_tokens=16)
        if "dengue" in first:
            return first
        return self.lm("Think again: " + x, max_tokens=16)  # a second call for some examples
"""
EXAMPLES = 20
PRICE = Price(input=3.0, output=15.0)  # dollars per million tokens


class PricedAnswers(ScriptedModel):
    """Answers by keyword; usage grows with the prompt, so every call has its own token count and price."""

    @staticmethod
    def answer(request: ChatRequest) -> tuple[str, Usage]:
        prompt = request.messages[-1]["content"]
        text = "[DIAGNOSIS]dengue[/DIAGNOSIS]" if "fever" in prompt else "[DIAGNOSIS]psoriasis[/DIAGNOSIS]"
        return text, Usage(len(prompt) // 4 + 1, len(text) // 4)

    def complete(self, request: ChatRequest, *, role: Role = "task") -> ChatResult:
        text, usage = self.answer(request)
        result = super().complete(request, role=role)
        result.choices[0].text, result.usage = text, usage
        return result


@pytest.fixture(scope="module")
def dask_client():
    from dask.distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None)
    client = Client(cluster)
    try:
        yield client
    finally:
        client.run(evaluator_module._close_all_pools)  # the workers' sandboxes (they also exit with their parent)
        client.close()
        cluster.close()


@pytest.fixture
def served():
    server = ServedModel(PricedAnswers(), name="priced")
    yield server
    server.close()


def priced_client(served: ServedModel, **caps: Any):
    spec = f"openai:priced@{served.base_url}"
    ledger = Ledger(prices=PriceTable({spec: PRICE}, use_env=False), **caps)
    return connect(spec, cache=False, ledger=ledger, server="vllm")


def comparable(records) -> list[dict]:
    """The records without what differs from run to run (wall time, call latency)."""
    out = []
    for record in records:
        data = record.to_json()
        data.pop("seconds")
        for call in data["calls"]:
            call.pop("latency_s")
        out.append(data)
    return out


def _pools_here() -> int:
    return len(evaluator_module._POOLS)


def equal_to_local(served: ServedModel, data_dir, tmp_path, backend: dict):
    """Evaluate ``HARNESS`` locally, then under ``parallel_config(**backend)``, and check that the records, the
    report and the parent ledgers are equal and that every request the model saw was counted by a parent ledger."""
    from joblib import parallel_config

    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)
    model: ScriptedModel = served.model
    local_client = priced_client(served)
    local = evaluate(harness, "symptom2disease", "val", model=local_client, limit=EXAMPLES, data_dir=data_dir)
    local_requests = len(model.requests)

    cluster_client = priced_client(served)
    with parallel_config(**backend):
        remote = evaluate(
            harness, "symptom2disease", "val", model=cluster_client, limit=EXAMPLES, workers=4, data_dir=data_dir
        )
    remote_requests = len(model.requests) - local_requests

    assert len(remote.records) == EXAMPLES and remote.errors == 0
    assert comparable(remote.records) == comparable(local.records)
    assert remote.scores == local.scores and remote.cost == local.cost
    calls = sum(len(r.calls) for r in remote.records)
    assert EXAMPLES < calls < 2 * EXAMPLES  # some examples made a second call
    # Every call of the workers went through the parent's client: the server saw exactly what the ledger counted.
    totals, expected = cluster_client.ledger.totals(), local_client.ledger.totals()
    assert remote_requests == local_requests == calls == totals["calls"]
    for key in ("calls", "input_tokens", "output_tokens", "tokens", "dollars", "by_role"):
        assert totals[key] == expected[key], key
    assert totals["dollars"] > 0 and remote.cost["usd"] == pytest.approx(totals["dollars"])
    assert totals["input_tokens"] == sum(c["input_tokens"] for r in remote.records for c in r.calls)
    return remote


def test_a_dask_evaluation_equals_the_local_one_and_the_parent_ledger_counts_every_call(
    dask_client, served, shared_data_dir, tmp_path
):
    equal_to_local(served, shared_data_dir, tmp_path, {"backend": "dask"})
    # The jobs ran in the workers' processes (their sandbox pools are there), none in this one.
    assert sum(dask_client.run(_pools_here).values()) >= 1 and _pools_here() == 0
    assert os.getpid() not in dask_client.run(os.getpid).values()


def test_a_ray_evaluation_equals_the_local_one(served, shared_data_dir, tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is optional: pip install -e '.[ray]'")
    from ray.util.joblib import register_ray

    register_ray()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)  # logical CPUs: one per worker
    try:
        equal_to_local(served, shared_data_dir, tmp_path, {"backend": "ray"})
    finally:
        ray.shutdown()


def test_a_token_cap_holds_for_remote_workers(dask_client, served, shared_data_dir, tmp_path):
    from joblib import parallel_config

    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)
    client = priced_client(served, max_tokens=400)
    with parallel_config(backend="dask"), pytest.raises(BudgetExceeded, match="Token cap reached"):
        evaluate(harness, "symptom2disease", "val", model=client, limit=EXAMPLES, workers=4, data_dir=shared_data_dir)
    ledger = client.ledger.totals()
    usages = [PricedAnswers.answer(request)[1] for request in served.model.requests]
    biggest = max(u.input_tokens + u.output_tokens for u in usages)
    # The cap is checked before each call: past it, at most the calls in flight when it was reached (4 sandboxes).
    assert 400 <= ledger["tokens"] < 400 + 4 * biggest
    assert ledger["calls"] == len(served.model.requests)  # every call that reached the model is in the ledger


def test_a_pickled_model_ref_holds_no_key_and_calls_back_through_the_parent(served):
    client = connect(f"openai:priced@{served.base_url}", cache=False, api_key="sk-secret-never-travels")
    ref = ModelRef(client)
    data = pickle.dumps(ref)
    assert b"sk-secret-never-travels" not in data and b"Ledger" not in data
    remote = pickle.loads(data)
    assert remote.remote and remote.spec == client.spec
    recorder = remote.recorder()
    reply = recorder({"messages": [{"role": "user", "content": "fever and rash"}], "max_tokens": 8})
    assert reply["text"] == "[DIAGNOSIS]dengue[/DIAGNOSIS]" and recorder.calls[0]["input_tokens"] > 0
    assert client.ledger.totals()["calls"] == 1  # made by the parent's client

    # A caller without the token is refused; after the evaluation's end the proxy is gone.
    address = remote.serve()
    with socket.create_connection((address.host, address.port)) as s:
        s.sendall(json.dumps({"token": "guess", "request": {}}).encode() + b"\n")
        assert b"refused" in s.makefile("rb").readline()
    ref.close()
    with pytest.raises(ConfigurationError, match="cannot reach the evaluation's model proxy"):
        remote.recorder()({"messages": [{"role": "user", "content": "x"}]})
    assert client.ledger.totals()["calls"] == 1
