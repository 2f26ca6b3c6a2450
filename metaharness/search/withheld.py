"""Training examples withheld from everything, to judge on: a larger judgement where the validation split is small.

A validation split of 50 leaves 20 examples to judge the returned candidate by default, and on 20 examples a real
gain often has a 95% interval that reaches below 0 (``benchmarks/judge_power.py``). ``--judge-train N`` takes ``N``
of the task's training examples out of every harness's ``train`` and out of what any proposer sees, and adds them to
the judge examples, which no proposer sees and nothing is chosen by: the judgement then has the held-out validation
examples' judge part plus ``N``. The cost: every harness, the no-model baseline and any classifier a harness trains
learn from ``N`` fewer training examples, and a returned candidate or best seed that calls the model pays for ``N``
more judge examples.

``WithheldTraining`` is the task as the run sees it: ``load("train")`` without the withheld examples, ``load("val")``
with them after the validation examples (their ids are the training ids, so they never collide with a validation
id), the metric and everything else the task's. The withheld examples are the first ``N`` training ids in the order
of their SHA-256, so a run and its resumption withhold the same ones, whatever the seed or ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import hashlib

from metaharness.errors import InputError
from metaharness.tasks.protocol import Example, Task

# Training examples a harness keeps at least: a classifier or a vote needs some.
MIN_TRAINING_LEFT = 10


class WithheldTraining:
    """``task`` with its first ``count`` training examples (by the SHA-256 of their ids) moved from ``train`` to the
    end of ``val`` (module docstring); ``withheld`` are their ids, in that order. InputError when fewer than
    ``MIN_TRAINING_LEFT`` training examples would be left."""

    def __init__(self, task: Task, count: int) -> None:
        self.task, self.name, self.description = task, task.name, task.description
        train = task.load("train")
        if count < 0 or len(train) - count < MIN_TRAINING_LEFT:
            raise InputError(
                f"--judge-train {count} leaves {len(train) - count} of the task's {len(train)} training examples to "
                f"the harnesses: withhold at most {max(len(train) - MIN_TRAINING_LEFT, 0)}."
            )
        order = sorted(train, key=lambda e: hashlib.sha256(e.id.encode("utf-8", "surrogatepass")).digest())
        self.withheld: tuple[str, ...] = tuple(e.id for e in order[:count])
        clash = set(self.withheld) & {e.id for e in task.load("val")}
        if clash:
            raise InputError(
                f"The task's training and validation examples share ids ({sorted(clash)[0]!r}, ...): --judge-train "
                "needs them distinct."
            )

    def load(self, split: str) -> list[Example]:
        withheld = set(self.withheld)
        if split == "train":
            return [e for e in self.task.load("train") if e.id not in withheld]
        if split == "val":
            moved = {e.id: e for e in self.task.load("train") if e.id in withheld}
            return [*self.task.load("val"), *(moved[i] for i in self.withheld)]
        return self.task.load(split)

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        return self.task.score(prediction, example)

    def metric_names(self) -> list[str]:
        return self.task.metric_names()


def withhold(task: Task, count: int) -> tuple[Task, tuple[str, ...]]:
    """The task a run searches and judges (``task`` itself when ``count`` is 0) and the ids it judges on only."""
    if count == 0:
        return task, ()
    view = WithheldTraining(task, count)
    return view, view.withheld
