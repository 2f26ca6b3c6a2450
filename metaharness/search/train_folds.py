"""Free evidence on the training examples: a model-free program's score by cross-validation on the training split.

The search's share of validation examples is small and has chosen among many programs, so its best programs often
tie there (in the main job a dozen score the same on its 10 examples), and which of them the held-out examples then
confirm is close to a coin toss. A program whose outputs do not depend on the model's answers
(``metaharness.search.model_free``) can also be scored on the training examples, at no model cost: each of
``FOLDS`` folds of the training split is predicted by the program built (``Harness(lm, train)``) on the other
folds, through the stand-in model, and every example is checked as the model-free check checks a validation
example (the same output under ``SALTS`` different answers; an example whose output changes is left out, so a
fold score never stands for what the real model would have said). No example of a fold is in the training
examples its program was built on, and no validation example is used.

``TrainFolds`` gives that score as an ``Evaluation`` of split ``"folds"`` (the free training examples' ids and
scores), memoised by program. With ``SearchSettings.train_folds`` (off by default: no gain on held-out examples
was shown, docs/free-evidence.md) the held-out judge (``metaharness.search.held_out``) asks it of the model-free
candidates in the running for what the run returns, orders them by it where their validation scores tie, and keeps
it on the candidate (``Evaluation.folds``): it breaks ties and never outweighs a validation or held-out score.
Cost: one sandbox evaluation per fold (one build, ``SALTS`` predictions per example), no token; the seconds are in
the evaluation's ``seconds``.

Folds are dealt round-robin in the order of the training ids' SHA-256, so they do not depend on the run, the seed
or ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from metaharness.candidate import Evaluation
from metaharness.search.model_free import ModelFree, ModelFreeCheck
from metaharness.tasks.protocol import Example, Task

FOLDS = 3
SPLIT = "folds"  # the split name of a fold score
FOLD = "val"  # the split a fold's view scores: the fold's training examples


class Folded:
    """``task`` as one fold sees it: its training split without the fold's examples, and the fold's examples as the
    split ``FOLD``; the metric is the task's."""

    def __init__(self, task: Task, fold: Sequence[str]) -> None:
        self.task, self.fold = task, frozenset(fold)
        self.name, self.description = task.name, task.description

    def load(self, split: str) -> list[Example]:
        if split not in ("train", FOLD):
            raise ValueError(f"a training fold has the splits 'train' and {FOLD!r}, not {split!r}")
        inside = split == FOLD
        return [e for e in self.task.load("train") if (e.id in self.fold) == inside]

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        return self.task.score(prediction, example)

    def metric_names(self) -> list[str]:
        return self.task.metric_names()


def folds_of(ids: Sequence[str], folds: int = FOLDS) -> list[list[str]]:
    """``ids`` dealt into ``folds`` folds in the order of their SHA-256 ([] when a fold would hold fewer than two).

    >>> folds_of([str(i) for i in range(7)], 3)
    [['4', '1', '5'], ['3', '2'], ['0', '6']]
    >>> folds_of(["a", "b", "c"], 3)
    []
    """
    ordered = sorted(dict.fromkeys(ids), key=lambda i: hashlib.sha256(i.encode("utf-8", "surrogatepass")).digest())
    if len(ordered) < 2 * folds:
        return []
    return [ordered[k::folds] for k in range(folds)]


class TrainFolds:
    """Scores programs by cross-validation on ``check``'s training split, through ``check``'s evaluators and
    stand-in answers (module docstring); records go under ``check``'s folder, in ``folds/<k>``."""

    def __init__(self, check: ModelFreeCheck, folds: int = FOLDS) -> None:
        task = check.plain_task
        self.folds = folds_of([e.id for e in task.load("train")], folds)
        folder = check.folder / "folds"
        self.checks = [check.on(Folded(task, fold), folder / str(k)) for k, fold in enumerate(self.folds)]
        self._memo: dict[str, Evaluation | None] = {}

    def __call__(self, source: str) -> Evaluation | None:
        """``source``'s score on the free training examples of every fold (split ``"folds"``, ``model_free`` when
        all were free), None when the training split is too small to fold or no example was free."""
        return self.scores([source])[0]

    def scores(self, sources: Sequence[str]) -> list[Evaluation | None]:
        """``__call__`` for several programs, their folds' checks run one per CPU at a time."""
        keys = [hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest() for s in sources]
        todo = {key: source for key, source in zip(keys, sources, strict=True) if key not in self._memo}
        if todo and self.checks:
            jobs = [(key, k, source) for key, source in todo.items() for k in range(len(self.checks))]
            with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1)) as pool:
                found = [pool.submit(self.checks[k], source, self.folds[k], FOLD) for _, k, source in jobs]
            by_key: dict[str, list[ModelFree]] = {}
            for (key, _, _), future in zip(jobs, found, strict=True):
                by_key.setdefault(key, []).append(future.result())
            for key, parts in by_key.items():
                self._memo[key] = _joined(parts)
        for key in todo:
            self._memo.setdefault(key, None)
        return [self._memo[key] for key in keys]


def _joined(parts: Sequence[ModelFree]) -> Evaluation | None:
    """The folds' free examples as one evaluation of split ``SPLIT`` (None when none was free)."""
    found = [part.evaluation for part in parts if part.evaluation is not None]
    if not found:
        return None
    joined = found[0]
    for more in found[1:]:
        joined = joined.merge(more)
    whole = all(part.model_free for part in parts)
    return Evaluation(
        split=SPLIT,
        scores=joined.scores,
        examples=joined.examples,
        errors=joined.errors,
        seconds=round(sum(part.seconds for part in parts), 3),
        example_ids=joined.example_ids,
        example_scores=joined.example_scores,
        model_free=whole,
    )
