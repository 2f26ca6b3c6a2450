"""The candidate a run returns is chosen on validation examples no proposer has seen: a harness that looks up the
search examples' answers tops the search and is not returned; the held-out scores never reach a proposer."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import ScriptedModel, ScriptedProposer

from metaharness.budget import SearchBudget
from metaharness.errors import InputError
from metaharness.evaluation.task_evaluator import TaskEvaluator
from metaharness.models.stand_in import StandInClient
from metaharness.report import write_summary_markdown
from metaharness.search.baseline import KS, NeighbourVote
from metaharness.search.judgement import paired_interval
from metaharness.search.loop import LoopSettings, Optimizer, Seed
from metaharness.search.model_free import ModelFreeCheck
from metaharness.search.settings import SearchSettings
from metaharness.search.staging import ExampleOrder, auto_holdout, confirm_size
from metaharness.store import RunDirectory
from metaharness.tasks.protocol import Example


class ParityTask:
    """``case k`` in, ``even`` or ``odd`` out; ``train`` training and ``val`` validation examples (6 and 12 unless
    said)."""

    name = "parity"
    description = "Say whether the case number is even or odd."

    def __init__(self, val: int = 12, train: int = 6) -> None:
        self.val, self.train = val, train

    def load(self, split: str) -> list[Example]:
        sizes = {"train": self.train, "val": self.val}
        if split not in sizes:
            raise InputError(f"no split {split!r}")
        return [Example(f"{split}-{k:02d}", f"case {k}", "even" if k % 2 == 0 else "odd") for k in range(sizes[split])]

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        return {"primary": float(prediction.strip() == example.target)}

    def metric_names(self) -> list[str]:
        return ["primary"]


# Right except on multiples of 5 (about 0.8 everywhere).
HONEST = (
    "class Harness:\n"
    "    def __init__(self, lm, train):\n"
    "        pass\n"
    "    def predict(self, x):\n"
    "        k = int(x.split()[1])\n"
    "        return ('odd' if k % 2 == 0 else 'even') if k % 5 == 0 else ('even' if k % 2 == 0 else 'odd')\n"
)


def lookup(table: dict[str, str]) -> str:
    """Right on the inputs it has copied, wrong everywhere else."""
    return (
        f"TABLE = {table!r}\n"
        "class Harness:\n"
        "    def __init__(self, lm, train):\n"
        "        pass\n"
        "    def predict(self, x):\n"
        "        return TABLE.get(x, 'neither')\n"
    )


def test_the_held_out_examples_come_from_outside_the_search_and_split_in_confirm_and_judge() -> None:
    ids = [f"v{k}" for k in range(50)]
    order = ExampleOrder.split(ids, seed=0, limit=10)
    assert len(order.search) == 10 and set(order.search) == set(ids[:10])  # the search's share as before
    assert len(order.holdout) == 25 and not set(order.holdout) & set(order.search)
    assert len(order.confirm) == 5 and len(order.judge) == 20 and order.confirm + order.judge == order.holdout
    whole = ExampleOrder.split(ids, seed=0)
    assert len(whole.search) == 25 and len(whole.holdout) == 25
    assert auto_holdout(9) == 0 and auto_holdout(30) == 15 and auto_holdout(50, 45) == 5
    assert confirm_size(1) == 0 and confirm_size(2) == 1 and confirm_size(20) == 4
    assert ExampleOrder.split(ids, seed=0, limit=10, holdout=0).holdout == ()
    with pytest.raises(InputError, match="only 40 of the 50"):
        ExampleOrder.split(ids, seed=0, limit=10, holdout=41)


def test_a_lookup_table_of_the_search_examples_tops_the_search_and_is_not_returned(tmp_path: Path) -> None:
    task = ParityTask(val=20)  # 10 held out: 2 confirm, 8 judge
    val = [e.id for e in task.load("val")]
    order = ExampleOrder.split(val, seed=0, holdout=10)
    answers = {e.input: e.target for e in task.load("val") if e.id in order.search}
    model = ScriptedModel("even", spec="openai:toy-model")
    run = RunDirectory.open(tmp_path / "run", {"dataset": "parity", "task_model": "openai:toy-model"})
    search = SearchSettings(evaluation="planner", holdout=10, budget=SearchBudget(evals_per_iter=2))
    proposer = ScriptedProposer()
    free = ModelFreeCheck(task, lambda view, client: TaskEvaluator(view, client, workers=1), tmp_path / "free")
    optimizer = Optimizer(
        run,
        LoopSettings("parity", search, iterations=0, test=False),
        proposer,
        TaskEvaluator(task, StandInClient(["even"], 0), workers=1),
        [Seed("honest", HONEST), Seed("lookup", lookup(answers))],
        model_free=free,
        baseline=NeighbourVote.scorer(task),
    )
    outcome = optimizer.run()
    run.close()
    by_summary = {c.summary: c for c in run.candidates()}
    honest, copied = by_summary["seed: honest"], by_summary["seed: lookup"]
    assert copied.score == 1.0 and honest.score < 1.0  # the table tops the search
    assert copied.evaluation is not None and copied.evaluation.confirm is not None
    assert honest.evaluation is not None and honest.evaluation.confirm is not None
    assert copied.evaluation.confirm.primary == 0.0 and honest.evaluation.confirm.primary > 0.0
    assert outcome.best is not None and outcome.best.id == honest.id  # returned: chosen on the held-out examples
    stored = run.store.best()
    assert stored is not None and stored.id == honest.id  # git's best agrees
    judged = run.split_result(honest.id, "holdout")
    assert judged is not None and judged.examples == 8 and judged.example_ids == list(order.judge)
    assert len(run.log_records("confirm")) == 2 and len(run.log_records("holdout")) == 1
    assert not model.requests
    [judgement] = run.log_records("judgement")  # the returned candidate, the best seed and the baseline, paired
    assert judgement["examples"] == 8 and judgement["scores"]["returned"]["id"] == honest.id
    assert judgement["scores"]["best seed"]["id"] == honest.id  # the returned candidate is a seed here
    assert set(judgement["scores"]) == {"returned", "best seed", "baseline"} and judgement["baseline"]["k"] in KS
    over = {c["over"]: c for c in judgement["comparisons"]}
    assert over["best seed"]["difference"] == 0.0 and over["best seed"]["interval"] == [0.0, 0.0]
    low, high = over["baseline"]["interval"]
    assert low <= over["baseline"]["difference"] <= high and over["baseline"]["above_zero"] == (low > 0)
    text = write_summary_markdown(run).read_text(encoding="utf-8")
    assert "10 held out (2 choose what the run returns, 8 judge it)" in text
    assert "confirmed 1.0000 on 2 held-out examples" in text or "confirmed 0.5000 on 2 held-out examples" in text
    assert "## What the search bought (judged on 8 held-out examples nothing was chosen by)" in text
    assert "- returned minus best seed: +0.0000, 95% interval [+0.0000, +0.0000] (not above 0)" in text


def test_a_proposer_never_sees_a_held_out_score(tmp_path: Path) -> None:
    task = ParityTask()
    run = RunDirectory.open(tmp_path / "run", {"dataset": "parity", "task_model": "openai:toy-model"})
    search = SearchSettings(evaluation="planner", holdout=6, budget=SearchBudget(evals_per_iter=2))
    proposer = ScriptedProposer()
    optimizer = Optimizer(
        run,
        LoopSettings("parity", search, iterations=1, test=False),
        proposer,
        TaskEvaluator(task, StandInClient(["even"], 0), workers=1),
        [Seed("honest", HONEST)],
    )
    optimizer.run()
    run.close()
    assert any(c.evaluation is not None and c.evaluation.confirm is not None for c in run.candidates())
    seen = proposer.states[0].candidates
    assert seen and all(c.evaluation is None or c.evaluation.confirm is None for c in seen)
    held = set(ExampleOrder.split([e.id for e in task.load("val")], seed=0, holdout=6).holdout)
    assert not held & {i for c in seen for i in (c.evaluation.example_ids if c.evaluation else [])}


def test_a_paired_interval_holds_the_mean_and_is_the_same_on_every_call() -> None:
    a, b = [1.0, 1.0, 0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    mean, low, high = paired_interval(a, b)
    assert mean == pytest.approx(2 / 6) and low <= mean <= high and (mean, low, high) == paired_interval(a, b)
    assert paired_interval([1.0] * 6, [0.0] * 6) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="same examples"):
        paired_interval([1.0], [1.0, 0.0])


def test_a_holdout_of_one_has_no_confirm_third_and_judges_the_search_best(tmp_path: Path) -> None:
    task = ParityTask()
    run = RunDirectory.open(tmp_path / "run", {"dataset": "parity", "task_model": "openai:toy-model"})
    search = SearchSettings(evaluation="planner", holdout=1, budget=SearchBudget(evals_per_iter=2))
    optimizer = Optimizer(
        run,
        LoopSettings("parity", search, iterations=0, test=False),
        ScriptedProposer(),
        TaskEvaluator(task, StandInClient(["even"], 0), workers=1),
        [Seed("honest", HONEST)],
    )
    outcome = optimizer.run()
    run.close()
    assert outcome.best is not None and outcome.best.evaluation is not None
    assert outcome.best.evaluation.confirm is None and not run.log_records("confirm")  # nothing to confirm on
    judged = run.split_result(outcome.best.id, "holdout")
    assert judged is not None and judged.examples == 1
