"""The evaluator's records, aggregates, trace files, determinism and CLI (scripted model; one slow real run)."""

from __future__ import annotations

import json
import pickle
import textwrap

import pytest
from fakes import ScriptedModel, traced_messages

from metaharness.candidates import seed_names, seed_path
from metaharness.evaluation import EvalReport, evaluate
from metaharness.evaluation.protocol import CandidateFailed
from metaharness.evaluation.proxy import ModelRef
from metaharness.evaluation.task_evaluator import TaskEvaluator
from metaharness.tasks import get_task

ECHO_HARNESS = """
class Harness:
    def __init__(self, lm, train):
        self.lm = lm
        self.labels = sorted({item["target"] for item in train})

    def predict(self, x):
        return self.lm("Labels: " + ", ".join(self.labels) + "\\n" + x, system="Diagnose.", max_tokens=16)
"""


DENGUE = "[DIAGNOSIS]dengue[/DIAGNOSIS]"


def answer_by_keyword(request):
    return DENGUE if "fever" in request.messages[-1]["content"] else "[DIAGNOSIS]allergy[/DIAGNOSIS]"


@pytest.fixture
def echo(tmp_path):
    path = tmp_path / "echo.py"
    path.write_text(ECHO_HARNESS)
    return path


def test_report_records_scores_and_cost(echo, shared_data_dir, tmp_path):
    client = ScriptedModel(answer_by_keyword)
    seen = []
    report = evaluate(
        echo,
        "symptom2disease",
        "val",
        model=client,
        limit=6,
        workers=4,
        data_dir=shared_data_dir,
        trace_path=tmp_path / "trace.jsonl",
        progress=lambda r, done, total: seen.append((done, total)),
    )
    assert isinstance(report, EvalReport)
    assert [r.id for r in report.records] == [f"val-{i:04d}" for i in range(6)]
    assert sorted(seen) == [(i, 6) for i in range(1, 7)]
    assert report.errors == 0 and len(client.requests) == 6
    record = report.records[1]  # dengue, "fever" in the text
    assert record.prediction == "[DIAGNOSIS]dengue[/DIAGNOSIS]" and record.scores == {"primary": 1.0}
    call = record.calls[0]
    messages = traced_messages(call)
    assert messages[0] == {"role": "system", "content": "Diagnose."}
    assert "Labels: allergy, arthritis" in messages[1]["content"]
    assert call["response"] == record.prediction and call["input_tokens"] > 0 and call["error"] is None
    expected = sum(r.scores["primary"] for r in report.records) / 6
    assert report.scores["primary"] == pytest.approx(expected)
    assert report.cost["calls"] == 6
    assert report.cost["context_tokens"] == pytest.approx(sum(r.input_tokens for r in report.records) / 6)
    assert report.cost["usd"] == 0.0
    lines = (tmp_path / "trace.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [r.id for r in report.records]


def test_write_summary_and_records(echo, shared_data_dir, tmp_path):
    report = evaluate(echo, "symptom2disease", "val", model=ScriptedModel(DENGUE), limit=2, data_dir=shared_data_dir)
    summary, records = report.write(tmp_path / "out")
    data = json.loads(summary.read_text())
    assert data["scores"] == report.scores and data["examples"] == 2 and data["model"] == "scripted:test"
    assert data["sandbox"]["write_barrier"]
    assert len(records.read_text().splitlines()) == 2


def test_reevaluation_is_identical(echo, shared_data_dir):
    first = evaluate(
        echo, "symptom2disease", "val", model=ScriptedModel(answer_by_keyword), limit=5, data_dir=shared_data_dir
    )
    second = evaluate(
        echo,
        "symptom2disease",
        "val",
        model=ScriptedModel(answer_by_keyword),
        limit=5,
        workers=1,
        data_dir=shared_data_dir,
    )
    assert [r.prediction for r in first.records] == [r.prediction for r in second.records]
    assert first.scores == second.scores


def test_bad_model_calls_reach_the_harness_as_errors(tmp_path, shared_data_dir):
    path = tmp_path / "bad_calls.py"
    path.write_text(
        textwrap.dedent("""
        class Harness:
            def __init__(self, lm, train):
                self.lm = lm
            def predict(self, x):
                try:
                    self.lm(x, max_tokens=-5)
                except self.lm.Error as error:
                    first = str(error)
                for _ in range(40):
                    try:
                        self.lm(x)
                    except self.lm.Error as error:
                        return first + " | " + str(error)
    """)
    )
    report = evaluate(path, "symptom2disease", "val", model=ScriptedModel(DENGUE), limit=1, data_dir=shared_data_dir)
    prediction = report.records[0].prediction
    assert prediction is not None
    assert "max_tokens must be an integer" in prediction and "call limit reached" in prediction
    assert len(report.records[0].calls) == 32  # the bad call and 31 good ones; the 33rd never reached the model


@pytest.mark.parametrize("task", ["lawbench", "symptom2disease", "uspto"])
def test_every_seed_loads_and_predicts(task, shared_data_dir):
    answers = {"lawbench": "[罪名]盗窃<eoa>", "symptom2disease": DENGUE, "uspto": "CCO.CC"}
    assert seed_names(task) == ["few_shot", "retrieval", "zero_shot"]
    for name in seed_names(task):
        report = evaluate(
            seed_path(task, name), task, "val", model=ScriptedModel(answers[task]), limit=1, data_dir=shared_data_dir
        )
        assert report.errors == 0, report.records[0].error
        assert report.records[0].prediction and len(report.records[0].calls) == 1


def test_model_ref_pickles_to_its_spec_and_the_parents_proxy():
    """A copy sent to another process (joblib's Dask or Ray backends) holds no client; its calls come back here
    (the whole path on a real Dask cluster: test_evaluation_cluster.py)."""
    model = ScriptedModel(DENGUE)
    ref = ModelRef(model)
    copy = pickle.loads(pickle.dumps(ref))
    try:
        assert copy.spec == "scripted:test" and copy.remote and not ref.remote
        recorder = copy.recorder()
        assert recorder({"messages": [{"role": "user", "content": "fever"}]}) == {"text": DENGUE, "parsed": None}
        assert len(model.requests) == 1 and recorder.calls[0]["response"] == DENGUE
    finally:
        ref.close()


def test_task_evaluator_reports_a_harness_that_cannot_load_as_failed(tmp_path, shared_data_dir):
    """The loop's real evaluator: a harness whose __init__ raises fails as a whole, with the harness's error."""
    from metaharness.models import connect

    path = tmp_path / "harness.py"
    path.write_text(
        "class Harness:\n"
        "    def __init__(self, lm, train):\n"
        "        raise RuntimeError('no labels in the training split')\n"
        "\n"
        "    def predict(self, x):\n"
        "        return x\n"
    )
    client = connect("local:smollm2-135m", cache=False)
    evaluator = TaskEvaluator(get_task("symptom2disease", data_dir=shared_data_dir), client, val_limit=2)
    trace = tmp_path / "trace.jsonl"
    with pytest.raises(CandidateFailed, match="RuntimeError: no labels in the training split") as failed:
        evaluator.evaluate(path, "val", trace_path=trace)
    assert "failed to load" in str(failed.value) and "harness.py line 3" in str(failed.value)
    assert "no labels in the training split" in (evaluator.check(path) or "")
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [r["id"] for r in records] == ["val-0000", "val-0001"]  # val_limit=2, each with the error
    assert all(r["calls"] == [] and "no labels" in r["error"] for r in records)
    assert client.ledger.totals()["calls"] == 0  # it failed before any model call
