"""What a proposer sees (proposers/evidence.py): whole sources within a budget, trace excerpts with the prompts a
harness sent, failed attempts; traces come from a real sandboxed evaluation with a scripted task model."""

from __future__ import annotations

import json
import re

import pytest
from fakes import ScriptedModel, traced_messages

from metaharness.candidate import Candidate, Evaluation
from metaharness.evaluation import evaluate
from metaharness.evaluation.records import ExampleRecord, write_records
from metaharness.proposers.evidence import (
    SEPARATOR,
    Item,
    Selection,
    failed_attempts,
    load_records,
    records_within,
    render_record,
    sources_within,
    text_tokens,
    trace_excerpts,
)
from metaharness.search.protocol import RunState

# Two calls per example: a few-shot prompt built from train, then a follow-up carrying the first answer.
TWO_CALL_HARNESS = """
class Harness:
    def __init__(self, lm, train):
        self.lm = lm
        self.shots = "\\n".join(f"{t['input']} => {t['target']}" for t in train[:3])
        self.system = "Diagnose the patient. Answer with one of: " + ", ".join(sorted({t["target"] for t in train}))

    def predict(self, x):
        first = self.lm("Examples:\\n" + self.shots + "\\nPatient: " + x, system=self.system)
        return self.lm("You said: " + first + "\\nAnswer with the diagnosis only.", max_tokens=16)
"""


def answer(request) -> str:
    last = request.messages[-1]["content"]
    if last.startswith("You said: "):
        return "dengue" if "fever" in last else "allergy"
    return "fever suspected" if "fever" in last else "rash suspected"


@pytest.fixture
def traced(tmp_path, shared_data_dir):
    """A candidate evaluated for real on 6 validation examples, its trace where the run keeps traces."""
    harness = tmp_path / "harness.py"
    harness.write_text(TWO_CALL_HARNESS)
    trace = tmp_path / "traces" / "c001.val.jsonl"
    report = evaluate(
        harness,
        "symptom2disease",
        "val",
        model=ScriptedModel(answer),
        limit=6,
        data_dir=shared_data_dir,
        trace_path=trace,
    )
    candidate = Candidate(
        id="c001",
        parent=None,
        iteration=0,
        source=TWO_CALL_HARNESS,
        evaluation=Evaluation("val", dict(report.scores), dict(report.cost)),
        trace="traces/c001.val.jsonl",
    )
    state = RunState(task="symptom2disease", iteration=1, candidates=[candidate], proposals=1, run_dir=tmp_path)
    return state, candidate, report


def test_the_trace_records_every_prompt_the_harness_sent_and_every_answer(traced) -> None:
    state, candidate, report = traced
    records = load_records(state.trace_path(candidate))
    assert [r.id for r in records] == [r.id for r in report.records] and len(records) == 6
    for record in records:
        first, second = record.calls
        messages = traced_messages(first)
        assert messages[0]["role"] == "system"
        assert messages[0]["content"].startswith("Diagnose the patient. Answer with one of: allergy, ")
        assert messages[1]["content"].startswith("Examples:\n") and record.input in messages[1]["content"]
        assert first["response"] in ("fever suspected", "rash suspected")
        assert second["messages"] == [
            {"role": "user", "content": f"You said: {first['response']}\nAnswer with the diagnosis only."}
        ]
        assert second["response"] == record.prediction and second["options"]["max_tokens"] == 16
        assert first["input_tokens"] > 0 and first["output_tokens"] > 0 and first["error"] is None


def test_trace_excerpts_show_prompts_and_answers_failures_first(traced) -> None:
    state, candidate, report = traced
    text = trace_excerpts(state, candidate, token_budget=None)
    shown = re.findall(r"^### Example (\S+): ", text, flags=re.M)
    assert sorted(shown) == sorted(r.id for r in report.records)
    scores = {r.id: r.scores["primary"] for r in report.records}
    assert 0 < sum(scores.values()) < 6  # the scripted model gets some right and some wrong
    assert [scores[i] for i in shown] == sorted(scores[i] for i in shown)  # wrong ones first
    first = report.records[0]
    system = traced_messages(first.calls[0])[0]["content"]
    assert len(system) >= 200 and text.count(system) == 1  # the shared system prompt: shown once, then referred to
    assert text.count("[system] (identical to example ") == 5
    assert traced_messages(first.calls[0])[1]["content"] in text  # the whole few-shot prompt, verbatim
    assert f"[response]\n{first.calls[1]['response']}" in text
    assert "Left out" not in text


def test_trace_excerpts_keep_whole_records_within_the_budget(traced) -> None:
    state, candidate, report = traced
    whole = {r.id: render_record(r) for r in report.records}
    budget = text_tokens(max(whole.values(), key=len)) * 2 + 60
    text = trace_excerpts(state, candidate, token_budget=budget)
    assert text_tokens(text) <= budget  # the closing line included
    body, note = text.split("\n\n[Left out whole", 1)
    shown = re.findall(r"^### Example (\S+): ", body, flags=re.M)
    assert 2 <= len(shown) < 6
    left = set(whole) - set(shown)
    assert all(i in note for i in left)
    for record in report.records:  # every shown record is whole: its answers and its input, none cut
        if record.id in shown:
            assert record.input in body and all(c["response"] in body for c in record.calls)


def test_trace_excerpts_of_chosen_examples_and_of_old_records(traced, tmp_path) -> None:
    state, candidate, report = traced
    wanted = [report.records[3].id, "no-such-example"]
    text = trace_excerpts(state, candidate, examples=wanted, token_budget=None)
    assert re.findall(r"^### Example (\S+): ", text, flags=re.M) == [report.records[3].id]
    assert "no record of no-such-example" in text
    # A record written before calls were recorded (no "calls", extra unknown fields) still loads.
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps({"id": "e1", "input": "x", "target": "y", "prediction": "z", "extra": 1}) + "\n{torn")
    (record,) = load_records(old)
    assert record.calls == [] and record.prediction == "z"
    assert "[prediction]\nz" in render_record(record)


