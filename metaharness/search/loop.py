"""The optimisation loop: seeds, then propose -> check -> commit -> staged evaluation, iteration after iteration.

The loop owns the candidates; the proposer only reads a ``RunState`` and returns
proposals (``metaharness.search.protocol``), the evaluator only measures programs
(``metaharness.evaluation.protocol``), a policy (``metaharness.search.staging``) decides which candidates
get how many more validation examples, and everything durable goes through a ``RunStore``,
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
line) and the iteration's line says what went where (``spend``).

Free evidence comes first: a newly committed candidate is replayed (``metaharness.search.replay``) on the examples
its nearest evaluated ancestor was scored on, through a model that answers only calls the run already made, and
the examples whose every call was recorded become its first evaluation stage, at no cost (``replayed`` in the
iteration's line). A revision that only post-processes answers is then scored on its parent's whole share before
any policy decides, and no policy pays for it.

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
import math
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from metaharness import frontier
from metaharness.budget import Budget, Meter, Spend
from metaharness.candidate import (
    EVALUATED,
    FAILED,
    IMPLEMENTED,
    Candidate,
    Evaluation,
    Increment,
    PlanEntry,
    Prediction,
    candidate_id,
    id_number,
)
from metaharness.errors import BudgetExceeded, MetaharnessError, ModelUnavailable
from metaharness.evaluation.protocol import CandidateEvaluator, CandidateFailed
from metaharness.search.judgement import Judged, comparisons
from metaharness.search.model_free import ModelFreeCheck
from metaharness.search.protocol import Proposal, Proposer, ReplayFunction, RunState
from metaharness.search.settings import SearchSettings
from metaharness.search.staging import (
    PREDICTION_FREE,
    ExampleOrder,
    Policy,
    Standing,
    alternatives,
    decide,
    paired,
    sample_variance,
    trace_outputs,
)
from metaharness.search.test_split import TestSplit, score_test_split
from metaharness.search.traces import merge_trace
from metaharness.store.crash import crash_point
from metaharness.store.files import atomic_write_text, read_jsonl
from metaharness.store.log import (
    FreeChecks,
    Identical,
    IterationFacts,
    IterationLine,
    JudgementLine,
    PhaseSpendLine,
    ProposerFailureLine,
    StagingReport,
    StopLine,
)
from metaharness.store.protocol import RunStore

# The share of what an iteration may spend that the proposer's predictions may take (the rest is for measuring).
PREDICTING_SHARE = 0.25
# How many of the search's best the held-out confirm examples choose the returned candidate among.
CONTENDERS = 2


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


@dataclass(frozen=True)
class LoopSettings:
    """One session of the loop: the ``task``'s name, the run's ``search`` settings (as resolved: each iteration
    takes up to ``search.proposals_per_iteration()`` proposals and evaluates them with ``search.evaluation``
    within ``search.budget``), the ``iterations`` to reach after the seeds, and whether to evaluate the best and
    the frontier on the test split at the end (``test``: ``True`` within the default bound, or a ``TestSplit``; when
    the split is available), and how many validation
    examples the search's share may hold (``limit``: the first ones of the split; the held-out examples come from
    the rest, `ExampleOrder.split`)."""

    task: str
    search: SearchSettings
    iterations: int
    test: bool | TestSplit = True
    limit: int | None = None


# The no-model baseline on validation examples: their primary scores (in the order asked) and its settings.
Baseline = Callable[[Sequence[str]], tuple[list[float], dict[str, object]]]


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


def plan_entries(proposals: list[Proposal], first: int, realised: dict[str, str]) -> list[PlanEntry]:
    """An iteration's plan: one entry per candidate to commit, ids from ``c{first}`` on, every parent before its
    children.

    A proposal's ``intermediates`` become entries of their own (``"evaluate": false``) chained from the proposal's
    ``parent``, the proposal's entry revising the last of them. An intermediate whose ``node`` is already realised
    (``realised``: node -> committed candidate id; a candidate id names itself) or already planned is not
    planned again: the chain goes through that candidate. One whose node another proposal evaluates is that
    proposal (planned first, with its own chain). A proposal whose node is already committed evaluates that
    candidate's program again as its child (the node stays with the first candidate).
    """
    entries: list[PlanEntry] = []
    by_node = dict(realised)
    finals = {p.node: p for p in proposals if p.node is not None}
    planned: dict[int, str] = {}  # id(proposal) -> its entry's candidate id
    under_way: set[int] = set()

    def add(p: Proposal, parent: str | None, evaluate: bool) -> str:
        cid = candidate_id(first + len(entries))
        node = p.node if p.node is not None and p.node not in by_node else None
        if p.node is not None and node is None:
            parent = by_node[p.node]
        prediction = p.prediction or Prediction()
        if node is not None:
            prediction = dataclasses.replace(prediction, node=node)
            by_node[node] = cid
        kept = prediction if prediction.to_json() else None
        entries.append(PlanEntry(cid, parent, p.source, p.summary, p.hypothesis, kept, node, evaluate))
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
        self._replayed: dict[str, int] = {}  # candidate -> examples its replay scored (this session)
        self._model_free: dict[str, int] = {}  # candidate -> examples scored with no model call (this session)
        self._checks: dict[int, FreeChecks] = {}  # iteration -> what its model-free checks cost
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
            self.order = ExampleOrder.split(
                self.evaluator.examples("val"),
                seed=self.settings.search.seed,
                limit=self.settings.limit,
                holdout=self.settings.search.holdout,
            )
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
            self._judgement()
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

    def _check_stop(self) -> None:
        if self.stop.requested:
            raise _Stopped

    def _iteration(self, iteration: int) -> bool:
        """Propose (or reopen the journaled plan), check and commit, evaluate in stages, judge, log; False when
        the proposer failed (nothing was committed; the iteration is asked again)."""
        started = time.monotonic()
        self.events.iteration_started(iteration, self.settings.iterations)
        plan = self.store.plan(iteration)
        if plan is None:
            try:
                plan = self._plan(iteration)
            except _ProposerError as failed:
                self._proposer_failed(iteration, failed.error)
                return False
            crash_point("iteration:proposed")
            self.store.save_plan(iteration, plan)
            crash_point("iteration:planned")
        for entry in plan:
            self._check_stop()
            if not self.store.has(entry.id):
                self._realise(entry, iteration)
        proposals = [e.id for e in plan if e.evaluate]
        self._free_evidence(iteration, proposals)
        record = self._evaluate(iteration, proposals)
        self._judge()
        candidates = self.store.candidates()
        self.store.log(
            IterationLine(
                IterationFacts.of(iteration, candidates),
                holdout=self._holdout_of(frontier.best(candidates)),
                spent=self.spent(),
                staging=record,
                seconds=round(time.monotonic() - started, 3),
            )
        )
        crash_point("iteration:logged")
        self.store.drop_plan(iteration)
        self._write_summary()
        return True

    # -- staged evaluation -----------------------------------------------------------------------------------

    def _spent(self, iteration: int) -> tuple[Spend, Spend]:
        """(what the run spent, what this iteration spent of its budget): example-evaluations of the run from the
        candidates' recorded stages and the logged predictions and checks, its tokens and dollars from the ledger;
        this iteration's from its stages and its logged phases."""
        run, this = Spend(), Spend()
        for candidate in self.store.candidates():
            for increment in candidate.evaluation.increments if candidate.evaluation else []:
                run = run + Spend(increment.spend.evals)
                if increment.iteration == iteration:
                    this = this + increment.spend
        for _phase, at, spend in self._phase_spends():
            run = run + Spend(spend.evals)
            if at == iteration:
                this = this + spend
        money = self.spent()
        return Spend(run.evals, float(money.get("tokens", 0)), float(money.get("usd", 0.0))), this

    def _phase_spends(self) -> list[tuple[str, int, Spend]]:
        """(phase, iteration, spend) of every logged prediction and check spend (``"phase"`` lines)."""
        out = []
        for line in self.store.log_records(PhaseSpendLine.kind):
            at, phase, spend = line.get("iteration"), line.get("phase"), line.get("spend")
            if isinstance(at, int) and isinstance(phase, str) and isinstance(spend, dict):
                out.append((phase, at, Spend.from_json(spend)))
        return out

    def _phase_spend(self, iteration: int) -> dict[str, Spend]:
        """What ``iteration`` spent on predicting and checking (the logged phases)."""
        out: dict[str, Spend] = {}
        for phase, at, spend in self._phase_spends():
            if at == iteration:
                out[phase] = out.get(phase, Spend()) + spend
        return out

    def _budget(self, iteration: int) -> Budget:
        """What this iteration may still spend of the run's budget: its limit per iteration less what the iteration
        spent (predictions, checks, evaluation), within what the run's limit leaves (the seeds: only the run's
        limit binds)."""
        run, this = self._spent(iteration)
        budget = self.settings.search.budget
        if iteration == 0:
            return budget.per_run.left(run)
        return budget.for_iteration(run, this, share=self.order.share)

    def standing(self, iteration: int, proposals: list[str]) -> Standing:
        """What the policy decides from now (see ``metaharness.search.staging``)."""
        candidates = self.store.candidates()
        outputs = {
            c.id: trace_outputs(self.store.path / c.trace) for c in candidates if c.evaluated and c.trace is not None
        }
        return Standing(
            candidates,
            self.order,
            self._budget(iteration),
            iteration,
            proposals,
            self.settings.search.first_stage,
            outputs=outputs,
        )

    def _evaluate(self, iteration: int, proposals: list[str]) -> StagingReport:
        """The iteration's rounds of staged evaluation (iteration 0: every seed to its whole share); returns what
        the iteration's line records about them."""
        policy: Policy = "all" if iteration == 0 else self.settings.search.evaluation
        rounds: list[dict[str, object]] = []
        first: Standing | None = None
        predicted = Spend()
        before: dict[str, int] = {}
        while True:
            standing = self.standing(iteration, proposals)
            first = first or standing
            decision = decide(standing, policy, solver=self.settings.search.solver)
            if not decision.steps:
                break
            self._check_stop()
            rounds.append(decision.to_json())
            progressed = False
            for cid in sorted(decision.steps):
                self._check_stop()
                candidate = standing.by_id[cid]
                before.setdefault(cid, candidate.evaluation.examples if candidate.evaluation else 0)
                cost = standing.cost_to(cid, decision.steps[cid])
                if self._score(candidate, decision.steps[cid], iteration, decision.ids.get(cid)):
                    predicted, progressed = predicted + cost, True
            if not progressed:
                self.events.note(f"iteration {iteration}: the {policy} policy chose nothing that could be scored")
                break
        _, spent = self._spent(iteration)
        phases = self._phase_spend(iteration)
        realised = spent - phases.get("predict", Spend()) - phases.get("check", Spend())
        after = {c.id: c.evaluation.examples for c in self.store.candidates() if c.id in before and c.evaluation}
        assert first is not None
        return StagingReport(
            policy=policy,
            considered=[a.id for a in first.arms],
            allotted={cid: (before[cid], after.get(cid, before[cid])) for cid in sorted(before)},
            predicted=predicted,
            realised=realised,
            budget=first.budget,
            reference=first.reference.id if first.reference else None,
            calibration=first.calibration.to_json(),
            alternatives=alternatives(first) if iteration > 0 and first.arms else {},
            rounds=rounds,
            spend={**phases, "measure": realised},
            replayed={cid: n for cid, n in sorted(self._replayed.items()) if cid in proposals},
            model_free={cid: n for cid, n in sorted(self._model_free.items()) if cid in proposals},
            checks=self._checks.get(iteration, FreeChecks()),
            identical=self._identical(iteration),
        )

    def _identical(self, iteration: int) -> Identical:
        """The candidates whose outputs equal an earlier candidate's on every example they were scored on, and what
        ``iteration`` charged to them (the spend that bought nothing new)."""
        candidates = [c for c in self.store.candidates() if c.evaluated and c.trace is not None]
        outputs = {c.id: trace_outputs(self.store.path / c.trace) for c in candidates if c.trace is not None}
        same_as: dict[str, str] = {}
        charged = 0.0
        for k, c in enumerate(candidates):
            mine = outputs[c.id]
            twin = next(
                (d.id for d in candidates[:k] if mine and all(outputs[d.id].get(i) == o for i, o in mine.items())),
                None,
            )
            assert c.evaluation is not None
            stages = [i for i in c.evaluation.increments if i.iteration == iteration]
            if twin is None or not (stages or c.iteration == iteration):
                continue
            same_as[c.id] = twin
            charged += sum(i.spend.evals for i in stages)
        return Identical(charged, same_as)

    def _score(self, candidate: Candidate, target: int, iteration: int, ids: list[str] | None) -> bool:
        """Score ``candidate`` on more validation examples (``ids``, else the next ones of the order up to
        ``target``) and record its evaluation; False when there was nothing to score."""
        scored = candidate.evaluation.example_ids if candidate.evaluation else []
        ids = ids or self.order.next_ids(scored, target - len(scored))
        if not ids:
            return False
        self.events.candidate_started(candidate.id, f"val +{len(ids)}", candidate.summary)
        harness = self.store.work_file(candidate.id, candidate.source)
        trace = self.store.trace_path(candidate.id, "val")
        part = trace.with_name(f"{candidate.id}.val.part.jsonl")
        try:
            more = self.evaluator.evaluate(harness, "val", trace_path=part, progress=self._progress, examples=ids)
        except CandidateFailed as exc:
            self._record_failure(candidate, str(exc))
            return True
        crash_point("candidate:evaluated")
        self._record(candidate, more, part, iteration)
        return True

    def _record(self, candidate: Candidate, more: Evaluation, part: Path, iteration: int) -> None:
        """Record ``more`` (a stage's evaluation, its records in ``part``) as the candidate's next stage."""
        scored = candidate.evaluation.example_ids if candidate.evaluation else []
        trace = self.store.trace_path(candidate.id, "val")
        more.share = self.order.share
        more.increments = [Increment(iteration, len(more.example_ids), more.spend())]
        evaluation = candidate.evaluation.merge(more) if candidate.evaluation else more
        merge_trace(trace, part, keep=scored)
        updated = dataclasses.replace(
            candidate, status=EVALUATED, evaluation=evaluation, trace=self.store.relative(trace)
        )
        self.events.candidate_finished(self.store.record_evaluation(updated))

    def _record_failure(self, candidate: Candidate, error: str) -> None:
        """A candidate that passed its check but cannot run: recorded failed (its note says why)."""
        failed = dataclasses.replace(candidate, status=FAILED, error=error, evaluation=None)
        self.store.record_failure(failed)
        self.events.candidate_finished(failed)

    def _judge(self) -> None:
        """Choose the candidate the run returns and score it on examples no proposer has seen (when the run holds
        some out): the search's best contenders (`_contenders`) not confirmed yet are scored on the held-out
        ``confirm`` examples, which makes the best the highest confirmed score (``metaharness.frontier.best``), and
        the best, once chosen, on the ``judge`` examples (once per candidate, saved as its ``holdout`` result)."""
        if not self.order.holdout:
            return
        for candidate in self._contenders():
            self._check_stop()
            assert candidate.evaluation is not None
            confirm = self._held_out(candidate, "confirm", self.order.confirm)
            evaluation = dataclasses.replace(candidate.evaluation, confirm=confirm)
            self.store.record_confirmation(dataclasses.replace(candidate, evaluation=evaluation))
        best = frontier.best(self.store.candidates())
        if best is None or not self.order.judge or self.store.split_result(best.id, "holdout") is not None:
            return
        self._check_stop()
        self.store.save_split_result(best.id, "holdout", self._held_out(best, "holdout", self.order.judge))

    def _contenders(self) -> list[Candidate]:
        """The supported candidates the held-out examples must choose among, not confirmed yet: the ``CONTENDERS``
        best by validation score with distinct outputs (a candidate whose outputs equal a better one's is that one),
        leaving out any whose paired deficit to the top is more than two standard errors (no contender on this
        evidence)."""
        ranked = sorted((c for c in self.store.candidates() if c.supported), key=lambda c: -c.score)
        if not ranked:
            return []
        chosen: list[Candidate] = []
        outputs: dict[str, dict[str, str]] = {}
        for candidate in ranked:
            if len(chosen) >= CONTENDERS:
                break
            behind = paired(ranked[0], candidate)  # the top's paired lead over it, example by example
            lead = sum(behind) / len(behind) if behind else 0.0
            spread = math.sqrt(sample_variance(behind) / len(behind)) if len(behind) > 1 else 0.0
            if lead > 2 * spread + 1e-12:
                continue
            path = self.store.path / candidate.trace if candidate.trace is not None else None
            outputs[candidate.id] = trace_outputs(path) if path is not None else {}
            if not any(outputs[candidate.id] == outputs[c.id] for c in chosen):
                chosen.append(candidate)
        return [c for c in chosen if c.evaluation is not None and c.evaluation.confirm is None]

    def _held_out(self, candidate: Candidate, split: str, ids: Sequence[str]) -> Evaluation:
        """``candidate`` scored on the held-out examples ``ids`` (its records under ``split``): with no model call
        on those whose outputs ignore the model's answers (all of them for a model-free candidate, checked again
        here), by the evaluator on the rest."""
        self.events.candidate_started(candidate.id, f"{split} +{len(ids)}", candidate.summary)
        trace = self.store.trace_path(candidate.id, split)
        found = self.model_free(candidate.source, ids) if self.model_free is not None else None
        free = found.evaluation if found is not None and found.trace is not None else None
        rest = [i for i in ids if free is None or i not in free.example_ids]
        if free is not None and found is not None and found.trace is not None:
            atomic_write_text(trace, found.trace.read_text(encoding="utf-8"))
        if not rest:
            assert free is not None
            return dataclasses.replace(free, split=split)
        part = trace.with_name(f"{candidate.id}.{split}.part.jsonl")
        harness = self.store.work_file(candidate.id, candidate.source)
        paid = self.evaluator.evaluate(harness, "val", trace_path=part, progress=self._progress, examples=rest)
        merge_trace(trace, part, keep=list(free.example_ids) if free is not None else [])
        evaluation = free.merge(paid) if free is not None else paid
        return dataclasses.replace(evaluation, split=split, model_free=False)

    def _judgement(self) -> None:
        """Once the last iteration is done: the returned candidate, the best seed and the baseline on the judge
        examples, paired, logged as a ``JudgementLine`` (not again while the last one judged the same candidate)."""
        judge = list(self.order.judge)
        candidates = self.store.candidates()
        returned = frontier.best(candidates)
        if not judge or returned is None:
            return
        done = [line.get("scores") for line in self.store.log_records(JudgementLine.kind)]
        if any(isinstance(d, dict) and d.get("returned", {}).get("id") == returned.id for d in done[-1:]):
            return  # judged already (a rerun of a finished run)
        seed = frontier.best([c for c in candidates if c.iteration == 0])
        judged = [self._judged("returned", returned, judge)]
        if seed is not None:
            judged.append(self._judged("best seed", seed, judge))
        settings: dict[str, object] = {}
        if self.baseline is not None:
            scores, settings = self.baseline(judge)
            judged.append(Judged("baseline", None, tuple(scores)))
        self.store.log(
            JudgementLine(
                max(self.store.completed_iterations(), default=0),
                len(judge),
                {j.name: {"id": j.id, "score": round(j.score, 4)} for j in judged},
                comparisons(judged[0], judged[1:]),
                settings,
            )
        )

    def _judged(self, name: str, candidate: Candidate, judge: list[str]) -> Judged:
        """``candidate``'s scores on the judge examples, in their order (scored and saved once, if not yet)."""
        evaluation = self.store.split_result(candidate.id, "holdout")
        if evaluation is None:
            self._check_stop()
            evaluation = self._held_out(candidate, "holdout", judge)
            self.store.save_split_result(candidate.id, "holdout", evaluation)
        scores = dict(zip(evaluation.example_ids, evaluation.example_scores, strict=False))
        return Judged(name, candidate.id, tuple(scores.get(i, 0.0) for i in judge))

    def _holdout_of(self, best: Candidate | None) -> float | None:
        judged = self.store.split_result(best.id, "holdout") if best is not None else None
        return judged.primary if judged is not None else None

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
                self.store.save_program_graph(state.graph)
            self.store.log(PhaseSpendLine(iteration, "predict", state.predicting.spent))
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
        predictions = self.settings.search.evaluation not in PREDICTION_FREE
        allowance = Budget(*(v * PREDICTING_SHARE for v in self._budget(iteration).vector()))
        return RunState(
            task=self.settings.task,
            iteration=iteration,
            candidates=[_without_held_out(c) for c in self.store.candidates()],
            proposals=self.settings.search.proposals_per_iteration(),
            budget=self.spending.left(),
            run_dir=self.store.path,
            graph=self.store.program_graph(),
            predicting=Meter(allowance if predictions else Budget(0, 0, 0)),
            predictions=predictions,
            replay=self.replay,
            model_free=self.model_free,
        )

    def _realise(self, entry: PlanEntry, iteration: int) -> None:
        """Check and commit one planned candidate: implemented (to be scored by the staged evaluation), or failed."""
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
        if candidate.parent is not None and not self.store.has(candidate.parent):
            unknown, candidate.parent = candidate.parent, None  # committed on the root so the proposer sees the mistake
            self._fail(candidate, f"parent '{unknown}' is not a candidate of this run (known: {self._known_ids()})")
            return
        harness = self.store.work_file(candidate.id, candidate.source)
        before = self.spent()
        error = self.evaluator.check(harness)
        self._log_check_spend(iteration, before)
        if error:
            self._fail(candidate, error)
            return
        self._commit(candidate)

    def _log_check_spend(self, iteration: int, before: dict[str, float]) -> None:
        """Log what a check cost, when its harness called the model while loading (one example-evaluation)."""
        after = self.spent()
        tokens = float(after.get("tokens", 0)) - float(before.get("tokens", 0))
        usd = float(after.get("usd", 0.0)) - float(before.get("usd", 0.0))
        if tokens > 0 or usd > 0:
            self.store.log(PhaseSpendLine(iteration, "check", Spend(1.0, tokens, usd)))

    def _free_evidence(self, iteration: int, proposals: list[str]) -> None:
        """Score what can be scored for free before any policy decides: each new candidate not scored yet, with no
        model call when its outputs do not depend on the model's answers (its whole share), else on the recorded
        calls it repeats (a rerun after a kill does what is left)."""
        if self.model_free is not None:
            self.model_free.learn(self._recorded_responses())
        for cid in proposals:
            self._check_stop()
            by_id = {c.id: c for c in self.store.candidates()}
            candidate = by_id.get(cid)
            if candidate is None or candidate.failed or candidate.evaluated:
                continue
            if not self._model_free_evidence(candidate, iteration):
                self._replay_evidence(candidate, iteration)

    def _recorded_responses(self) -> list[str]:
        """The task model's responses in the run's traces, in candidate order (forms of answer the harnesses were
        written to read: what the model-free check's stand-ins answer with)."""
        out: list[str] = []
        for c in self.store.candidates():
            if c.trace is None or c.evaluation is None or c.evaluation.model_free:
                continue
            for record in read_jsonl(self.store.path / c.trace):
                calls = record.get("calls")
                for call in calls if isinstance(calls, list) else []:
                    if isinstance(call, dict) and isinstance(call.get("response"), str):
                        out.append(call["response"])
        return out

    def _model_free_evidence(self, candidate: Candidate, iteration: int) -> bool:
        """Record, with no model call, the candidate's search examples whose outputs do not depend on the model's
        answers (``metaharness.search.model_free``): True when that is all of them (it is model-free)."""
        if self.model_free is None:
            return False
        found = self.model_free(candidate.source, list(self.order.search))
        checks = self._checks.setdefault(iteration, FreeChecks())
        self._checks[iteration] = checks.add(found.seconds, found.runs, found.model_free)
        if found.evaluation is None or found.trace is None:
            return False
        crash_point("candidate:evaluated")
        what = "model-free" if found.model_free else "their outputs ignore the model's answers"
        self.events.candidate_started(
            candidate.id, f"val +{found.evaluation.examples} ({what}: no model call)", candidate.summary
        )
        part = self.store.trace_path(candidate.id, "val").with_name(f"{candidate.id}.val.part.jsonl")
        atomic_write_text(part, found.trace.read_text(encoding="utf-8"))
        self._record(candidate, found.evaluation, part, iteration)
        self._model_free[candidate.id] = found.evaluation.examples
        return found.model_free

    def _replay_evidence(self, candidate: Candidate, iteration: int) -> None:
        """Record, at no cost, the candidate's scores on the search examples its nearest evaluated ancestor was
        scored on, and it is not yet, wherever every call it makes there is one the run already made (the module
        docstring)."""
        if self.replay is None:
            return
        by_id = {c.id: c for c in self.store.candidates()}
        candidate = by_id.get(candidate.id, candidate)
        base = evaluated_ancestor(candidate, by_id)
        if base is None or base.evaluation is None:
            return
        search = set(self.order.search)
        scored = set(candidate.evaluation.example_ids) if candidate.evaluation else set()
        ids = [i for i in base.evaluation.example_ids if i in search and i not in scored]
        replay = self.replay(candidate.source, ids)
        if replay.evaluation is None or replay.trace is None:
            return
        self.events.candidate_started(candidate.id, f"val +{replay.evaluation.examples} (replayed)", candidate.summary)
        part = self.store.trace_path(candidate.id, "val").with_name(f"{candidate.id}.val.part.jsonl")
        atomic_write_text(part, replay.trace.read_text(encoding="utf-8"))
        self._record(candidate, dataclasses.replace(replay.evaluation), part, iteration)
        self._replayed[candidate.id] = replay.evaluation.examples

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
            progress=self._progress,
        )

    def _write_summary(self) -> None:
        if self.write_summary is not None:
            self.write_summary()


def evaluated_ancestor(candidate: Candidate, by_id: Mapping[str, Candidate]) -> Candidate | None:
    """The nearest ancestor of ``candidate`` scored on validation examples (its prediction's base first): whose
    recorded calls its replay reuses (also what `benchmarks/replay_study.py` replays from)."""
    seen: set[str] = set()
    base = candidate.prediction.base if candidate.prediction is not None else None
    cid = base if base in by_id else candidate.parent
    while cid is not None and cid in by_id and cid not in seen:
        seen.add(cid)
        if by_id[cid].evaluated:
            return by_id[cid]
        cid = by_id[cid].parent
    return None


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
