"""The optimisation loop: seeds, then propose -> check -> evaluate -> commit, iteration after iteration.

The loop owns the candidates; the proposer only reads a :class:`~metaharness.proposal.RunState` and returns
proposals (:mod:`metaharness.proposal`), the evaluator only measures programs
(:mod:`metaharness.evaluation.candidate_evaluator`), and everything durable goes through a
:class:`~metaharness.store.RunStore`, in an order that makes a kill at any moment harmless:

1. an iteration's proposals are journaled (with their ids) before any is evaluated;
2. a candidate is committed only after its evaluation is fully written (journal first, then one git transaction);
3. the iteration's line in ``summary.jsonl`` is written after all its candidates are committed.

A rerun finds the journal and continues: it commits journaled results, finishes an open iteration, then starts the
next one. A :class:`StopRequest` (Ctrl-C in the CLI) lets the step under way finish (an evaluation is completed and
committed), then stops; the rest of the iteration's plan stays in the journal for the next run.
:class:`~metaharness.errors.BudgetExceeded` from the model layer stops the run with a note in the summary;
:class:`~metaharness.errors.ModelUnavailable` from the evaluator (the task model stayed unreachable through its
retries) logs a stop, records nothing for the candidate under way and is raised again (exit code 5; rerunning the
same command continues).

A proposer that raises (a context overflow, a model unreachable after retries, a malformed tool call: any exception
but :class:`~metaharness.errors.BudgetExceeded`) fails its iteration only: the iteration's line records the error
(``proposer_error``) and the next iteration asks again. After ``max_proposer_failures`` failed iterations in a row
the run logs a stop and raises :class:`ProposerFailed`.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaharness import frontier
from metaharness.candidate import EVALUATED, FAILED, IMPLEMENTED, Candidate, Evaluation, candidate_id, id_number
from metaharness.errors import BudgetExceeded, MetaharnessError, ModelUnavailable
from metaharness.evaluation.candidate_evaluator import CandidateEvaluator, CandidateFailed
from metaharness.proposal import Proposal, Proposer, RunState
from metaharness.store.crash import crash_point
from metaharness.store.protocol import RunStore


class LoopEvents:
    """What the loop reports while it runs; the CLI draws it with rich. The defaults do nothing."""

    def run_started(self, path: Path, spent: Callable[[], dict[str, float]]) -> None:
        """The run in ``path`` begins; ``spent()`` reads what it has cost so far, at any time."""

    def note(self, text: str) -> None: ...

    def iteration_started(self, iteration: int, total: int) -> None: ...

    def proposing(self, proposer: str) -> None: ...

    def candidate_started(self, cid: str, split: str, summary: str) -> None: ...

    def examples_done(self, done: int, total: int) -> None: ...

    def candidate_finished(self, candidate: Candidate) -> None: ...


@dataclass
class StopRequest:
    """Set ``requested`` (e.g. from a SIGINT handler) to stop the loop at its next safe point."""

    requested: bool = False


@dataclass
class Seed:
    """A starting program: a seed harness file of the task (``candidates/<task>/<name>.py``)."""

    name: str
    source: str


DEFAULT_MAX_PROPOSER_FAILURES = 3


@dataclass
class LoopSettings:
    """What the loop does: ``iterations`` after the seeds, ``evals_per_iter`` candidate evaluations each."""

    task: str
    iterations: int
    evals_per_iter: int = 3
    # Evaluate the best and the frontier on the test split at the end (when the split is available).
    test: bool = True
    # Stop the run (ProposerFailed) once this many iterations in a row failed because the proposer raised.
    max_proposer_failures: int = DEFAULT_MAX_PROPOSER_FAILURES
    # What one iteration's candidates may cost beyond the evaluation count: ``tokens`` (task-model tokens of
    # their evaluations) and ``usd`` (dollars); the proposer's selection keeps every entry, and so do the caps
    # left for the whole run (the smaller of the two wins).
    iteration_budget: dict[str, float] = field(default_factory=dict)


def iteration_budget(run_left: dict[str, float], per_iteration: dict[str, float]) -> dict[str, float]:
    """The budget an iteration's selection must keep: per entry, the smaller of what the run has left and what one
    iteration may spend."""
    budget = dict(run_left)
    for key, value in per_iteration.items():
        budget[key] = min(float(value), budget.get(key, float(value)))
    return budget


def predicted_cost(candidates: list[Candidate]) -> dict[str, float]:
    """What the proposer predicted ``candidates`` cost: ``prediction["cost"]`` (tokens, dollars of the evaluation)
    of every candidate planned for evaluation, plus ``prediction["edit_cost"]`` (of writing the revision) of every
    candidate, intermediates included."""
    total: dict[str, float] = {}
    for candidate in candidates:
        prediction = candidate.prediction or {}
        parts = [prediction.get("edit_cost")] + ([] if candidate.implemented else [prediction.get("cost")])
        for part in parts:
            for key, value in (part if isinstance(part, dict) else {}).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    total[key] = round(total.get(key, 0.0) + float(value), 6)
    return total


def plan_entries(proposals: list[Proposal], first: int, realised: dict[str, str]) -> list[dict[str, Any]]:
    """An iteration's plan: one entry per candidate to commit, ids from ``c{first}`` on, every parent before its
    children.

    A proposal's ``intermediates`` become entries of their own (``"evaluate": false``) chained from the proposal's
    ``parent``, the proposal's entry revising the last of them. An intermediate whose ``node`` is already realised
    (``realised``: node -> committed candidate id; a candidate id names itself) or already planned is not
    planned again: the chain goes through that candidate. One whose node another proposal evaluates is that
    proposal (planned first, with its own chain). A proposal whose node is already committed evaluates that
    candidate's program again as its child (the node stays with the first candidate).
    """
    entries: list[dict[str, Any]] = []
    by_node = dict(realised)
    finals = {p.node: p for p in proposals if p.node is not None}
    planned: dict[int, str] = {}  # id(proposal) -> its entry's candidate id
    under_way: set[int] = set()

    def add(p: Proposal, parent: str | None, evaluate: bool) -> str:
        cid = candidate_id(first + len(entries))
        node = p.node if p.node is not None and p.node not in by_node else None
        if p.node is not None and node is None:
            parent = by_node[p.node]
        prediction = dict(p.prediction or {})
        if node is not None:
            prediction["node"] = node
            by_node[node] = cid
        entries.append(
            {
                "id": cid,
                "parent": parent,
                "source": p.source,
                "summary": p.summary,
                "hypothesis": p.hypothesis,
                "prediction": prediction or None,
                "node": node,
                "evaluate": evaluate,
            }
        )
        return cid

    def plan(p: Proposal) -> str:
        if id(p) not in planned:
            under_way.add(id(p))
            parent = p.parent
            for step in p.intermediates:
                final = finals.get(step.node) if step.node is not None else None
                if step.node is not None and step.node in by_node:
                    parent = by_node[step.node]
                elif final is not None and final is not p and id(final) not in under_way:
                    parent = plan(final)
                else:
                    parent = add(step, parent, evaluate=False)
            planned[id(p)] = add(p, parent, evaluate=True)
        return planned[id(p)]

    for proposal in proposals:
        plan(proposal)
    return entries


class ProposerFailed(MetaharnessError):
    """The proposer failed in ``max_proposer_failures`` consecutive iterations; the run stopped (exit code 4)."""

    exit_code = 4


@dataclass
class Outcome:
    """How a call of :meth:`Optimizer.run` ended."""

    iterations_done: int
    stopped: str | None
    best: Candidate | None
    frontier: list[Candidate]
    test: dict[str, Evaluation] = field(default_factory=dict)
    # Stopped by a reached cost or token cap (``stopped`` says which); a larger cap continues the run.
    capped: bool = False


class _Stopped(Exception):
    """Internal: unwind to :meth:`Optimizer.run` at a safe point."""


class _ProposerError(Exception):
    """Internal: the proposer raised ``error`` while planning an iteration."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class Optimizer:
    """Runs the loop over ``store`` (see the module docstring).

    ``budget()`` gives the caps left for the proposer, e.g. ``{"usd": 1.2}``; ``spent()`` the cost so far
    (``{"usd": ..., "tokens": ...}``), written into the candidate; ``write_summary()``, when given, refreshes the run's
    human-readable summary after every iteration and when the run stops.
    """

    def __init__(
        self,
        store: RunStore,
        settings: LoopSettings,
        proposer: Proposer,
        evaluator: CandidateEvaluator,
        seeds: list[Seed],
        *,
        events: LoopEvents | None = None,
        stop: StopRequest | None = None,
        budget: Callable[[], dict[str, float]] = dict,
        spent: Callable[[], dict[str, float]] = dict,
        write_summary: Callable[[], object] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.proposer = proposer
        self.evaluator = evaluator
        self.seeds = seeds
        self.events = events or LoopEvents()
        self.stop = stop or StopRequest()
        self.budget = budget
        self.spent = spent
        self.write_summary = write_summary

    # -- the run ---------------------------------------------------------------------------------------------

    def run(self) -> Outcome:
        """Run to the last iteration (and the test split); raises :class:`ProposerFailed` or
        :class:`~metaharness.errors.ModelUnavailable` after logging a stop."""
        stopped, capped = None, False
        failure: MetaharnessError | None = None
        test: dict[str, Evaluation] = {}
        self.events.run_started(self.store.path, self.spent)
        for action in self.store.recover():
            self.events.note(action)
        try:
            # Iteration 0 evaluates the seeds; a plan left open by an interrupted run is finished first.
            for iteration in range(0, self.settings.iterations + 1):
                if iteration not in self.store.completed_iterations():
                    self._check_stop()
                    self._iteration(iteration)
            if self.settings.test:
                test = self._test_split()
        except BudgetExceeded as exc:
            stopped, capped = f"cost cap reached: {exc}", True
        except ModelUnavailable as exc:
            stopped, failure = str(exc), exc
        except _Stopped:
            stopped = "interrupted by the user (Ctrl-C); rerun the same command to continue"
        except ProposerFailed as exc:
            stopped, failure = str(exc), exc
        if stopped:
            self.store.log({"type": "stop", "reason": stopped, "spent": self.spent()})
            self.events.note(f"stopped: {stopped}")
        self._write_summary()
        if failure is not None:
            raise failure
        candidates = self.store.candidates()
        done = self.store.completed_iterations()
        return Outcome(
            iterations_done=max((i for i in done if i > 0), default=0),
            stopped=stopped,
            best=frontier.best(candidates),
            frontier=frontier.pareto_front(candidates),
            test=test,
            capped=capped,
        )

    def _check_stop(self) -> None:
        if self.stop.requested:
            raise _Stopped

    def _iteration(self, iteration: int) -> None:
        started = time.monotonic()
        self.events.iteration_started(iteration, self.settings.iterations)
        plan = self.store.plan(iteration)
        if plan is None:
            try:
                plan = self._plan(iteration)
            except _ProposerError as failed:
                self._proposer_failed(iteration, failed.error, started)
                return
            crash_point("iteration:proposed")
            self.store.save_plan(iteration, plan)
            crash_point("iteration:planned")
        for entry in plan:
            self._check_stop()
            if not self.store.has(entry["id"]):
                self._realise(entry, iteration)
        candidates = self.store.candidates()
        mine = [r for r in candidates if r.iteration == iteration]
        best = frontier.best(candidates)
        spent = self.spent()
        self.store.log(
            {
                "type": "iteration",
                "iteration": iteration,
                "candidates": [r.id for r in mine],
                "evaluated": sum(r.evaluated for r in mine),
                "implemented": sum(r.implemented for r in mine),
                "failed": sum(r.failed for r in mine),
                "best": best.id if best else None,
                "best_score": best.score if best else None,
                "frontier": [r.id for r in frontier.pareto_front(candidates)],
                "spent": spent,
                "cost": {"predicted": predicted_cost(mine), "realised": self._realised(spent)},
                "seconds": round(time.monotonic() - started, 3),
            }
        )
        crash_point("iteration:logged")
        self.store.drop_plan(iteration)
        self._write_summary()

    def _realised(self, spent: dict[str, float]) -> dict[str, float]:
        """What this iteration cost: the run's spend now minus the spend the previous iteration line recorded."""
        lines = self.store.log_records("iteration")
        before: dict[str, Any] = lines[-1].get("spent", {}) if lines else {}
        return {k: round(float(v) - float(before.get(k, 0.0)), 6) for k, v in spent.items()}

    def _proposer_failed(self, iteration: int, error: BaseException, started: float) -> None:
        """Log the iteration as failed by the proposer; raise :class:`ProposerFailed` after too many in a row."""
        message = f"{type(error).__name__}: {error}".strip()
        details = "".join(traceback.format_exception(error))
        candidates = self.store.candidates()
        best = frontier.best(candidates)
        self.store.log(
            {
                "type": "iteration",
                "iteration": iteration,
                "candidates": [],
                "evaluated": 0,
                "failed": 0,
                "best": best.id if best else None,
                "best_score": best.score if best else None,
                "frontier": [r.id for r in frontier.pareto_front(candidates)],
                "proposer_error": message[:2000],
                "proposer_traceback": details[-8000:],
                "spent": self.spent(),
                "seconds": round(time.monotonic() - started, 3),
            }
        )
        self.events.note(f"iteration {iteration}: the proposer {self.proposer.name} failed: {message[:300]}")
        self._write_summary()
        failed = self._failed_in_a_row(iteration)
        limit = max(1, self.settings.max_proposer_failures)
        if len(failed) >= limit:
            raise ProposerFailed(
                f"the proposer {self.proposer.name} failed in {len(failed)} iterations in a row "
                f"({', '.join(map(str, failed))}); last error: {message[:500]}. Fix the cause (the errors are in "
                "summary.jsonl and SUMMARY.md), then rerun the same command to continue"
            )

    def _failed_in_a_row(self, iteration: int) -> list[int]:
        """The iterations up to ``iteration`` whose proposer failed, counting back to the last one that did not."""
        lines = {int(r["iteration"]): r for r in self.store.log_records("iteration")}
        failed: list[int] = []
        for it in range(iteration, 0, -1):
            if it not in lines or not lines[it].get("proposer_error"):
                break
            failed.insert(0, it)
        return failed

    def _plan(self, iteration: int) -> list[dict[str, Any]]:
        """The candidates of an iteration, with fresh ids: the seeds first, then what the proposer returns."""
        if iteration == 0:
            proposals = [Proposal(parent=None, source=s.source, summary=f"seed: {s.name}") for s in self.seeds]
        else:
            state = self.state(iteration)
            self.events.proposing(self.proposer.name)
            try:
                proposals = [_checked(p) for p in self.proposer.propose(state)]
            except BudgetExceeded:
                raise
            except Exception as exc:  # a proposer failure fails its iteration, not the run
                raise _ProposerError(exc) from exc
            if len(proposals) > state.proposals:
                self.events.note(
                    f"proposer {self.proposer.name} returned {len(proposals)} proposals for {state.proposals} "
                    f"slots; keeping the first {state.proposals}"
                )
                proposals = proposals[: state.proposals]
            if not proposals:
                self.events.note(f"iteration {iteration}: the proposer returned no candidates")
            if state.graph is not None:  # always set by state(); a proposer may not replace it by None
                self.store.save_program_graph(state.graph)
        return plan_entries(proposals, id_number(self.store.next_id()), self._realised_nodes())

    def _realised_nodes(self) -> dict[str, str]:
        """Program-graph node -> the committed candidate that realised it (``prediction["node"]``; a candidate's id
        names itself, as in the synced graph)."""
        realised = {}
        for c in self.store.candidates():
            realised[c.id] = c.id
            if c.prediction and c.prediction.get("node") is not None:
                realised[str(c.prediction["node"])] = c.id
        return realised

    def state(self, iteration: int) -> RunState:
        """What the proposer sees: every committed candidate (failed ones with their errors) and the program graph."""
        return RunState(
            task=self.settings.task,
            iteration=iteration,
            candidates=self.store.candidates(),
            proposals=self.settings.evals_per_iter,
            budget=iteration_budget(self.budget(), self.settings.iteration_budget),
            run_dir=self.store.path,
            graph=self.store.program_graph(),
        )

    def _realise(self, entry: dict[str, Any], iteration: int) -> None:
        """Check, evaluate and commit one planned candidate (an intermediate of a chain: check and commit)."""
        candidate = Candidate(
            id=entry["id"],
            parent=entry["parent"],
            iteration=iteration,
            source=entry["source"],
            summary=entry.get("summary", ""),
            hypothesis=entry.get("hypothesis", ""),
            prediction=entry.get("prediction"),
        )
        self.events.candidate_started(
            candidate.id, "val" if entry.get("evaluate", True) else "check", candidate.summary
        )
        if candidate.parent is not None and not self.store.has(candidate.parent):
            unknown, candidate.parent = candidate.parent, None  # committed on the root so the proposer sees the mistake
            self._fail(candidate, f"parent '{unknown}' is not a candidate of this run (known: {self._known_ids()})")
            return
        harness = self.store.work_file(candidate.id, candidate.source)
        error = self.evaluator.check(harness)
        if error:
            self._fail(candidate, error)
            return
        if not entry.get("evaluate", True):
            candidate.status = IMPLEMENTED
            self._commit(candidate)
            return
        trace = self.store.trace_path(candidate.id, "val")
        try:
            candidate.evaluation = self.evaluator.evaluate(harness, "val", trace_path=trace, progress=self._progress)
        except CandidateFailed as exc:
            self._fail(candidate, str(exc))
            return
        except (MetaharnessError, KeyboardInterrupt):
            raise
        except Exception as exc:  # an evaluator bug must not stop the search: candidate it with the candidate
            self._fail(candidate, "evaluation crashed: " + "".join(traceback.format_exception_only(exc)).strip())
            return
        crash_point("candidate:evaluated")
        candidate.status = EVALUATED
        candidate.trace = self.store.relative(trace)
        self._commit(candidate)

    def _commit(self, candidate: Candidate) -> None:
        self.store.commit(candidate)
        self.events.candidate_finished(candidate)

    def _progress(self, done: int, total: int) -> None:
        crash_point("evaluation:example")
        self.events.examples_done(done, total)

    def _known_ids(self) -> str:
        return ", ".join(c.id for c in self.store.candidates())

    def _fail(self, candidate: Candidate, error: str) -> None:
        candidate.status = FAILED
        candidate.error = error
        self._commit(candidate)

    def _test_split(self) -> dict[str, Evaluation]:
        """Evaluate the best candidate and the Pareto front on the test split (once each)."""
        candidates = self.store.candidates()
        targets = []
        for candidate in [frontier.best(candidates), *frontier.pareto_front(candidates)]:
            if candidate is not None and candidate not in targets:
                targets.append(candidate)
        results = {r.id: self.store.test_result(r.id) for r in targets}
        todo = [r for r in targets if results[r.id] is None]
        if todo:
            reason = self.evaluator.split_unavailable("test")
            if reason:
                self.store.log({"type": "test_skipped", "reason": reason})
                self.events.note(f"test split not evaluated: {reason}")
                return {cid: ev for cid, ev in results.items() if ev is not None}
        for candidate in todo:
            self._check_stop()
            self.events.candidate_started(candidate.id, "test", candidate.summary)
            harness = self.store.work_file(candidate.id, candidate.source)
            trace = self.store.trace_path(candidate.id, "test")
            evaluation = self.evaluator.evaluate(harness, "test", trace_path=trace, progress=self._progress)
            crash_point("test:evaluated")
            self.store.save_test_result(candidate.id, evaluation)
            results[candidate.id] = evaluation
        return {cid: ev for cid, ev in results.items() if ev is not None}

    def _write_summary(self) -> None:
        if self.write_summary is not None:
            self.write_summary()


def _checked(proposal: object) -> Proposal:
    """``proposal`` if it is a :class:`Proposal` with a source text; a proposer bug raises here, in its iteration."""
    if not isinstance(proposal, Proposal):
        raise TypeError(f"the proposer returned {type(proposal).__name__}, not a Proposal: {str(proposal)[:200]!r}")
    if not isinstance(proposal.source, str) or not isinstance(proposal.parent, (str, type(None))):
        raise TypeError(
            f"the proposer returned a Proposal with parent {proposal.parent!r} and a {type(proposal.source).__name__} "
            "source (expected a candidate id or None, and the program's text)"
        )
    return proposal
