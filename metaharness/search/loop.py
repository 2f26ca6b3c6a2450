"""The optimisation loop: seeds, then propose -> check -> commit -> staged evaluation, iteration after iteration.

The loop owns the candidates; the proposer only reads a ``RunState`` and returns
proposals (``metaharness.search.protocol``), the evaluator only measures programs
(``metaharness.evaluation.protocol``), a policy (``metaharness.search.staging``) decides which candidates
get how many more validation examples (``metaharness.search.stages`` scores and records them), and everything
durable goes through a ``RunStore``,
in an order that makes a kill at any moment harmless:

1. an iteration's proposals are journaled (with their ids) before any is checked;
2. each is committed once checked (implemented, or failed with its error), unscored;
3. round after round, the policy picks candidates and stages; each stage's records are written, then the
   candidate's evaluation is journaled and recorded in its git note in one transaction (its examples, its
   scores, what the stage cost);
4. the iteration's line in ``summary.jsonl`` is written after its last round.

One budget covers every task-model call of an iteration (``metaharness.budget``): the proposer's predictions
(probes, charged to ``RunState.predicting``, at most ``PREDICTING_SHARE`` of what the iteration may spend, and
nothing under a policy that reads no prediction), the checks (a harness whose ``__init__`` calls the model), and
the staged evaluation, which gets what the first two left. Each phase's spend is logged as it ends (a ``"phase"``
line) and counted in the run's ``SpendAccount`` (``metaharness.search.account``), which the loop reads before
every decision; the iteration's line says what went where (``spend``).

Free evidence comes first (``metaharness.search.free_evidence``): a newly committed candidate whose outputs do not
depend on the model's answers is scored with no model call, and one that repeats calls the run already made is
scored on them, at no cost (``model_free`` and ``replayed`` in the iteration's line), before any policy decides.
After every iteration the held-out examples choose the candidate the run returns, and judge it at the end
(``metaharness.search.held_out``).

A rerun finds the journal and continues: it records journaled evaluations, finishes an open iteration (the policy
decides again from the evidence recorded, so a stage already recorded is never run twice), then starts the next
one. A ``StopRequest`` (Ctrl-C in the CLI) lets the stage under way finish and be recorded, then stops.
``BudgetExceeded`` from the model layer stops the run with a note in the summary;
``ModelUnavailable`` from the evaluator (the task model stayed unreachable through its
retries) logs a stop, records nothing for the stage under way and is raised again (exit code 5; rerunning the
same command continues).

A proposer that raises (a context overflow, a model unreachable after retries, a malformed tool call: any exception
but ``BudgetExceeded``) does not use up an iteration: the failure is logged (a
``"proposer_failure"`` line with the error) and the same iteration asks again. After ``max_proposer_failures``
failures in a row in one session the run logs a stop and raises ``ProposerFailed``; rerunning continues.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from metaharness import frontier
from metaharness.budget import Budget, Meter, Spend
from metaharness.candidate import FAILED, IMPLEMENTED, Candidate, Evaluation, PlanEntry, id_number
from metaharness.errors import BudgetExceeded, MetaharnessError, ModelUnavailable
from metaharness.evaluation.protocol import CandidateEvaluator
from metaharness.search.account import SpendAccount
from metaharness.search.events import LoopEvents as LoopEvents
from metaharness.search.free_evidence import FreeEvidence
from metaharness.search.held_out import Baseline, HeldOutJudge
from metaharness.search.model_free import ModelFreeCheck
from metaharness.search.plan import plan_entries
from metaharness.search.protocol import Proposal, Proposer, ReplayFunction, RunState
from metaharness.search.settings import SearchSettings
from metaharness.search.stages import StagedEvaluation
from metaharness.search.staging import ExampleOrder, get_policy
from metaharness.search.staging import evaluated_ancestor as evaluated_ancestor
from metaharness.search.test_split import TestSplit, score_test_split
from metaharness.store.crash import crash_point
from metaharness.store.log import IterationFacts, IterationLine, PhaseSpendLine, ProposerFailureLine, StopLine
from metaharness.store.protocol import RunStore

# The share of what an iteration may spend that the proposer's predictions may take (the rest is for measuring).
PREDICTING_SHARE = 0.25


@dataclass
class StopRequest:
    """Set ``requested`` (e.g. from a SIGINT handler) to stop the loop at its next safe point."""

    requested: bool = False


@dataclass
class Seed:
    """A starting program: a seed harness file of the task (``candidates/<task>/<name>.py``)."""

    name: str
    source: str


@dataclass(frozen=True)
class LoopSettings:
    """One session of the loop: the ``task``'s name, the run's ``search`` settings (as resolved: each iteration
    takes up to ``search.proposals_per_iteration()`` proposals and evaluates them with ``search.evaluation``
    within ``search.budget``), the ``iterations`` to reach after the seeds, and whether to evaluate the best and
    the frontier on the test split at the end (``test``: ``True`` within the default bound, or a ``TestSplit``; when
    the split is available), and how many validation
    examples the search's share may hold (``limit``: the first ones of the split; the held-out examples come from
    the rest, `ExampleOrder.split`), and the ids of the evaluator's validation examples that only judge
    (``judge_only``: training examples the run withholds, `metaharness.search.withheld`)."""

    task: str
    search: SearchSettings
    iterations: int
    test: bool | TestSplit = True
    limit: int | None = None
    judge_only: tuple[str, ...] = ()


class Spending(Protocol):
    """What the run's ledger tells the loop (``metaharness.runner.ledger.RunLedger``)."""

    def spent(self) -> dict[str, float]:
        """What the whole run has spent so far: ``{"usd": ..., "tokens": ...}``, as the log's lines record it."""
        ...

    def left(self) -> Budget:
        """The tokens and dollars the run's budget leaves, for every model (a proposer's own spend included)."""
        ...


