"""A model-free program is scored on the training examples by cross-validation with no model call, never on an
example its program was built on; the score orders contenders that tie on the validation scores, and a program
whose outputs read the model gets none."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from fakes import ScriptedProposer
from test_held_out import ParityTask
from test_model_free import IGNORES, ToyTask
from test_one_budget import TAGGED, harness

from metaharness import frontier
from metaharness.budget import SearchBudget
from metaharness.candidate import Candidate, Evaluation
from metaharness.evaluation.task_evaluator import TaskEvaluator
from metaharness.models.stand_in import StandInClient
from metaharness.report import write_summary_markdown
from metaharness.search.loop import LoopSettings, Optimizer, Seed
from metaharness.search.model_free import ModelFreeCheck
from metaharness.search.protocol import Proposal
from metaharness.search.settings import SearchSettings
from metaharness.search.train_folds import TrainFolds
from metaharness.store import RunDirectory
from metaharness.tasks.protocol import Example

# Right but on case 9 (a search example).
PARITY = (
    "class Harness:\n"
    "    def __init__(self, lm, train):\n"
    "        pass\n"
    "    def predict(self, x):\n"
    "        k = int(x.split()[1])\n"
    "        return 'even' if (k % 2 == 0) != (k == 9) else 'odd'\n"
)
# Wrong on case 11 (another search example) and on a training input it was not given: on the validation examples
# (cases 0-11; training cases 0-5) it scores as PARITY does, on a fold never right.
UNSEEN_WRONG = (
    "class Harness:\n"
    "    def __init__(self, lm, train):\n"
    "        self.seen = {t['input'] for t in train}\n"
    "    def predict(self, x):\n"
    "        k = int(x.split()[1])\n"
    "        right = (x in self.seen or k >= 6) and k != 11\n"
    "        return 'even' if (k % 2 == 0) == right else 'odd'\n"
)
EVEN = (
    "class Harness:\n"
    "    def __init__(self, lm, train):\n"
    "        pass\n"
    "    def predict(self, x):\n"
    "        return 'even'\n"
)


class RingTask(ToyTask):
    """The toy diagnosis task with nine training examples, three per label."""

    TRAIN = [
        ("train-0000", "High fever and a rash.", "dengue"),
        ("train-0001", "A fever with pain behind the eyes.", "dengue"),
        ("train-0002", "Fever, aching joints, shivering.", "dengue"),
        ("train-0003", "An itchy red ring on the skin.", "fungal infection"),
        ("train-0004", "A red ring that is itchy, on my leg.", "fungal infection"),
        ("train-0005", "A ring-shaped itchy patch.", "fungal infection"),
        ("train-0006", "Silvery scales on my elbows.", "psoriasis"),
        ("train-0007", "Silvery plaques on the scalp.", "psoriasis"),
        ("train-0008", "Thick silvery scales on the knees.", "psoriasis"),
    ]

    def load(self, split: str) -> list[Example]:
        if split == "train":
            return [Example(id, text, target) for id, text, target in self.TRAIN]
        return super().load(split)


# A nearest-neighbour vote by shared words, which calls the model and ignores what it says.
NEAREST = (
    "class Harness:\n"
    "    def __init__(self, lm, train):\n"
    "        self.lm, self.train = lm, train\n"
    "    def predict(self, x):\n"
    "        self.lm(x)\n"
    "        words = lambda text: {w.strip('.,') for w in text.lower().split() if len(w.strip('.,')) > 3}\n"
    "        best = max(self.train, key=lambda t: len(words(x) & words(t['input'])))\n"
    "        return '[DIAGNOSIS]' + best['target'] + '[/DIAGNOSIS]'\n"
)
# Right only on an input it was given in training: a fold it was not built on finds it out.
COPIES = (
    "class Harness:\n"
    "    def __init__(self, lm, train):\n"
    "        self.known = {t['input']: t['target'] for t in train}\n"
    "    def predict(self, x):\n"
    "        return '[DIAGNOSIS]' + self.known.get(x, 'none') + '[/DIAGNOSIS]'\n"
)


def folds(tmp_path: Path, counted: list[object] | None = None) -> TrainFolds:
    def evaluator_for(task: object, client: StandInClient) -> TaskEvaluator:
        if counted is not None:
            counted.append(task)
        return TaskEvaluator(task, client, workers=1)  # type: ignore[arg-type]

    return TrainFolds(ModelFreeCheck(RingTask(), evaluator_for, tmp_path / "checks"))


def test_every_training_example_is_scored_once_by_a_program_not_built_on_it(tmp_path: Path) -> None:
    counted: list[object] = []
    scorer = folds(tmp_path, counted)
    ids = sorted(i for fold in scorer.folds for i in fold)
    assert len(scorer.folds) == 3 and ids == [f"train-{k:04d}" for k in range(9)]
    nearest, copies, rule = scorer.scores([NEAREST, COPIES, IGNORES])
    assert nearest is not None and nearest.split == "folds" and nearest.model_free
    assert sorted(nearest.example_ids) == ids and nearest.examples == 9 and nearest.spend().tokens == 0
    assert nearest.primary > 0.6  # its neighbours share words with it
    assert copies is not None and copies.primary == 0.0  # never asked an example it was built on
    assert rule is not None and rule.primary == 5 / 9  # 'fever' -> dengue, else psoriasis ('Fever' is not 'fever')
    assert len(counted) == 9  # three programs, three folds each
    assert scorer(NEAREST) == nearest and len(counted) == 9  # asked again: the first score, no sandbox run


def test_a_program_that_reads_the_model_has_no_fold_score_and_a_tiny_training_split_no_folds(tmp_path: Path) -> None:
    assert folds(tmp_path)(harness(answer=TAGGED)) is None  # every output follows the stand-in's answer
    tiny = TrainFolds(ModelFreeCheck(ToyTask(), lambda task, client: TaskEvaluator(task, client), tmp_path / "t"))
    assert tiny.folds == [] and tiny(IGNORES) is None  # two training examples: nothing to fold


def test_contenders_that_tie_on_every_validation_score_are_ordered_by_their_training_folds(tmp_path: Path) -> None:
    """Two proposals are each wrong on one search example and right on every held-out one; only the training folds
    tell that one of them fails on an input it was not built on, which puts it behind the seed. Without them the
    earlier would be returned."""
    task = ParityTask()
    run = RunDirectory.open(tmp_path / "run", {"dataset": "parity", "task_model": "openai:toy-model"})
    search = SearchSettings(evaluation="planner", holdout=6, budget=SearchBudget(evals_per_iter=2), train_folds=True)
    proposer = ScriptedProposer(
        {1: [Proposal("c001", UNSEEN_WRONG, "right where it was trained"), Proposal("c001", PARITY, "parity")]}
    )
    free = ModelFreeCheck(task, lambda view, client: TaskEvaluator(view, client, workers=1), tmp_path / "free")
    outcome = Optimizer(
        run,
        LoopSettings("parity", search, iterations=1, test=False),
        proposer,
        TaskEvaluator(task, StandInClient(["even"], 0), workers=1),
        [Seed("even", EVEN)],
        model_free=free,
    ).run()
    run.close()
    by_summary = {c.summary: c for c in run.candidates()}
    trained, parity = by_summary["right where it was trained"], by_summary["parity"]
    assert trained.score == parity.score == 5 / 6  # wrong on one search example each
    assert parity.evaluation is not None and parity.evaluation.confirm is not None
    assert parity.evaluation.confirm.primary == 1.0
    assert parity.evaluation.folds is not None and parity.evaluation.folds.examples == 6
    assert parity.evaluation.folds.primary == 1.0
    assert trained.evaluation is not None and trained.evaluation.confirm is None  # 0.0 on its folds: not a contender
    assert outcome.best is not None and outcome.best.id == parity.id
    stored = run.store.best()
    assert stored is not None and stored.id == parity.id
    folded = {line["id"]: line["evaluation"]["scores"]["primary"] for line in run.log_records("folds")}
    seed = by_summary["seed: even"]
    assert folded == {seed.id: 0.5, trained.id: 0.0, parity.id: 1.0}  # the seed is model-free too
    text = write_summary_markdown(run).read_text(encoding="utf-8")
    assert "training folds 1.0000 on 6 training examples" in text
    assert "3 model-free contenders scored on training folds with no model call" in text


def test_a_kill_after_the_journal_keeps_the_fold_score_with_the_confirmation(tmp_path: Path) -> None:
    run = RunDirectory.open(tmp_path / "run", {"dataset": "parity", "task_model": "openai:toy-model"})
    scored = Evaluation("val", {"primary": 1.0}, examples=2, example_ids=["v1", "v2"], example_scores=[1.0, 1.0])
    run.commit(Candidate("c001", None, 0, PARITY, summary="parity", evaluation=scored))
    confirm = Evaluation("confirm", {"primary": 0.5}, examples=2, example_ids=["v3", "v4"], example_scores=[1.0, 0.0])
    folds = Evaluation("folds", {"primary": 1.0}, examples=1, example_ids=["t1"], example_scores=[1.0], model_free=True)
    both = replace(scored, confirm=confirm, folds=folds)  # journaled, then killed before the note was written
    run.journal.save_evidence(Candidate("c001", None, 0, PARITY, summary="parity", evaluation=both))
    run.close()
    reopened = RunDirectory.open(tmp_path / "run", {"dataset": "parity", "task_model": "openai:toy-model"})
    assert "recorded c001's held-out confirmation from the journal" in reopened.recover()
    [stored] = reopened.candidates()
    assert stored.evaluation is not None and stored.evaluation.confirm == confirm and stored.evaluation.folds == folds
    reopened.close()


def test_the_best_weighs_every_score_it_has_by_its_examples_so_the_folds_outweigh_a_few_search_examples() -> None:
    """Confirmed alike, the candidate ahead by one of ten search examples is behind by 30 of 200 training examples:
    the pooled evidence returns the other one."""

    def scored(cid: str, val: float, folds: float) -> Candidate:
        evaluation = Evaluation("val", {"primary": val}, examples=10)
        confirm = Evaluation("confirm", {"primary": 0.8}, examples=5)
        fold = Evaluation("folds", {"primary": folds}, examples=200, model_free=True)
        return Candidate(cid, None, 1, PARITY, evaluation=replace(evaluation, confirm=confirm, folds=fold))

    flattered, steady = scored("c002", 0.9, 0.60), scored("c003", 0.8, 0.75)
    assert frontier.evidence(flattered) == pytest.approx((9 + 4 + 120) / 215)
    best = frontier.best([flattered, steady])
    assert best is not None and best.id == "c003"
