"""An iteration's staged evaluation, as the loop runs it (`StagedEvaluation`): round after round, the standing of
the candidates (`metaharness.search.staging.Standing`), the policy's decision (`metaharness.search.staging.decide`),
each chosen stage scored by the evaluator and recorded in the store, its spend counted in the run's
`SpendAccount`; then what the iteration's line records about it (`StagingReport`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from metaharness.budget import Budget, Spend
from metaharness.candidate import EVALUATED, FAILED, Candidate, Evaluation, Increment
from metaharness.evaluation.protocol import CandidateEvaluator, CandidateFailed
from metaharness.search.account import MEASURE, SpendAccount
from metaharness.search.events import LoopEvents
from metaharness.search.settings import SearchSettings
from metaharness.search.staging import ExampleOrder, Standing, alternatives, decide, trace_outputs
from metaharness.search.traces import merge_trace
from metaharness.store.crash import crash_point
from metaharness.store.log import FreeChecks, Identical, StagingReport
from metaharness.store.protocol import RunStore


@dataclasses.dataclass
class FreeFacts:
    """What the free evidence did for an iteration's record: examples scored from recorded calls (``replayed``)
    and with no model call (``model_free``) per candidate, and what the model-free checks cost (``checks``)."""

    replayed: dict[str, int] = dataclasses.field(default_factory=dict)
    model_free: dict[str, int] = dataclasses.field(default_factory=dict)
    checks: FreeChecks = dataclasses.field(default_factory=FreeChecks)


class StagedEvaluation:
    """Scores and records stages of validation examples for the loop: ``store`` keeps them, ``evaluator`` scores
    them, ``order`` says which examples come next, ``account`` counts what they spent, ``left(iteration)`` is what
    the iteration may still spend, ``check_stop`` raises at a safe point when the user asked to stop."""

    def __init__(
        self,
        store: RunStore,
        evaluator: CandidateEvaluator,
        events: LoopEvents,
        order: ExampleOrder,
        search: SearchSettings,
        account: SpendAccount,
        left: Callable[[int], Budget],
        check_stop: Callable[[], None],
    ) -> None:
        self.store, self.evaluator, self.events, self.order = store, evaluator, events, order
        self.search, self.account, self.left, self.check_stop = search, account, left, check_stop

    def standing(self, iteration: int, proposals: list[str]) -> Standing:
        """What the policy decides from now (see ``metaharness.search.staging``)."""
        candidates = self.store.candidates()
        outputs = {
            c.id: trace_outputs(self.store.path / c.trace) for c in candidates if c.evaluated and c.trace is not None
        }
        return Standing(
            candidates,
            self.order,
            self.left(iteration),
            iteration,
            proposals,
            self.search.first_stage,
            outputs=outputs,
        )

    def run(self, iteration: int, proposals: list[str], free: FreeFacts) -> StagingReport:
        """The iteration's rounds of staged evaluation (iteration 0: every seed to its whole share); returns what
        the iteration's line records about them (with ``free``, what the free evidence did before)."""
        policy = "all" if iteration == 0 else self.search.evaluation
        rounds: list[dict[str, object]] = []
        first: Standing | None = None
        predicted = Spend()
        before: dict[str, int] = {}
        while True:
            standing = self.standing(iteration, proposals)
            first = first or standing
            decision = decide(standing, policy, solver=self.search.solver)
            if not decision.steps:
                break
            self.check_stop()
            rounds.append(decision.to_json())
            progressed = False
            for cid in sorted(decision.steps):
                self.check_stop()
                candidate = standing.by_id[cid]
                before.setdefault(cid, candidate.evaluation.examples if candidate.evaluation else 0)
                cost = standing.cost_to(cid, decision.steps[cid])
                if self.score(candidate, decision.steps[cid], iteration, decision.ids.get(cid)):
                    predicted, progressed = predicted + cost, True
            if not progressed:
                self.events.note(f"iteration {iteration}: the {policy} policy chose nothing that could be scored")
                break
        phases = self.account.phases(iteration)
        realised = phases.get(MEASURE, Spend())
        after = {c.id: c.evaluation.examples for c in self.store.candidates() if c.id in before and c.evaluation}
        assert first is not None
        return StagingReport(
            policy=policy,
            considered=[a.id for a in first.arms],
            allotted={cid: (before[cid], after.get(cid, before[cid])) for cid in sorted(before)},
            predicted=predicted,
            realised=realised,
            budget=first.left,
            reference=first.reference.id if first.reference else None,
            calibration=first.calibration.to_json(),
            alternatives=alternatives(first) if iteration > 0 and first.arms else {},
            rounds=rounds,
            spend={**phases, MEASURE: realised},
            replayed=dict(sorted(free.replayed.items())),
            model_free=dict(sorted(free.model_free.items())),
            checks=free.checks,
            identical=self.identical(iteration),
        )

    def identical(self, iteration: int) -> Identical:
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

    def score(self, candidate: Candidate, target: int, iteration: int, ids: list[str] | None) -> bool:
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
            more = self.evaluator.evaluate(harness, "val", trace_path=part, progress=self.progress, examples=ids)
        except CandidateFailed as exc:
            self.record_failure(candidate, str(exc))
            return True
        crash_point("candidate:evaluated")
        self.record(candidate, more, part, iteration)
        return True

    def record(self, candidate: Candidate, more: Evaluation, part: Path, iteration: int) -> None:
        """Record ``more`` (a stage's evaluation, its records in ``part``) as the candidate's next stage, and count
        what it spent."""
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
        self.account.charge(iteration, MEASURE, more.increments[0].spend)

    def record_failure(self, candidate: Candidate, error: str) -> None:
        """A candidate that passed its check but cannot run: recorded failed (its note says why). What its earlier
        stages spent stays spent."""
        failed = dataclasses.replace(candidate, status=FAILED, error=error, evaluation=None)
        self.store.record_failure(failed)
        self.events.candidate_finished(failed)

    def progress(self, done: int, total: int) -> None:
        crash_point("evaluation:example")
        self.events.examples_done(done, total)
