"""The evaluator seam: how the optimisation loop measures a candidate, and the real evaluator behind it.

The loop never runs harness code itself; it asks a :class:`CandidateEvaluator`. The whole contract:

- ``check(harness) -> str | None``: import and instantiate the harness file in isolation (with the task's training
  examples); return the error text a proposer can act on, or ``None`` when it loads.
- ``examples(split) -> list[str]``: the ids of the examples ``evaluate`` would run on ``split``, in split order
  (for ``"val"``, after any limit the evaluator applies). The loop orders and shares them (:mod:`metaharness.staging`).
- ``evaluate(harness, split, *, trace_path, progress=None, examples=None) -> Evaluation``: run it on every example
  of ``split`` (``"val"``, or ``"test"`` at the end of a run), or only on the ids in ``examples`` (in that order),
  write one JSON line per example to ``trace_path`` (input, prediction, target, scores, every model call, error;
  the file is replaced) and return the aggregates: mean ``scores`` with ``"primary"`` (higher is better), ``cost``
  (``input_tokens``, ``output_tokens``, ``usd``, ``context_tokens`` per example, and what the run was charged:
  ``charged_examples``, ``charged_tokens``), the number of ``examples`` and of ``errors``, ``example_ids`` (the
  ids run, in order) and ``example_scores`` (each one's primary score). ``progress(done, total)`` is called as
  examples finish.
- Error rule (as in GEPA's adapter): one example's failure never raises; it scores 0 and its error goes into the
  trace. Raise :class:`CandidateFailed` when the candidate as a whole cannot run (its harness does not load), so
  the loop records it as failed with that error. Raise a :class:`~metaharness.errors.MetaharnessError` for
  systemic failures (a reached cost cap, an unreachable model, a missing split), which stop the run.
- ``split_unavailable(split) -> str | None``: why ``split`` cannot be evaluated here (for example the test split is
  not in the local data folder), or ``None`` when it can.

:class:`TaskEvaluator` is the real one: the sandboxed parallel evaluator of :mod:`metaharness.evaluation` on one
task with the fixed task model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from metaharness.candidate import Evaluation
from metaharness.errors import MetaharnessError
from metaharness.models.types import ModelClient
from metaharness.tasks.task import Task

Progress = Callable[[int, int], None]


class CandidateFailed(Exception):
    """The candidate itself cannot run (not the evaluator, not the model); the message is its error."""


class CandidateEvaluator(Protocol):
    """How the loop measures candidates (the module docstring is the contract)."""

    def check(self, harness: Path) -> str | None: ...

    def examples(self, split: str) -> list[str]: ...

    def evaluate(
        self,
        harness: Path,
        split: str,
        *,
        trace_path: Path,
        progress: Progress | None = None,
        examples: Sequence[str] | None = None,
    ) -> Evaluation: ...

    def split_unavailable(self, split: str) -> str | None: ...


class TaskEvaluator:
    """The real :class:`CandidateEvaluator`: sandboxed evaluation on ``task`` with the task model ``model``.

    ``val_limit`` caps the validation examples (the first N); test-split evaluations use the whole split.
    ``workers``: examples in flight.
    """

    def __init__(
        self, task: Task, model: ModelClient, *, val_limit: int | None = None, workers: int | None = None
    ) -> None:
        self.task = task
        self.model = model
        self.val_limit = val_limit
        self.workers = workers

    def check(self, harness: Path) -> str | None:
        from metaharness.evaluation.evaluator import HarnessInvalid, check_harness

        try:
            check_harness(harness, self.task, model=self.model)
        except HarnessInvalid as exc:
            return str(exc)
        return None

    def examples(self, split: str) -> list[str]:
        examples = self.task.load(split)
        if split == "val" and self.val_limit is not None:
            examples = examples[: self.val_limit]
        return [example.id for example in examples]

    def evaluate(
        self,
        harness: Path,
        split: str,
        *,
        trace_path: Path,
        progress: Progress | None = None,
        examples: Sequence[str] | None = None,
    ) -> Evaluation:
        from metaharness.evaluation.evaluator import evaluate

        report = evaluate(
            harness,
            self.task,
            split,
            model=self.model,
            limit=self.val_limit if split == "val" and examples is None else None,
            ids=examples,
            workers=self.workers,
            trace_path=trace_path,
            progress=(lambda _record, done, total: progress(done, total)) if progress else None,
        )
        if report.load_error is not None and report.errors == len(report.records):
            raise CandidateFailed(report.load_error)
        return Evaluation(
            split=split,
            scores={k: float(v) for k, v in report.scores.items()},
            cost={k: float(v) for k, v in report.cost.items()},
            examples=len(report.records),
            errors=report.errors,
            seconds=report.seconds,
            example_ids=[record.id for record in report.records],
            example_scores=[float(record.scores.get("primary", 0.0)) for record in report.records],
        )

    def split_unavailable(self, split: str) -> str | None:
        try:
            self.task.load(split)
        except MetaharnessError as exc:
            return str(exc)
        return None