class Unmetered:
    """Spending of a loop without a ledger: nothing spent, nothing capped."""

    def spent(self) -> dict[str, float]:
        return {}

    def left(self) -> Budget:
        return Budget()


class ProposerFailed(MetaharnessError):
    """The proposer failed in ``max_proposer_failures`` consecutive iterations; the run stopped (exit code 4)."""

    exit_code = 4


@dataclass
class Outcome:
    """How a call of ``Optimizer.run`` ended."""

    iterations_done: int
    stopped: str | None
    best: Candidate | None
    frontier: list[Candidate]
    test: dict[str, Evaluation] = field(default_factory=dict)
    # The best candidate's score on the held-out validation examples (when the run holds some out).
    holdout: dict[str, Evaluation] = field(default_factory=dict)
    # Stopped by a reached cost or token cap (``stopped`` says which); a larger cap continues the run.
    capped: bool = False


class _Stopped(Exception):
    """Internal: unwind to ``Optimizer.run`` at a safe point."""


class _ProposerError(Exception):
    """Internal: the proposer raised ``error`` while planning an iteration."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class Optimizer:
    """Runs the loop over ``store`` (see the module docstring).

    ``spending`` is the run's ledger (``Spending``: what the run spent, written into the log's lines, and the
    money its budget leaves, for the proposer); ``write_summary()``, when given, refreshes the run's
    human-readable summary after every iteration and when the run stops; ``replay``, when given, scores a program
    on recorded calls (``metaharness.search.replay.Replayer``): the proposer reads it, and the loop records what it
    measured as a new candidate's free first stage; ``model_free``, when given, finds the candidates whose outputs
    do not depend on the model's answers and scores them with no model call
    (``metaharness.search.model_free.ModelFreeCheck``), their whole share at once, the held-out judge too;
    ``baseline``, when given, scores the no-model baseline on validation examples for the run's judgement
    (``metaharness.search.judgement``).
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
        spending: Spending | None = None,
        write_summary: Callable[[], object] | None = None,
        replay: ReplayFunction | None = None,
        model_free: ModelFreeCheck | None = None,
        baseline: Baseline | None = None,
    ) -> None:
        self.store = store
        self.replay = replay
        self.model_free = model_free
        self.baseline = baseline
        self.settings = settings
        self.proposer = proposer
        self.evaluator = evaluator
        self.seeds = seeds
        self.events = events or LoopEvents()
        self.stop = stop or StopRequest()
        self.spending: Spending = spending or Unmetered()
        self.spent = self.spending.spent
        self.write_summary = write_summary

    # -- the run ---------------------------------------------------------------------------------------------

    def run(self) -> Outcome:
        """Run to the last iteration (and the test split); raises ``ProposerFailed`` or
        ``ModelUnavailable`` after logging a stop."""
        stopped, capped = None, False
        failure: MetaharnessError | None = None
        test: dict[str, Evaluation] = {}
        self.events.run_started(self.store.path, self.spent)
        for action in self.store.recover():
            self.events.note(action)
        try:
            self._start()
            # Iteration 0 evaluates the seeds; a plan left open by an interrupted run is finished first.
            iteration, failures = 0, 0
            while iteration <= self.settings.iterations:
                if iteration in self.store.completed_iterations():
                    iteration += 1
                    continue
                self._check_stop()
                if self._iteration(iteration):
                    iteration, failures = iteration + 1, 0
                    continue
                failures += 1
                if failures >= max(1, self.settings.search.max_proposer_failures):
                    raise ProposerFailed(
                        f"the proposer {self.proposer.name} failed {failures} times in a row in iteration {iteration}; "
                        f"last error: {self._last_proposer_error()[:500]}. Fix the cause (the errors are in "
                        "summary.jsonl and SUMMARY.md), then rerun the same command to continue"
                    )
            self.held_out.choose()
            self.held_out.judgement()
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
            self.store.log(StopLine(stopped, self.spent()))
            self.events.note(f"stopped: {stopped}")
        self._write_summary()
        if failure is not None:
            raise failure
        candidates = self.store.candidates()
        done = self.store.completed_iterations()
        best = frontier.best(candidates)
        judged = self.store.split_result(best.id, "holdout") if best is not None else None
        return Outcome(
            iterations_done=max((i for i in done if i > 0), default=0),
            stopped=stopped,
            best=best,
            frontier=frontier.pareto_front(candidates),
            test=test,
            holdout={best.id: judged} if best is not None and judged is not None else {},
            capped=capped,
        )

    def _start(self) -> None:
        """What a session works with: the run's example order, its spend so far, and the collaborators that score
        stages (`StagedEvaluation`), free evidence (`FreeEvidence`) and held-out examples (`HeldOutJudge`)."""
        self.order = ExampleOrder.split(
            self.evaluator.examples("val"),
            seed=self.settings.search.seed,
            limit=self.settings.limit,
            holdout=self.settings.search.holdout,
            judge_only=self.settings.judge_only,
        )
        self.account = SpendAccount.of(self.store.candidates(), self.store)
        self.stages = StagedEvaluation(
            self.store,
            self.evaluator,
            self.events,
            self.order,
            self.settings.search,
            self.account,
            self._left,
            self._check_stop,
        )
        self.free = FreeEvidence(
            self.store, self.stages, self.events, self.model_free, self.replay, self._check_stop, self._load_error
        )
        self.held_out = HeldOutJudge(
            self.store,
            self.evaluator,
            self.events,
            self.order,
            self.model_free,
            self.baseline,
            self._check_stop,
            self.stages.progress,
            train_folds=self.settings.search.train_folds,
        )

    def _check_stop(self) -> None:
        if self.stop.requested:
            raise _Stopped

    def _iteration(self, iteration: int) -> bool:
        """Propose (or reopen the journaled plan), check and commit, evaluate in stages, judge, log; False when
        the proposer failed (nothing was committed; the iteration is asked again)."""
        started = time.monotonic()
        self.events.iteration_started(iteration, self.settings.iterations)
        self.free.learn()
        plan = self.store.journal.plan(iteration)
        if plan is None:
            try:
                plan = self._plan(iteration)
            except _ProposerError as failed:
                self._proposer_failed(iteration, failed.error)
                return False
            crash_point("iteration:proposed")
            self.store.journal.save_plan(iteration, plan)
            crash_point("iteration:planned")
        committed = {c.id for c in self.store.candidates()}
        for entry in plan:  # a resumed iteration realises what it did not commit before the kill
            self._check_stop()
            if entry.id not in committed:
                self._realise(entry, iteration)
        proposals = [e.id for e in plan if e.evaluate]
        self.free.score(iteration, [e.id for e in plan])  # intermediates too: a policy may pick any unscored one
        record = self.stages.run(iteration, proposals, self.free.facts(iteration))
        candidates = self.store.candidates()
        self.store.log(
            IterationLine(
                IterationFacts.of(iteration, candidates),
                holdout=self.held_out.judged_score(frontier.best(candidates)),
                spent=self.spent(),
                staging=record,
                seconds=round(time.monotonic() - started, 3),
            )
        )
        crash_point("iteration:logged")
        self.store.journal.drop_plan(iteration)
        self._write_summary()
        return True

    # -- spending -------------------------------------------------------------------------------------------

    def _left(self, iteration: int) -> Budget:
        """What this iteration may still spend of the run's budget: its limit per iteration less what the iteration
        spent (predictions, checks, evaluation), within what the run's limit leaves (the seeds: only the run's
        limit binds). The example-evaluations from the run's account, its tokens and dollars from the ledger."""
        money = self.spent()
        run = Spend(self.account.run_evals, float(money.get("tokens", 0)), float(money.get("usd", 0.0)))
        budget = self.settings.search.budget
        if iteration == 0:
            return budget.per_run.left(run)
        return budget.for_iteration(run, self.account.iteration(iteration), share=self.order.share)

    def _log_phase(self, iteration: int, phase: str, spend: Spend) -> None:
        """Log what a phase of ``iteration`` spent (a ``"phase"`` line) and count it in the run's account."""
        self.store.log(PhaseSpendLine(iteration, phase, spend))
        self.account.charge(iteration, phase, spend)

    # -- proposing -------------------------------------------------------------------------------------------

    def _proposer_failed(self, iteration: int, error: BaseException) -> None:
        """Log that the proposer failed in ``iteration`` (nothing was committed; it is asked again)."""
        message = f"{type(error).__name__}: {error}".strip()
        details = "".join(traceback.format_exception(error))
        self.store.log(ProposerFailureLine(iteration, message[:2000], details[-8000:], self.spent()))
        self.events.note(f"iteration {iteration}: the proposer {self.proposer.name} failed: {message[:300]}")
        self._write_summary()

    def _last_proposer_error(self) -> str:
        lines = self.store.log_records("proposer_failure")
        return str(lines[-1].get("proposer_error", "")) if lines else ""

    def _plan(self, iteration: int) -> list[PlanEntry]:
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
                self.store.graph.write(state.graph)
            self._log_phase(iteration, "predict", state.predicting.spent)
        return plan_entries(proposals, id_number(self.store.next_id()), self._realised_nodes())

    def _realised_nodes(self) -> dict[str, str]:
        """Program-graph node -> the committed candidate that realised it (``prediction["node"]``; a candidate's id
        names itself, as in the synced graph)."""
        realised = {}
        for c in self.store.candidates():
            realised[c.id] = c.id
            if c.prediction is not None and c.prediction.node is not None:
                realised[c.prediction.node] = c.id
        return realised

    def state(self, iteration: int) -> RunState:
        """What the proposer sees: every committed candidate (failed ones with their errors), the program graph,
        what its predictions may spend (nothing under a policy that reads none) and the free replay."""
        predictions = get_policy(self.settings.search.evaluation).asks_predictions
        allowance = Budget(*(v * PREDICTING_SHARE for v in self._left(iteration).vector()))
        return RunState(
            task=self.settings.task,
            iteration=iteration,
            candidates=[_without_held_out(c) for c in self.store.candidates()],
            proposals=self.settings.search.proposals_per_iteration(),
            money_left=self.spending.left(),
            run_dir=self.store.path,
            graph=self.store.graph.read(),
            predicting=Meter(allowance if predictions else Budget(0, 0, 0)),
            predictions=predictions,
            replay=self.replay,
            model_free=self.model_free,
        )

    def _realise(self, entry: PlanEntry, iteration: int) -> None:
        """Check and commit one planned candidate: implemented (to be scored by the staged evaluation), or failed.
        With a model-free check, every candidate is committed unchecked: that check loads it (`FreeEvidence`)."""
        candidate = Candidate(
            id=entry.id,
            parent=entry.parent,
            iteration=iteration,
            source=entry.source,
            status=IMPLEMENTED,
            summary=entry.summary,
            hypothesis=entry.hypothesis,
            prediction=entry.prediction,
            trace=self.store.relative(self.store.trace_path(entry.id, "val")),
        )
        self.events.candidate_started(candidate.id, "check", candidate.summary)
        if candidate.parent is not None and candidate.parent not in {c.id for c in self.store.candidates()}:
            unknown, candidate.parent = candidate.parent, None  # committed on the root so the proposer sees the mistake
            self._fail(candidate, f"parent '{unknown}' is not a candidate of this run (known: {self._known_ids()})")
            return
        error = None if self.model_free is not None else self._load_error(candidate, iteration)
        if error:
            self._fail(candidate, error)
            return
        self._commit(candidate)

    def _load_error(self, candidate: Candidate, iteration: int) -> str | None:
        """Load ``candidate`` in the sandbox with the task model: its load error, or None; logs what the load
        spent, when its harness called the model while loading (one example-evaluation)."""
        before = self.spent()
        error = self.evaluator.check(self.store.work_file(candidate.id, candidate.source))
        after = self.spent()
        tokens = float(after.get("tokens", 0)) - float(before.get("tokens", 0))
        usd = float(after.get("usd", 0.0)) - float(before.get("usd", 0.0))
        if tokens > 0 or usd > 0:
            self._log_phase(iteration, "check", Spend(1.0, tokens, usd))
        return error

    def _commit(self, candidate: Candidate) -> None:
        self.store.commit(candidate)
        self.events.candidate_finished(candidate)

    def _known_ids(self) -> str:
        return ", ".join(c.id for c in self.store.candidates())

    def _fail(self, candidate: Candidate, error: str) -> None:
        candidate.status = FAILED
        candidate.error = error
        candidate.trace = None
        self._commit(candidate)

    def _test_split(self) -> dict[str, Evaluation]:
        """Score the best candidate and the Pareto front on the test split, bounded and staged, never twice
        (``metaharness.search.test_split``)."""
        plan = TestSplit.of(self.settings.test)
        if plan is None:
            return {}
        return score_test_split(
            self.store,
            self.evaluator,
            plan,
            validation=self.order.share,
            stop=self._check_stop,
            events=self.events,
            progress=self.stages.progress,
        )

    def _write_summary(self) -> None:
        if self.write_summary is not None:
            self.write_summary()


def _checked(proposal: object) -> Proposal:
    """``proposal`` if it is a ``Proposal`` with a source text; a proposer bug raises here, in its iteration."""
    if not isinstance(proposal, Proposal):
        raise TypeError(f"the proposer returned {type(proposal).__name__}, not a Proposal: {str(proposal)[:200]!r}")
    if not isinstance(proposal.source, str) or not isinstance(proposal.parent, (str, type(None))):
        raise TypeError(
            f"the proposer returned a Proposal with parent {proposal.parent!r} and a {type(proposal.source).__name__} "
            "source (expected a candidate id or None, and the program's text)"
        )
    return proposal


def _without_held_out(candidate: Candidate) -> Candidate:
    """``candidate`` as a proposer sees it: nothing of the held-out examples (their confirm score) in it."""
    if candidate.evaluation is None or candidate.evaluation.confirm is None:
        return candidate
    return dataclasses.replace(candidate, evaluation=dataclasses.replace(candidate.evaluation, confirm=None))
