"""The real ``CandidateEvaluator``: the sandboxed parallel evaluator, one task."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from metaharness.candidate import Evaluation
from metaharness.errors import MetaharnessError
from metaharness.evaluation.evaluator import HarnessInvalid, check_harness, evaluate
from metaharness.evaluation.protocol import CandidateFailed, Progress
from metaharness.evaluation.sandbox import SandboxLimits
from metaharness.models.protocol import ModelClient
from metaharness.tasks.protocol import Task

# The trace of the model calls a harness made while ``check`` loaded it (written only when it made some).
CHECK_TRACE = "check.jsonl"


class TaskEvaluator:
    """The real ``CandidateEvaluator``: sandboxed evaluation on ``task`` with the task model ``model``.

    ``val_limit`` caps the validation examples (the first N); test-split evaluations use the whole split.
    ``workers``: examples in flight. ``limits``: the sandbox's (default ``SandboxLimits()``), the time bound of each
    evaluation among them (``SandboxLimits.average_seconds``, the run's ``--harness-seconds``).
    """

    def __init__(
        self,
        task: Task,
        model: ModelClient,
        *,
        val_limit: int | None = None,
        workers: int | None = None,
        limits: SandboxLimits | None = None,
    ) -> None:
        self.task = task
        self.model = model
        self.val_limit = val_limit
        self.workers = workers
        self.limits = limits or SandboxLimits()

    def check(self, harness: Path) -> str | None:
        """The harness's load error, or None; the model calls its ``__init__`` made are traced in
        ``CHECK_TRACE`` beside the harness file."""
        try:
            check_harness(
                harness, self.task, model=self.model, limits=self.limits, trace_path=harness.with_name(CHECK_TRACE)
            )
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
        report = evaluate(
            harness,
            self.task,
            split,
            model=self.model,
            limit=self.val_limit if split == "val" and examples is None else None,
            ids=examples,
            workers=self.workers,
            limits=self.limits,
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
