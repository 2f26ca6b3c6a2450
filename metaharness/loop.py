"""The optimisation loop: seeds, then propose -> validate -> evaluate -> commit, iteration after iteration.

The loop owns the candidates; the proposer only reads a :class:`~metaharness.proposal.RunState` and returns
proposals (see :mod:`metaharness.proposal`), and the evaluator only measures programs. Everything durable goes
through the :class:`~metaharness.store.RunDirectory`, in an order that makes a kill at any moment harmless:

1. an iteration's proposals are journaled (with their ids) before any is evaluated;
2. a candidate is committed only after its evaluation is fully written (journal first, then one git transaction);
3. the iteration's line in ``summary.jsonl`` is written after all its candidates are committed.

A rerun finds the journal and continues: it commits journaled results, finishes an open iteration, then starts the
next one. A :class:`StopRequest` (Ctrl-C in the CLI) lets the step under way finish (an evaluation is completed and
committed), then stops; the rest of the iteration's plan stays in the journal for the next run.
:class:`~metaharness.errors.BudgetExceeded` from the model layer stops the run with a note in the summary.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from metaharness import frontier
from metaharness.errors import BudgetExceeded, MetaharnessError
from metaharness.proposal import Proposal, Proposer, RunState
from metaharness.report import write_summary_markdown
from metaharness.store import EVALUATED, FAILED, CandidateRecord, Evaluation, RunDirectory
from metaharness.store.crash import crash_point
from metaharness.store.record import candidate_id, id_number

Progress = Callable[[int, int], None]


class CandidateFailed(Exception):
    """Raised by an evaluator when the candidate itself is broken (not the evaluator or the model)."""


class CandidateEvaluator(Protocol):
    """How the loop measures candidates. The real one is :class:`TaskEvaluator`.

    - ``check(path)`` imports and instantiates the harness in isolation; returns the error text, or ``None``.
    - ``evaluate(path, split, trace_path=, progress=)`` runs it on a split, writes the per-example records to
      ``trace_path`` and returns the aggregates. One example's failure scores 0 inside; raise
      :class:`CandidateFailed` when the candidate as a whole cannot run, anything else for systemic failures.
    - ``split_unavailable(split)`` says why a split cannot be evaluated here (e.g. not available offline), or
      ``None`` when it can.
    """

    def check(self, harness: Path) -> str | None: ...

    def evaluate(self, harness: Path, split: str, *, trace_path: Path, progress: Progress | None = None) -> Evaluation: ...

    def split_unavailable(self, split: str) -> str | None: ...


class LoopEvents:
    """What the loop reports while it runs; the CLI draws it with rich. The defaults do nothing."""

    def note(self, text: str) -> None: ...

    def iteration_started(self, iteration: int, total: int) -> None: ...

    def proposing(self, proposer: str) -> None: ...

    def candidate_started(self, cid: str, split: str, summary: str) -> None: ...

    def examples_done(self, done: int, total: int) -> None: ...

    def candidate_finished(self, record: CandidateRecord) -> None: ...


@dataclass
class StopRequest:
    """Set ``requested`` (e.g. from a SIGINT handler) to stop the loop at its next safe point."""

    requested: bool = False


@dataclass
class Seed:
    """A starting program: a seed harness file of the task (``candidates/<task>/<name>.py``)."""

    name: str
    source: str


@dataclass
class LoopSettings:
    task: str
    iterations: int
    evals_per_iter: int = 3
    # Evaluate the best and the frontier on the test split at the end (when the split is available).
    test: bool = True


@dataclass
class Outcome:
    """How a call of :meth:`Optimizer.run` ended."""

    iterations_done: int
    stopped: str | None
    best: CandidateRecord | None
    frontier: list[CandidateRecord]
    test: dict[str, Evaluation] = field(default_factory=dict)


class _Stopped(Exception):
    """Internal: unwind to :meth:`Optimizer.run` at a safe point."""


class Optimizer:
    """Runs the loop in ``run`` (see the module docstring). ``budget`` gives the caps left, e.g. ``{"usd": 1.2}``;
    ``spent`` the cost so far (``{"usd": ..., "input_tokens": ..., "output_tokens": ...}``)."""

    def __init__(
        self,
        run: RunDirectory,
        settings: LoopSettings,
        proposer: Proposer,
        evaluator: CandidateEvaluator,
        seeds: list[Seed],
        *,
        events: LoopEvents | None = None,
        stop: StopRequest | None = None,
        budget: Callable[[], dict[str, float]] = dict,
        spent: Callable[[], dict[str, float]] = dict,
    ) -> None:
        self.run_dir = run
        self.settings = settings
        self.proposer = proposer
        self.evaluator = evaluator
        self.seeds = seeds
        self.events = events or LoopEvents()
        self.stop = stop or StopRequest()
        self.budget = budget
        self.spent = spent

    # -- the run ---------------------------------------------------------------------------------------------

    def run(self) -> Outcome:
        stopped = None
        test: dict[str, Evaluation] = {}
        for action in self.run_dir.recover():
            self.events.note(action)
        try:
            # Iteration 0 evaluates the seeds; a plan left open by an interrupted run is finished first.
            for iteration in range(0, self.settings.iterations + 1):
                if iteration not in self.run_dir.completed_iterations():
                    self._check_stop()
                    self._iteration(iteration)
            if self.settings.test:
                test = self._test_split()
        except BudgetExceeded as exc:
            stopped = f"cost cap reached: {exc}"
        except _Stopped:
            stopped = "interrupted by the user (Ctrl-C); rerun the same command to continue"
        if stopped:
            self.run_dir.log({"type": "stop", "reason": stopped, "spent": self.spent()})
            self.events.note(f"stopped: {stopped}")
        self._write_summary()
        records = [c.record for c in self.run_dir.store.candidates()]
        done = self.run_dir.completed_iterations()
        return Outcome(
            iterations_done=max((i for i in done if i > 0), default=0),
            stopped=stopped,
            best=frontier.best(records),
            frontier=frontier.pareto_front(records),
            test=test,
        )

    def _check_stop(self) -> None:
        if self.stop.requested:
            raise _Stopped

    def _iteration(self, iteration: int) -> None:
        started = time.monotonic()
        self.events.iteration_started(iteration, self.settings.iterations)
        plan = self.run_dir.journal.plan(iteration)
        if plan is None:
            plan = self._plan(iteration)
            self.run_dir.journal.save_plan(iteration, plan)
            crash_point("iteration:planned")
        for entry in plan:
            self._check_stop()
            if not self.run_dir.store.has(entry["id"]):
                self._realise(entry, iteration)
        records = [c.record for c in self.run_dir.store.candidates()]
        mine = [r for r in records if r.iteration == iteration]
        best = frontier.best(records)
        self.run_dir.log(
            {
                "type": "iteration",
                "iteration": iteration,
                "candidates": [r.id for r in mine],
                "evaluated": sum(not r.failed for r in mine),
                "failed": sum(r.failed for r in mine),
                "best": best.id if best else None,
                "best_score": best.score if best else None,
                "frontier": [r.id for r in frontier.pareto_front(records)],
                "spent": self.spent(),
                "seconds": round(time.monotonic() - started, 3),
            }
        )
        self.run_dir.journal.drop_plan(iteration)
        self._write_summary()

    def _plan(self, iteration: int) -> list[dict[str, Any]]:
        """The candidates of an iteration, with fresh ids: the seeds first, then what the proposer returns."""
        if iteration == 0:
            proposals = [Proposal(parent=None, source=s.source, summary=f"seed: {s.name}") for s in self.seeds]
        else:
            state = self.state(iteration)
            self.events.proposing(self.proposer.name)
            proposals = list(self.proposer.propose(state))
            if len(proposals) > state.evals_left:
                self.events.note(
                    f"proposer {self.proposer.name} returned {len(proposals)} proposals for {state.evals_left} "
                    f"evaluations; keeping the first {state.evals_left}"
                )
                proposals = proposals[: state.evals_left]
            if not proposals:
                self.events.note(f"iteration {iteration}: the proposer returned no candidates")
        first = id_number(self.run_dir.next_id())
        return [
            {
                "id": candidate_id(first + i),
                "parent": p.parent,
                "source": p.source,
                "summary": p.summary,
                "hypothesis": p.hypothesis,
                "prediction": p.prediction,
            }
            for i, p in enumerate(proposals)
        ]

    def state(self, iteration: int) -> RunState:
        """What the proposer sees: every committed candidate (failed ones with their errors)."""
        return RunState(
            task=self.settings.task,
            iteration=iteration,
            candidates=[c.record.info(self.run_dir.path) for c in self.run_dir.store.candidates()],
            evals_left=self.settings.evals_per_iter,
            budget=self.budget(),
            run_dir=self.run_dir.path,
        )

    def _realise(self, entry: dict[str, Any], iteration: int) -> None:
        """Check, evaluate and commit one planned candidate."""
        record = CandidateRecord(
            id=entry["id"],
            parent=entry["parent"],
            iteration=iteration,
            source=entry["source"],
            summary=entry.get("summary", ""),
            hypothesis=entry.get("hypothesis", ""),
            prediction=entry.get("prediction"),
        )
        self.events.candidate_started(record.id, "val", record.summary)
        if record.parent is not None and not self.run_dir.store.has(record.parent):
            unknown, record.parent = record.parent, None  # committed on the root so the proposer sees the mistake
            self._fail(record, f"parent '{unknown}' is not a candidate of this run (known: {self._known_ids()})")
            return
        harness = self.run_dir.work_file(record.id, record.source)
        error = self.evaluator.check(harness)
        if error:
            self._fail(record, error)
            return
        trace = self.run_dir.trace_path(record.id, "val")
        try:
            record.evaluation = self.evaluator.evaluate(harness, "val", trace_path=trace, progress=self._progress)
        except CandidateFailed as exc:
            self._fail(record, str(exc))
            return
        except (MetaharnessError, KeyboardInterrupt):
            raise
        except Exception as exc:  # an evaluator bug must not stop the search: record it with the candidate
            self._fail(record, "evaluation crashed: " + "".join(traceback.format_exception_only(exc)).strip())
            return
        crash_point("candidate:evaluated")
        record.status = EVALUATED
        record.trace = self.run_dir.relative(trace)
        self.run_dir.commit(record)
        self.events.candidate_finished(record)

    def _progress(self, done: int, total: int) -> None:
        crash_point("evaluation:example")
        self.events.examples_done(done, total)

    def _known_ids(self) -> str:
        return ", ".join(c.record.id for c in self.run_dir.store.candidates())

    def _fail(self, record: CandidateRecord, error: str) -> None:
        record.status = FAILED
        record.error = error
        self.run_dir.commit(record)
        self.events.candidate_finished(record)

    def _test_split(self) -> dict[str, Evaluation]:
        """Evaluate the best candidate and the Pareto front on the test split (once each)."""
        records = [c.record for c in self.run_dir.store.candidates()]
        targets = []
        for record in [frontier.best(records), *frontier.pareto_front(records)]:
            if record is not None and record not in targets:
                targets.append(record)
        results = {r.id: self.run_dir.test_result(r.id) for r in targets}
        todo = [r for r in targets if results[r.id] is None]
        if todo:
            reason = self.evaluator.split_unavailable("test")
            if reason:
                self.run_dir.log({"type": "test_skipped", "reason": reason})
                self.events.note(f"test split not evaluated: {reason}")
                return {cid: ev for cid, ev in results.items() if ev is not None}
        for record in todo:
            self._check_stop()
            self.events.candidate_started(record.id, "test", record.summary)
            harness = self.run_dir.work_file(record.id, record.source)
            trace = self.run_dir.trace_path(record.id, "test")
            evaluation = self.evaluator.evaluate(harness, "test", trace_path=trace, progress=self._progress)
            self.run_dir.save_test_result(record.id, evaluation)
            self.run_dir.log({"type": "test", "id": record.id, "evaluation": evaluation.to_dict()})
            results[record.id] = evaluation
        return {cid: ev for cid, ev in results.items() if ev is not None}

    def _write_summary(self) -> None:
        write_summary_markdown(self.run_dir)



class TaskEvaluator:
    """The real :class:`CandidateEvaluator`: :mod:`metaharness.evaluation` on one task with the fixed task model.

    ``val_limit`` caps the validation examples (the first N); test-split evaluations use the whole split.
    """

    def __init__(self, task: Any, model: Any, *, val_limit: int | None = None, workers: int | None = None) -> None:
        self.task = task
        self.model = model
        self.val_limit = val_limit
        self.workers = workers

    def check(self, harness: Path) -> str | None:
        from metaharness.evaluation import HarnessInvalid, check_harness

        try:
            check_harness(harness, self.task, model=self.model)
        except HarnessInvalid as exc:
            return str(exc)
        return None

    def evaluate(self, harness: Path, split: str, *, trace_path: Path, progress: Progress | None = None) -> Evaluation:
        from metaharness.evaluation import evaluate

        report = evaluate(
            harness,
            self.task,
            split,
            model=self.model,
            limit=self.val_limit if split == "val" else None,
            workers=self.workers,
            trace_path=trace_path,
            progress=(lambda _record, done, total: progress(done, total)) if progress else None,
        )
        return Evaluation(
            split=split,
            scores={k: float(v) for k, v in report.scores.items()},
            cost={k: float(v) for k, v in report.cost.items() if isinstance(v, (int, float))},
            examples=len(report.records),
            errors=report.errors,
            seconds=report.seconds,
        )

    def split_unavailable(self, split: str) -> str | None:
        try:
            self.task.load(split)
        except MetaharnessError as exc:
            return str(exc)
        return None
