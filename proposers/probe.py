"""The cheap probe: run a candidate harness on a few held-out *training* examples with the task model.

This is how the offline proposer simulates a revision (TPS's state-simulation stage, done by execution instead of
by a model's guess). The probe examples are a fixed random sample of the train split, and the harness under probe
receives the rest of the train split as its ``train``, so a retrieval or voting harness cannot look its own answer
up. Nothing here touches the validation split.

A :class:`ProbeResult` keeps each example's prediction and score, so two candidates whose predictions are identical
on every probe example can be merged (TPS's merging stage) and a revision's *flips* (examples it newly gets right
or wrong) can be read off against its parent.
"""

from __future__ import annotations

import hashlib
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from metaharness.evaluation.records import ExampleRecord
from metaharness.harness import HARNESS_FILE
from metaharness.models.types import ModelClient
from metaharness.tasks.task import Example, Task


class HeldOutTask:
    """A task whose ``"probe"`` split is a sample of the train split and whose ``"train"`` split is the rest.

    A :class:`~metaharness.tasks.Task` in its own right (``"probe"`` is an extra split), delegating scoring to the
    real task.
    """

    def __init__(self, task: Task, size: int, *, seed: int = 0) -> None:
        self.task = task
        self.name = task.name
        self.description = getattr(task, "description", "")
        train = task.load("train")
        rng = random.Random(seed)
        chosen = set(rng.sample(range(len(train)), min(size, max(0, len(train) - 1))))
        self.probe = [ex for i, ex in enumerate(train) if i in chosen]
        self.rest = [ex for i, ex in enumerate(train) if i not in chosen]

    def load(self, split: str) -> list[Example]:
        if split == "probe":
            return list(self.probe)
        if split == "train":
            return list(self.rest)
        return self.task.load(split)

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        return self.task.score(prediction, example)

    def metric_names(self) -> list[str]:
        return self.task.metric_names()


@dataclass
class ProbeResult:
    """A candidate on the probe examples: per-example predictions and primary scores, errors, token cost."""

    predictions: dict[str, str | None]
    correct: dict[str, float]
    errors: dict[str, str] = field(default_factory=dict)
    tokens: float = 0.0  # input + output tokens over the probe
    context_tokens: float = 0.0  # mean prompt tokens per example
    # The per-example records (every model call's prompt and answer), for the subagents that read behaviour.
    records: list[ExampleRecord] = field(default_factory=list, compare=False, repr=False)

    @property
    def score(self) -> float:
        return sum(self.correct.values()) / len(self.correct) if self.correct else 0.0

    @property
    def error_rate(self) -> float:
        return len(self.errors) / len(self.correct) if self.correct else 1.0

    def signature(self) -> str:
        """Equal signatures = the same behaviour on every probe example (the merge key)."""
        text = "\x1f".join(f"{k}={self.predictions[k]!r}" for k in sorted(self.predictions))
        return hashlib.sha256(text.encode()).hexdigest()

    def flips(self, parent: ProbeResult) -> dict[str, list[str]]:
        """Probe examples this candidate gets right and its parent did not (``gained``), and the reverse."""
        gained = [k for k in self.correct if self.correct[k] > parent.correct.get(k, 0.0)]
        lost = [k for k in self.correct if self.correct[k] < parent.correct.get(k, 0.0)]
        return {"gained": sorted(gained), "lost": sorted(lost)}


class Prober:
    """Runs harness sources on the probe split; results are memoised by source (the model's cache does the rest)."""

    def __init__(
        self,
        task: Task,
        model: ModelClient | str,
        *,
        size: int = 12,
        seed: int = 0,
        workers: int | None = None,
        folder: str | Path | None = None,
    ) -> None:
        self.held_out = HeldOutTask(task, size, seed=seed)
        self.model = model
        self.workers = workers
        # Without a folder the probe files live in a temporary one, removed with this object.
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if folder is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="metaharness-probe-")
            folder = self._tmp.name
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._memo: dict[str, ProbeResult] = {}
        self.runs = 0  # sources actually evaluated (not memoised)

    @property
    def size(self) -> int:
        return len(self.held_out.probe)

    def known(self, source: str) -> bool:
        """Whether ``source`` was probed already (a further :meth:`run` is free)."""
        return hashlib.sha256(source.encode()).hexdigest() in self._memo

    def run(self, source: str) -> ProbeResult:
        from metaharness.evaluation import evaluate

        key = hashlib.sha256(source.encode()).hexdigest()
        if key not in self._memo:
            path = self.folder / key[:16] / HARNESS_FILE
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source, encoding="utf-8")
            report = evaluate(path, self.held_out, "probe", model=self.model, workers=self.workers)
            self.runs += 1
            self._memo[key] = ProbeResult(
                predictions={r.id: r.prediction for r in report.records},
                correct={r.id: float(r.scores.get("primary", 0.0)) for r in report.records},
                errors={r.id: r.error for r in report.records if r.error},
                tokens=float(report.cost.get("input_tokens", 0)) + float(report.cost.get("output_tokens", 0)),
                context_tokens=float(report.cost.get("context_tokens", 0)),
                records=list(report.records),
            )
        return self._memo[key]
