"""The test split at the end of a run (metaharness.search.test_split): within its bound, in stages that a stop
request interrupts, continued by a rerun, and never scored twice."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from fakes import FakeEvaluator, ScriptedProposer, program

from metaharness.budget import SearchBudget
from metaharness.candidate import Evaluation
from metaharness.errors import InputError
from metaharness.evaluation.protocol import Progress
from metaharness.search.loop import LoopEvents, LoopSettings, Optimizer, Seed, StopRequest
from metaharness.search.settings import SearchSettings
from metaharness.search.test_split import STAGE, TestSplit
from metaharness.store import RunDirectory

CONFIG = {"dataset": "toy", "task_model": "fake", "val_limit": 4}


class TestSplitEvaluator(FakeEvaluator):
    """``FakeEvaluator`` with a test split of 30 examples; ``on_test`` runs after each test stage."""

    __test__ = False
    TEST = [f"t{i:02d}" for i in range(30)]

    def __init__(self) -> None:
        super().__init__()
        self.test_available = True
        self.test_stages: list[list[str]] = []
        self.on_test = lambda: None

    def examples(self, split: str) -> list[str]:
        return list(self.TEST) if split == "test" else super().examples(split)

    def evaluate(
        self,
        harness: Path,
        split: str,
        *,
        trace_path: Path,
        progress: Progress | None = None,
        examples: Sequence[str] | None = None,
    ) -> Evaluation:
        evaluation = super().evaluate(harness, split, trace_path=trace_path, progress=progress, examples=examples)
        if split == "test":
            self.test_stages.append(list(examples or []))
            self.on_test()
        return evaluation


class Notes(LoopEvents):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)


def run_loop(tmp_path: Path, evaluator: FakeEvaluator, test: bool | TestSplit, stop: StopRequest | None = None):
    run = RunDirectory.open(tmp_path / "run", CONFIG)
    search = SearchSettings(evaluation="best-of-n", budget=SearchBudget(evals_per_iter=1))
    events = Notes()
    seeds = [Seed("zero", program(0.2)), Seed("few", program(0.3))]
    optimizer = Optimizer(
        run, LoopSettings("toy", search, 1, test=test), ScriptedProposer(), evaluator, seeds, events=events, stop=stop
    )
    outcome = optimizer.run()
    run.close()
    return run, outcome, events.notes


def test_by_default_the_test_split_is_as_large_as_the_validation_split_in_stages(tmp_path):
    evaluator = TestSplitEvaluator()
    run, outcome, _ = run_loop(tmp_path, evaluator, True)
    assert outcome.best is not None and set(outcome.test) >= {outcome.best.id}
    assert all(ev.examples == 4 and ev.example_ids == evaluator.TEST[:4] for ev in outcome.test.values())
    assert evaluator.test_stages[0] == evaluator.TEST[:4]  # the first 4 of the split: as many as val has


def test_a_limit_bounds_each_candidate_and_stages_save_as_they_go(tmp_path):
    evaluator = TestSplitEvaluator()
    run, outcome, _ = run_loop(tmp_path, evaluator, TestSplit(limit=20))
    best = outcome.best
    assert best is not None and outcome.test[best.id].examples == 20 and outcome.test[best.id].share == 20
    assert all(len(stage) <= STAGE for stage in evaluator.test_stages)
    assert len(evaluator.test_stages) == 3 * len(outcome.test)  # 8 + 8 + 4 per candidate
    trace = (run.path / "traces" / f"{best.id}.test.jsonl").read_text().splitlines()
    assert len(trace) == 20  # the stages' records merged into one trace


def test_a_stop_request_ends_the_test_split_after_a_stage_and_a_rerun_continues_it(tmp_path):
    evaluator = TestSplitEvaluator()
    stop = StopRequest()

    def ctrl_c() -> None:  # Ctrl-C while the first test stage runs
        stop.requested = True

    evaluator.on_test = ctrl_c
    run, outcome, _ = run_loop(tmp_path, evaluator, TestSplit(whole=True), stop=stop)
    assert outcome.stopped is not None and outcome.stopped.startswith("interrupted")
    saved = [ev for cid in ("c001", "c002", "c003") if (ev := run.test_result(cid)) is not None]
    assert [ev.examples for ev in saved] == [STAGE]  # the stage in flight was scored and saved, nothing more
    evaluator.on_test = lambda: None
    evaluator.test_stages.clear()
    run, outcome, notes = run_loop(tmp_path, evaluator, TestSplit(whole=True))
    assert outcome.stopped is None and all(ev.examples == 30 for ev in outcome.test.values())
    assert any(note.startswith("test split: continuing") and f"from {STAGE} of 30" in note for note in notes)
    assert evaluator.test_stages[0] == evaluator.TEST[STAGE : 2 * STAGE]  # no example scored twice


def test_a_finished_run_does_not_score_the_test_split_again_and_says_so(tmp_path):
    evaluator = TestSplitEvaluator()
    run, first, _ = run_loop(tmp_path, evaluator, TestSplit(limit=10))
    evaluator.test_stages.clear()
    run, again, notes = run_loop(tmp_path, evaluator, TestSplit(limit=10))
    assert evaluator.test_stages == [] and again.test.keys() == first.test.keys()
    assert any(note.startswith("test split already scored, kept") for note in notes)
    run, more, _ = run_loop(tmp_path, evaluator, TestSplit(limit=12))  # a larger bound scores only what is new
    assert all(stage == evaluator.TEST[10:12] for stage in evaluator.test_stages)
    assert all(ev.examples == 12 for ev in more.test.values())


def test_no_test_split_scores_nothing_and_an_unavailable_one_is_noted(tmp_path):
    evaluator = TestSplitEvaluator()
    run_loop(tmp_path / "off", evaluator, False)
    assert evaluator.test_stages == []
    evaluator.test_available = False
    run, outcome, notes = run_loop(tmp_path / "missing", evaluator, True)
    assert outcome.test == {} and any(note.startswith("test split not evaluated: no test split") for note in notes)


def test_the_test_limit_is_a_number_or_all():
    assert TestSplit.parse("all") == TestSplit(whole=True) and TestSplit.parse("25") == TestSplit(limit=25)
    for bad in ("0", "-3", "many", ""):
        with pytest.raises(InputError, match="--test-limit takes"):
            TestSplit.parse(bad)
    assert TestSplit.of(True) == TestSplit() and TestSplit.of(False) is None
