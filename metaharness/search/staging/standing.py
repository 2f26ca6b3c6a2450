"""What a policy decides from (`Standing`): every candidate that can still be scored, as an allocation `Arm`, with
its posterior gain over the reference (its prior from `prior_of`, updated by its paired evidence) and what each
further stage is predicted to cost (`per_example_costs`: what will not be answered by calls the run already made).
Candidates whose outputs were identical on every example both were scored on are one arm (`Standing.merged`):
evaluating two copies of one behaviour buys nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from metaharness.budget import Budget, Spend
from metaharness.candidate import Candidate, Prediction
from metaharness.search.staging.arms import Arm, Option, posterior, stages
from metaharness.search.staging.calibration import DEFAULT_NOISE, Calibration, prior_of
from metaharness.search.staging.evidence import evaluated_ancestor, paired, reference, sample_variance, scores_of
from metaharness.search.staging.order import ExampleOrder

# Identical outputs on at least this many examples (both scored) make two candidates one arm: were they to differ on
# a quarter of the examples or more, 11 would show a difference with probability 1 - 0.75^11 > 0.95. (At 3, as
# before, two candidates that differ on every fourth example were merged 42% of the time, and one merged into a
# supported candidate was never scored again: a recorded run's best was lost so.)
MERGE_EXAMPLES = 11


def per_example_costs(
    candidate: Candidate, by_id: Mapping[str, Candidate], order: ExampleOrder, fallback: Spend
) -> dict[str, Spend]:
    """What scoring each search example is predicted to cost: the prediction's ``tokens_per_example`` and
    ``usd_per_example`` (else the nearest evaluated ancestor's measured cost per example, else ``fallback``), times
    ``1 - repeat`` on the examples its base was scored on (its calls there repeat calls the run made: free)."""
    prediction = candidate.prediction or Prediction()
    base = evaluated_ancestor(candidate, by_id)
    measured = fallback
    if base is not None and base.evaluation is not None and base.evaluation.examples:
        ev = base.evaluation
        tokens = ev.cost.get("input_tokens", 0.0) + ev.cost.get("output_tokens", 0.0)
        charged = max(1.0, ev.cost.get("charged_examples", float(ev.examples)))
        measured = Spend(1.0, tokens / ev.examples, ev.cost.get("usd", 0.0) / charged)
    tokens = prediction.tokens_per_example if prediction.tokens_per_example is not None else measured.tokens
    usd = prediction.usd_per_example if prediction.usd_per_example is not None else measured.usd
    repeat = prediction.repeat if prediction.repeat is not None else 0.0
    new = Spend(1.0, float(tokens), float(usd))
    repeats = set(scores_of(base)) if base is not None else set()
    factor = 1.0 - min(1.0, max(0.0, float(repeat)))
    return {i: new.scaled(factor) if i in repeats else new for i in order.search}


@dataclass
class Standing:
    """What a policy decides from: the run's candidates now, its example order, what this iteration may still
    spend (``left``: its budget less what it spent, within what the run's budget leaves), the iteration's proposals
    (in the order written), the ladder's first stage, and, when known, each candidate's ``outputs`` (candidate id
    -> example id -> output, e.g. from `trace_outputs`; what merges alike candidates). ``arms`` are the candidates
    that can still be scored (one per class of alike candidates); ``merged`` maps each class's arm (or the
    supported candidate that stands for it) to the candidates merged into it."""

    candidates: list[Candidate]
    order: ExampleOrder
    left: Budget
    iteration: int
    proposals: list[str]
    first_stage: int | None = None
    fallback_cost: Spend = field(default_factory=lambda: Spend(1.0, 0.0, 0.0))
    outputs: Mapping[str, Mapping[str, str]] | None = None

    def __post_init__(self) -> None:
        self.by_id = {c.id: c for c in self.candidates}
        self.reference = reference(self.candidates)
        self.calibration = Calibration.of(self.candidates)
        self.costs: dict[str, dict[str, Spend]] = {}
        self.merged = self._classes()
        self.arms = self._arms()

    def blind(self) -> Standing:
        """This standing with every candidate's prediction removed (what a policy that reads none decides from)."""
        return self._blind

    @cached_property
    def _blind(self) -> Standing:
        if all(c.prediction is None for c in self.candidates):
            return self
        stripped = [dataclasses.replace(c, prediction=None) for c in self.candidates]
        return Standing(
            stripped,
            self.order,
            self.left,
            self.iteration,
            self.proposals,
            self.first_stage,
            self.fallback_cost,
            self.outputs,
        )

    def unmerged(self) -> Standing:
        """This standing with no candidate merged into another and none expected to score as a twin (every
        unsupported candidate an arm): what a rule that scores every candidate in full decides from."""
        return self._unmerged

    @cached_property
    def _unmerged(self) -> Standing:
        if not self.outputs:
            return self
        return Standing(
            self.candidates, self.order, self.left, self.iteration, self.proposals, self.first_stage, self.fallback_cost
        )

    @property
    def spent(self) -> Spend:
        """What this iteration's evaluation has spent so far (the candidates' recorded stages of it)."""
        total = Spend()
        for c in self.candidates:
            for increment in c.evaluation.increments if c.evaluation else []:
                if increment.iteration == self.iteration:
                    total = total + increment.spend
        return total

    def _classes(self) -> dict[str, list[str]]:
        """Candidates whose outputs agree on every example both were scored on (at least ``MERGE_EXAMPLES``, or the
        whole share when it is smaller): class representative -> the others. A class with a supported candidate is
        represented by it (its other members need no evaluation); otherwise by the member with the most examples
        (ties: the earlier)."""
        if not self.outputs:
            return {}
        need = min(MERGE_EXAMPLES, self.order.share)
        members = [c for c in self.candidates if not c.failed and c.evaluated and c.id in self.outputs]
        parent = {c.id: c.id for c in members}

        def root(cid: str) -> str:
            while parent[cid] != cid:
                parent[cid] = parent[parent[cid]]
                cid = parent[cid]
            return cid

        for k, a in enumerate(members):
            mine = self.outputs[a.id]
            for b in members[k + 1 :]:
                theirs = self.outputs[b.id]
                common = [i for i in mine if i in theirs]
                if len(common) >= need and all(mine[i] == theirs[i] for i in common):
                    parent[root(b.id)] = root(a.id)
        groups: dict[str, list[Candidate]] = {}
        for c in members:
            groups.setdefault(root(c.id), []).append(c)
        out = {}
        for group in groups.values():
            if len(group) < 2 or all(c.supported for c in group):
                continue
            head = max(group, key=lambda c: (c.supported, c.evaluation.examples if c.evaluation else 0, -_at(c)))
            out[head.id] = [c.id for c in group if c.id != head.id and not c.supported]
        return {k: v for k, v in out.items() if v}

    def _arms(self) -> list[Arm]:
        """Every implemented or partly scored candidate not merged into another, as an allocation arm; a candidate
        with a `twin` is expected to score what its twin scored (its prediction, made before its outputs were
        known, no longer counts)."""
        ref = self.reference
        ref_score = ref.score if ref is not None else 0.0
        hidden = {cid for members in self.merged.values() for cid in members}
        pool = [c for c in self.candidates if not c.failed and not c.supported and c.id not in hidden]
        evidence = {c.id: self._evidence(c) for c in pool}
        noises = [sample_variance(d) for d in evidence.values() if len(d) > 1]
        noise_prior = max(DEFAULT_NOISE / 4, sum(noises) / len(noises)) if noises else DEFAULT_NOISE
        arms = []
        for c in pool:
            mean, sd = prior_of(c, self.by_id, self.calibration)
            if (twin := self.twin(c.id)) is not None:  # it behaved as the twin wherever it was scored
                mean = self.by_id[twin].score
            diffs = evidence[c.id]
            gain, variance, noise = posterior(mean - ref_score, sd**2, diffs, noise_prior=noise_prior)
            scored = c.evaluation.example_ids if c.evaluated and c.evaluation else []
            costs = per_example_costs(c, self.by_id, self.order, self.fallback_cost)
            self.costs[c.id] = costs
            predicted = c.prediction.score if c.prediction is not None else None
            arms.append(
                Arm(
                    c.id,
                    gain,
                    variance,
                    noise,
                    len(scored),
                    self.order.share,
                    self._options(scored, costs),
                    predicted=float(predicted) if predicted is not None else mean,
                    paired=tuple(diffs),
                    fresh=c.id in self.proposals,
                )
            )
        return arms

    def _evidence(self, candidate: Candidate) -> list[float]:
        """Its paired differences over the reference (its own scores when there is none: a reference of 0)."""
        if not candidate.evaluated:
            return []
        if self.reference is None:
            return list(scores_of(candidate).values())
        return paired(candidate, self.reference)

    def _options(self, scored: Sequence[str], costs: Mapping[str, Spend]) -> tuple[Option, ...]:
        done = len(scored)
        return tuple(
            Option(t, self._cost(scored, costs, t)) for t in stages(self.order.share, self.first_stage) if t > done
        )

    def _cost(self, scored: Sequence[str], costs: Mapping[str, Spend], target: int) -> Spend:
        total = Spend()
        for i in self.order.next_ids(scored, max(0, target - len(scored))):
            total = total + costs[i]
        return total

    @cached_property
    def child_lift(self) -> float:
        """What a supported candidate's free children were worth in this run: over the supported candidates with
        a supported child scored entirely for free (its stages are recorded and none charged anything: its calls
        repeat its parent's, as a post-processing revision's do), the mean of the best such child's score over
        its parent's, a loss counted as 0; 0 when there is none. The worth of completing a candidate that its
        solver misses: once supported, it is a parent whose free children come at no cost."""
        best: dict[str, float] = {}
        for child in self.candidates:
            parent = self.by_id.get(child.parent) if child.parent is not None else None
            if parent is None or not parent.supported or not child.supported or child.evaluation is None:
                continue
            increments = child.evaluation.increments
            if not increments or any(increment.spend.evals > 0 for increment in increments):
                continue
            best[parent.id] = max(best.get(parent.id, 0.0), child.score - parent.score)
        return sum(max(0.0, gain) for gain in best.values()) / len(best) if best else 0.0

    def twin(self, cid: str) -> str | None:
        """A supported candidate whose outputs equal ``cid``'s on every example ``cid`` was scored on (None when
        there is none, or ``cid`` has no scored example with a known output): a candidate it can differ from only on
        its unscored examples."""
        mine = (self.outputs or {}).get(cid) or {}
        if not mine:
            return None
        for other in self.candidates:
            theirs = (self.outputs or {}).get(other.id) or {}
            if other.id != cid and other.supported and all(theirs.get(i) == o for i, o in mine.items()):
                return other.id
        return None

    def arm(self, cid: str) -> Arm:
        return next(a for a in self.arms if a.id == cid)

    def next_stage(self, cid: str) -> int | None:
        """The candidate's next stage of the ladder (None when it is supported)."""
        arm = self.arm(cid)
        return arm.options[0].target if arm.options else None

    def cost_to(self, cid: str, target: int) -> Spend:
        """The predicted cost of taking the candidate to ``target`` examples (the next ones of the order)."""
        candidate = self.by_id[cid]
        scored = candidate.evaluation.example_ids if candidate.evaluation else []
        if cid not in self.costs:  # merged into another here, so no arm of this standing (an unmerged view's)
            self.costs[cid] = per_example_costs(candidate, self.by_id, self.order, self.fallback_cost)
        return self._cost(scored, self.costs[cid], target)

    def leader(self) -> str | None:
        """The partly scored candidate the return rule would favour if it were completed: the highest expected raw
        gain at completion (`Arm.rank`) among those whose posterior mean is above the reference, when it is above
        the reference's."""
        scored = [a for a in self.arms if a.returnable and a.rank > 0]
        if not scored:
            return None
        return max(scored, key=lambda a: (a.rank, -self.candidates.index(self.by_id[a.id]))).id


def _at(candidate: Candidate) -> int:
    """A candidate's number (``c012`` -> 12): the order candidates were planned in."""
    digits = "".join(ch for ch in candidate.id if ch.isdigit())
    return int(digits) if digits else 0
