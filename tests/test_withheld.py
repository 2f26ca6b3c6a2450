"""Training examples withheld to judge on (``--judge-train``): no harness learns from them, no search example or
proposer sees them, and the judgement scores them after the held-out validation examples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import ScriptedProposer
from test_held_out import ParityTask

from metaharness.budget import SearchBudget
from metaharness.errors import InputError
from metaharness.evaluation.task_evaluator import TaskEvaluator
from metaharness.models.stand_in import StandInClient
from metaharness.report import write_summary_markdown
from metaharness.search.loop import LoopSettings, Optimizer, Seed
from metaharness.search.settings import SearchSettings
from metaharness.search.staging import ExampleOrder
from metaharness.search.withheld import MIN_TRAINING_LEFT, WithheldTraining, withhold
from metaharness.store import RunDirectory


def parity() -> ParityTask:
    """14 training examples: 4 can be withheld and 10 left."""
    return ParityTask(val=12, train=14)


# Right on every example when it was built on 10 training examples, wrong on every one otherwise.
COUNTS_ITS_TRAINING = (
    "class Harness:\n"
    "    def __init__(self, lm, train):\n"
    "        self.right = len(train) == 10\n"
    "    def predict(self, x):\n"
    "        even = int(x.split()[1]) % 2 == 0\n"
    "        return 'even' if even == self.right else 'odd'\n"
)


def test_the_withheld_examples_leave_the_training_split_for_the_end_of_the_validation_split() -> None:
    view = WithheldTraining(parity(), 4)
    train, val = view.load("train"), view.load("val")
    assert len(view.withheld) == 4 and len(train) == 10 and not {e.id for e in train} & set(view.withheld)
    assert [e.id for e in val[:12]] == [e.id for e in parity().load("val")] and tuple(e.id for e in val[12:]) == (
        view.withheld
    )
    assert view.withheld == WithheldTraining(parity(), 4).withheld  # the same ones every time (SHA-256 order)
    assert WithheldTraining(parity(), 2).withheld == view.withheld[:2]
    assert withhold(task := parity(), 0) == (task, ())
    with pytest.raises(InputError, match=f"withhold at most {14 - MIN_TRAINING_LEFT}"):
        WithheldTraining(parity(), 14 - MIN_TRAINING_LEFT + 1)


def test_examples_that_only_judge_are_neither_searched_nor_confirmed_and_judge_last() -> None:
    ids = [f"v{k}" for k in range(20)]
    plain = ExampleOrder.split(ids, seed=3, holdout=10)
    order = ExampleOrder.split([*ids, "t1", "t2"], seed=3, holdout=10, judge_only=("t1", "t2"))
    assert (order.search, order.holdout, order.confirm) == (plain.search, plain.holdout, plain.confirm)
    assert order.judge == (*plain.judge, "t1", "t2") and order.judge_only == ("t1", "t2")


def test_a_run_judges_on_its_withheld_training_examples_and_no_harness_learns_from_them(tmp_path: Path) -> None:
    task, judge_only = withhold(parity(), 4)
    config = {"dataset": "parity", "task_model": "openai:toy-model", "judge_train": 4}
    run = RunDirectory.open(tmp_path / "run", config)
    search = SearchSettings(evaluation="planner", holdout=4, judge_train=4, budget=SearchBudget(evals_per_iter=2))
    Optimizer(
        run,
        LoopSettings("parity", search, iterations=0, test=False, judge_only=judge_only),
        ScriptedProposer(),
        TaskEvaluator(task, StandInClient(["even"], 0), workers=1),
        [Seed("counts", COUNTS_ITS_TRAINING)],
    ).run()
    run.close()
    [seed] = run.candidates()
    assert seed.score == 1.0  # built on the 10 training examples left
    order = ExampleOrder.split([e.id for e in task.load("val")], seed=0, holdout=4, judge_only=judge_only)
    [judgement] = run.log_records("judgement")
    assert judgement["examples"] == len(order.judge) == 3 + 4  # 4 held out (1 confirms), and the 4 withheld
    judged = run.split_result(seed.id, "holdout")
    assert judged is not None and judged.example_ids[-4:] == list(judge_only) and judged.primary == 1.0
    searched = {
        json.loads(line)["id"]
        for trace in (tmp_path / "run" / "traces").glob("*.val.jsonl")
        for line in trace.read_text().splitlines()
    }
    assert searched == set(order.search) and not searched & set(judge_only)
    text = write_summary_markdown(run).read_text(encoding="utf-8")
    assert "judged on 7 held-out examples nothing was chosen by, 4 of them training examples withheld" in text


def test_a_holdout_that_leaves_nothing_to_search_is_refused_before_the_run_starts(tmp_path: Path, monkeypatch) -> None:
    """The withheld training examples are no validation examples to search: the holdout is checked without them."""
    from test_settings_last import FAKE_MODEL, task_folder

    from metaharness.runner.optimize import optimize, run_config

    monkeypatch.setattr("metaharness.runner.optimize.get_proposer", lambda name, **config: ScriptedProposer())
    settings = run_config(str(task_folder(tmp_path)), task_model=FAKE_MODEL, holdout=6, judge_train=4)
    with pytest.raises(InputError, match="--holdout 6 leaves no validation example to search"):
        optimize(tmp_path / "run", settings, iterations=0, test=False)
    assert not (tmp_path / "run").exists()