def test_trace_excerpts_without_a_trace_say_why() -> None:
    failed = Candidate(id="c002", parent="c001", iteration=1, source="x", status="failed", error="SyntaxError: oops")
    state = RunState(task="t", iteration=2, candidates=[failed], proposals=1)
    assert "it failed: SyntaxError: oops" in trace_excerpts(state, failed)


def test_a_failed_example_shows_its_error_and_its_calls(tmp_path) -> None:
    record = ExampleRecord(
        id="e1",
        input="in",
        target="t",
        error="ValueError: parse failed (harness.py line 9)",
        scores={"primary": 0.0},
        calls=[{"messages": [{"role": "user", "content": "q"}], "response": None, "error": "bad lm() call: no"}],
    )
    path = write_records([record], tmp_path / "t.jsonl")
    state = RunState(task="t", iteration=1, candidates=[], proposals=1)
    cand = Candidate(id="c1", parent=None, iteration=0, source="", trace=str(path), evaluation=Evaluation("val", {}))
    text = trace_excerpts(state, cand)
    assert "ERROR" in text and "[error]\nValueError: parse failed (harness.py line 9)" in text
    assert "[user]\nq" in text and "[call error]\nbad lm() call: no" in text and "[prediction]\n(none)" in text


def _candidate(cid: str, lines: int, score: float = 0.5) -> Candidate:
    source = "class Harness:\n" + "".join(f"    x{i} = {i}  # line {i}\n" for i in range(lines))
    return Candidate(id=cid, parent=None, iteration=0, source=source, evaluation=Evaluation("val", {"primary": score}))


def test_sources_within_keeps_whole_files_and_drops_never_clips() -> None:
    big, small, medium = _candidate("c1", 400), _candidate("c2", 10), _candidate("c3", 60)
    budget = text_tokens(small.source) + text_tokens(medium.source) + 200
    text = sources_within([big, small, medium], budget)
    assert text_tokens(text) <= budget
    body, note = text.split("\n\n[Left out whole", 1)
    assert small.source.rstrip() in body and medium.source.rstrip() in body  # whole, in order after the big one
    assert "## Candidate c1" not in body and "c1" in note  # dropped whole and named
    assert body.index("## Candidate c2") < body.index("## Candidate c3")
    everything = sources_within([big, small, medium], None)
    assert all(c.source.rstrip() in everything for c in (big, small, medium)) and "Left out" not in everything
    assert "[Left out whole" in sources_within([big], 10) and big.source not in sources_within([big], 10)


def test_failed_attempts_are_whole_most_recent_first_within_budget() -> None:
    long_error = "Traceback (most recent call last):\n" + "  frame\n" * 300 + "KeyError: 'label'"
    failed = [
        Candidate(id="c2", parent="c1", iteration=1, source="", status="failed", summary="a", error="E1: early"),
        Candidate(id="c5", parent="c2", iteration=3, source="", status="failed", summary="b", error=long_error),
        Candidate(
            id="c7", parent="c1", iteration=4, source="", status="failed", summary="c", hypothesis="h", error="E3"
        ),
    ]
    state = RunState(task="t", iteration=5, candidates=[_candidate("c1", 3), *failed], proposals=1)
    text = failed_attempts(state, None)
    assert text.index("## c7") < text.index("## c5") < text.index("## c2")
    assert long_error in text and "Hypothesis: h" in text and "(iteration 3, parent c2)" in text
    small = failed_attempts(state, 200)
    assert text_tokens(small) <= 200 and long_error not in small and "## c7" in small and "## c2" in small
    assert re.search(r"\[Left out whole .*: c5\. ", small)
    assert "(none so far)" in failed_attempts(RunState(task="t", iteration=1, candidates=[], proposals=1), 100)


def test_records_within_refers_only_to_messages_it_shows() -> None:
    """Probe runs (training examples) render the same way; a reference always points at a record kept above."""
    shared = "You are a careful classifier. " * 20
    records = [
        ExampleRecord(
            id=f"t{i}",
            input=f"case {i}" + " detail" * (300 if i == 0 else 1),
            target="a",
            prediction="a" if i % 2 else "b",
            scores={"primary": float(i % 2)},
            calls=[{"messages": [{"role": "system", "content": shared}, {"role": "user", "content": f"case {i}"}]}],
        )
        for i in range(4)
    ]
    budget = text_tokens(render_record(records[2])) + 200  # t0 (failing, long) cannot fit; t2 (failing) can
    text = records_within(records, budget, "# Probe")
    assert text.startswith("# Probe") and "### Example t2" in text and "### Example t0" not in text
    assert text.count(shared) == 1 and "t0 [primary 0]" in text  # the left-out line names it and how it did
    references = re.findall(r"identical to example (\S+) call", text)
    assert references and all(f"### Example {example}:" in text for example in references)


def test_the_closing_line_counts_in_the_budget() -> None:
    """Items that fill the budget exactly leave no room for the closing line: the last one kept goes out too."""
    a, b, c = Item("a", "x" * 300), Item("b", "y" * 300), Item("c", "z" * 3000)
    budget = text_tokens(a.text + SEPARATOR) + text_tokens(b.text + SEPARATOR)
    selection = Selection(budget)
    assert [selection.offer(item) for item in (a, b, c)] == [True, True, False]
    text = selection.render()
    assert text_tokens(text) <= budget and a.text in text and b.text not in text
    assert text.endswith("budget: c, b. Nothing shown above is cut.]")
