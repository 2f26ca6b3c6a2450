"""A task model that stays unreachable (429 and 503 until the retries are spent) stops the evaluation and the run:
nothing is scored, nothing is committed as 0.000, and the same command continues once the model answers again.
The proxy that carries remote jobs' calls checks its token before it reads anything else.

The model is a real OpenAI-compatible HTTP server on 127.0.0.1 behind a fault-injecting proxy, reached through the
real ``openai`` client; the harness runs in the real sandbox.
"""

from __future__ import annotations

import pickle
import socket

import pytest
from fakes import ScriptedModel, ScriptedProposer, ServedModel, ToyTask
from model_server import FaultProxy

from metaharness.budget import SearchBudget
from metaharness.errors import ModelUnavailable
from metaharness.evaluation import evaluate
from metaharness.evaluation.proxy import TOKEN_LINE, ModelRef
from metaharness.evaluation.task_evaluator import TaskEvaluator
from metaharness.models import RetryPolicy, connect
from metaharness.search.loop import LoopSettings, Optimizer, Seed
from metaharness.search.settings import SearchSettings
from metaharness.store import RunDirectory

DENGUE = "[DIAGNOSIS]dengue[/DIAGNOSIS]"
HARNESS = "class Harness:\n    def __init__(self, lm, train):\n        self.lm = lm\n\n    def predict(self, x):\n"
HARNESS += "        return self.lm(x, max_tokens=8)\n"
NO_WAIT = RetryPolicy(max_attempts=3, base_delay=0.0, max_delay=0.0)


@pytest.fixture
def outage():
    """A served model behind a proxy that answers 429 and 503 to every POST until ``heal()``."""
    served = ServedModel(ScriptedModel(DENGUE))
    proxy = FaultProxy(served.base_url)
    for _ in range(100):
        proxy.inject(429, headers={"retry-after": "0"}, message="rate limited")
        proxy.inject(503, message="overloaded")
    yield proxy
    proxy.close()
    served.close()


def client_for(proxy: FaultProxy):
    return connect(f"openai:scripted@{proxy.base_url}", cache=False, retry=NO_WAIT)


def test_an_outage_stops_the_evaluation_without_a_score(outage, tmp_path):
    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)
    trace = tmp_path / "records.jsonl"
    with pytest.raises(ModelUnavailable, match="rerun the same command to continue") as raised:
        evaluate(harness, ToyTask(), "val", model=client_for(outage), workers=2, trace_path=trace)
    message = str(raised.value)
    assert raised.value.exit_code == 5 and ("HTTP 503" in message or "HTTP 429" in message), message
    assert not trace.exists()  # no record of any example, so nothing scores 0


def test_an_outage_reaches_a_remote_job_as_the_same_error(outage):
    remote = pickle.loads(pickle.dumps(ModelRef(client_for(outage))))
    with pytest.raises(ModelUnavailable, match="is unavailable"):
        remote.recorder()({"messages": [{"role": "user", "content": "fever"}], "max_tokens": 8})


def test_an_outage_stops_the_run_with_a_stop_line_and_the_same_command_continues(outage, tmp_path):
    def optimizer(run: RunDirectory) -> Optimizer:
        search = SearchSettings(evaluation="best-of-n", budget=SearchBudget(evals_per_iter=1))
        settings = LoopSettings("toy", search, 0)
        evaluator = TaskEvaluator(ToyTask(), client_for(outage))
        return Optimizer(run, settings, ScriptedProposer(), evaluator, [Seed("ask", HARNESS)])

    config = {"dataset": "toy", "task_model": "openai:scripted", "proposer": "none"}
    run = RunDirectory.open(tmp_path / "run", config)
    with pytest.raises(ModelUnavailable) as raised:
        optimizer(run).run()
    run.close()
    assert raised.value.exit_code == 5
    [unscored] = run.candidates()  # committed when checked, but not scored, least of all as 0.000
    assert unscored.implemented and unscored.evaluation is None
    assert "rerun the same command" in run.log_records("stop")[-1]["reason"]

    outage.heal()
    run = RunDirectory.open(tmp_path / "run", config)
    outcome = optimizer(run).run()
    run.close()
    [seed] = run.candidates()
    assert outcome.stopped is None and seed.evaluated and seed.score == pytest.approx(1 / 3)


def _ask_proxy(first_bytes: bytes) -> bytes:
    """The proxy's answer to a connection that sends ``first_bytes`` and then nothing (a client that would block a
    proxy reading to the end of a line)."""
    ref = ModelRef(ScriptedModel(DENGUE))
    address = ref.serve()
    try:
        with socket.create_connection((address.host, address.port), timeout=20) as s:
            s.sendall(first_bytes)
            return s.makefile("rb").readline()
    finally:
        ref.close()


def test_the_proxy_refuses_a_bad_token_before_reading_the_body(capfd):
    # The body after the wrong token has no end of line: a proxy that read it first would wait for the rest.
    assert b"refused" in _ask_proxy(b"guess\n{" + b"a" * 32_000)
    assert b"refused" in _ask_proxy("t\u00f6ken-\u00e9\n".encode())  # not ASCII
    assert b"refused" in _ask_proxy(b"x" * (4 * TOKEN_LINE))  # longer than any token, no end of line
    assert "Traceback" not in capfd.readouterr().err
