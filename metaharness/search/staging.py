"""Staged evaluation: each round of an iteration, which candidates get how many more validation examples.

The loop commits every proposal as soon as it passes its check, unscored, and then asks a ``Policy`` round
after round which candidates to score on more examples, until the policy has nothing more worth doing or the
iteration's budget (``SearchBudget``) is spent. The validation examples are taken in one
seeded order for the whole run (``ExampleOrder``), so two candidates' first examples are the same examples and
every comparison is paired; the order's tail can be held out of the search and used only to judge.

What a policy reads (``Standing``): every candidate that can still be scored (implemented, or partly scored)
as an ``Arm``: its posterior gain over the *reference* (the supported
candidate with the highest score), from its prediction as the prior (``prior_of``) and its paired evidence,
and what each further stage is predicted to cost (``per_example_costs``: what will not be answered by calls
the run already made). Policies (``POLICIES``):

- ``planner``: the TPS planner's allocation (``metaharness.planner.allocation.allocate``). The leader (the
  candidate with the highest posterior mean, when it is partly scored) is first taken to its next stage, so the
  candidate the run would return is brought to support; then the solver chooses, within the budget and keeping
  the reserve to complete what it leaves partial, which candidates go to which stage, and every chosen candidate
  gets its next stage now (the rest of its plan is re-decided with the evidence it brings). Losers stop early;
  evaluating nothing is a valid answer.
- ``greedy``: the best predicted candidates, each to its whole share, while they fit (any iteration's).
- ``best-of-n``: the iteration's proposals in the order they were written, each to its whole share, while they fit
  (the paper's best-of-N: the first N proposals, all fully evaluated).
- ``halving``: successive halving over the iteration's proposals from their measured scores alone (no prediction).
- ``gate``: GEPA's acceptance gate: each proposal is scored on a few examples (``GATE_EXAMPLES``) against its
  parent on the same examples, and fully evaluated only if it scores higher there.
- ``all``: every candidate to its whole share (the seeds).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from metaharness.budget import Budget, Spend
from metaharness.candidate import Candidate, Prediction
from metaharness.errors import InputError
from metaharness.planner.allocation import Allocation, Arm, Option, allocate, posterior, stages

Policy = Literal["planner", "greedy", "best-of-n", "halving", "gate", "all"]
POLICIES: tuple[Policy, ...] = get_args(Policy)
GATE_EXAMPLES = 3  # GEPA's default reflection minibatch
DEFAULT_PRIOR_SD = 0.1  # the spread of a revision's gain when nothing better is known (no prediction, few data)
MIN_PRIOR_SD = 0.02  # no prediction is believed to within less than 2 points of score
# Verified predictions (supported candidates that carried one) before the run's measure of the proposer's stds
# replaces the stds it reported.
CALIBRATION_PAIRS = 5
DEFAULT_NOISE = 0.2  # per-example variance of paired differences before any is measured (1 in 5 examples differ)


@dataclass(frozen=True)
class ExampleOrder:
    """The run's validation examples in one seeded order: the search's ``share`` first, then ``holdout``, examples
    the search never scores (used only to judge the returned candidates)."""

    search: tuple[str, ...]
    holdout: tuple[str, ...] = ()

    @classmethod
    def of(cls, ids: Sequence[str], *, seed: int, holdout: int = 0) -> ExampleOrder:
        """``ids`` (the evaluator's validation ids, in split order) shuffled with ``seed``; the last ``holdout``
        are held out. InputError when fewer than one example would be left to search."""
        if holdout < 0:
            raise InputError(f"--holdout must be >= 0, got {holdout}.")
        if len(ids) - holdout < 1:
            raise InputError(
                f"--holdout {holdout} leaves no validation example to search ({len(ids)} in all): hold out fewer."
            )
        order = list(ids)
        random.Random(f"example-order:{seed}").shuffle(order)
        cut = len(order) - holdout
        return cls(tuple(order[:cut]), tuple(order[cut:]))

    @property
    def share(self) -> int:
        return len(self.search)

    def next_ids(self, scored: Sequence[str], count: int) -> list[str]:
        """The first ``count`` search examples not in ``scored``, in order."""
        done = set(scored)
        return [i for i in self.search if i not in done][:count]


def reference(candidates: Sequence[Candidate]) -> Candidate | None:
    """The supported candidate with the highest score (ties: the earlier): what gains are measured against."""
    supported = [c for c in candidates if c.supported]
    return max(supported, key=lambda c: c.score) if supported else None


def _scores(candidate: Candidate) -> dict[str, float]:
    ev = candidate.evaluation
    return dict(zip(ev.example_ids, ev.example_scores, strict=False)) if ev else {}


def paired(candidate: Candidate, ref: Candidate) -> list[float]:
    """The candidate's score minus the reference's on every example both scored, in the candidate's order."""
    ref_scores = _scores(ref)
    return [s - ref_scores[i] for i, s in _scores(candidate).items() if i in ref_scores]


def _ancestor(candidate: Candidate, by_id: Mapping[str, Candidate], *, supported: bool) -> Candidate | None:
    """The nearest ancestor (the candidate itself excluded) that is evaluated (supported, when asked)."""
    seen: set[str] = set()
    base = candidate.prediction.base if candidate.prediction is not None else None
    cid = base if base else candidate.parent
    while cid is not None and cid in by_id and cid not in seen:
        seen.add(cid)
        found = by_id[cid]
        if found.supported or (found.evaluated and not supported):
            return found
        cid = found.parent
    return None


@dataclass(frozen=True)
class Calibration:
    """How far the run's predictions held (empirical Bayes over the supported candidates that carried one):
    ``spread`` is the sd of true score around a prediction, ``gain_spread`` that of a child's score around its
    parent's (for candidates without a prediction), and ``std_scale`` how far the stds the proposer reported
    were off (the misses beyond sampling noise over the reported variances; ``None`` until
    ``CALIBRATION_PAIRS`` predictions were verified). A proposer's stds can be far too wide or too narrow;
    once the run has checked enough of them, the run's own measure replaces the proposer's word."""

    spread: float = DEFAULT_PRIOR_SD
    gain_spread: float = DEFAULT_PRIOR_SD
    pairs: int = 0
    std_scale: float | None = None

    @classmethod
    def of(cls, candidates: Sequence[Candidate]) -> Calibration:
        by_id = {c.id: c for c in candidates}
        residuals, sampling, gains = [], [], []
        with_std: list[tuple[float, float, float]] = []  # (squared miss, sampling noise, reported variance)
        for c in candidates:
            if not c.supported or c.evaluation is None:
                continue
            n = max(1, c.evaluation.examples)
            noise = c.score * (1 - c.score) / n
            prediction = c.prediction or Prediction()
            if prediction.score is not None:
                residuals.append((c.score - float(prediction.score)) ** 2)
                sampling.append(noise)
                if prediction.std is not None and prediction.std > 0:
                    with_std.append((residuals[-1], noise, float(prediction.std) ** 2))
            parent = _ancestor(c, by_id, supported=True)
            if parent is not None:
                gains.append((c.score - parent.score) ** 2)
        spread = DEFAULT_PRIOR_SD
        if len(residuals) >= 3:  # method of moments: what the residuals hold beyond sampling noise
            spread = math.sqrt(max(0.0, sum(residuals) / len(residuals) - sum(sampling) / len(sampling)))
        scale = None
        if len(with_std) >= CALIBRATION_PAIRS:  # the same moments over the predictions that reported a std
            miss, noise_sum, reported = (sum(column) for column in zip(*with_std, strict=True))
            scale = math.sqrt(max(0.0, miss - noise_sum) / reported)
        gain_spread = math.sqrt(sum(gains) / len(gains)) if len(gains) >= 3 else DEFAULT_PRIOR_SD
        return cls(max(MIN_PRIOR_SD, spread), max(MIN_PRIOR_SD, gain_spread), len(residuals), scale)

    def to_json(self) -> dict[str, float | None]:
        scale = None if self.std_scale is None else round(self.std_scale, 4)
        return {
            "spread": round(self.spread, 4),
            "gain_spread": round(self.gain_spread, 4),
            "pairs": self.pairs,
            "std_scale": scale,
        }


def prior_of(candidate: Candidate, by_id: Mapping[str, Candidate], calibration: Calibration) -> tuple[float, float]:
    """(mean, sd) of the candidate's score before its own evidence: its prediction, else its nearest evaluated
    ancestor's score with the spread of the run's revisions.

    A prediction's sd is its reported std rescaled by how far the run's verified predictions say the reported stds
    are off (``calibration.std_scale``); before enough were verified, at least what the run's predictions missed
    by. Never below ``MIN_PRIOR_SD``."""
    prediction = candidate.prediction or Prediction()
    score = prediction.score
    if score is not None:
        sd = float(prediction.std) if prediction.std is not None else 0.0
        if calibration.std_scale is not None and sd > 0:
            return float(score), max(MIN_PRIOR_SD, calibration.std_scale * sd)
        return float(score), max(sd, calibration.spread)
    parent = _ancestor(candidate, by_id, supported=False)
    return (parent.score if parent is not None else 0.0), calibration.gain_spread


def per_example_costs(
    candidate: Candidate, by_id: Mapping[str, Candidate], order: ExampleOrder, fallback: Spend
) -> dict[str, Spend]:
    """What scoring each search example is predicted to cost: the prediction's ``tokens_per_example`` and
    ``usd_per_example`` (else the nearest evaluated ancestor's measured cost per example, else ``fallback``), times
    ``1 - repeat`` on the examples its base was scored on (its calls there repeat calls the run made: free)."""
    prediction = candidate.prediction or Prediction()
    base = _ancestor(candidate, by_id, supported=False)
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
    repeats = set(_scores(base)) if base is not None else set()
    factor = 1.0 - min(1.0, max(0.0, float(repeat)))
    return {i: new.scaled(factor) if i in repeats else new for i in order.search}


@dataclass
class Standing:
    """What a policy decides from: the run's candidates now, its example order, the budget left for this
    iteration, the iteration's proposals (in the order written) and the arms of every candidate that can still
    be scored."""

    candidates: list[Candidate]
    order: ExampleOrder
    budget: Budget
    iteration: int
    proposals: list[str]
    first_stage: int | None = None
    fallback_cost: Spend = field(default_factory=lambda: Spend(1.0, 0.0, 0.0))

    def __post_init__(self) -> None:
        self.by_id = {c.id: c for c in self.candidates}
        self.reference = reference(self.candidates)
        self.calibration = Calibration.of(self.candidates)
        self.costs: dict[str, dict[str, Spend]] = {}
        self.arms = self._arms()

    def _arms(self) -> list[Arm]:
        """Every implemented or partly scored candidate, as an allocation arm."""
        ref = self.reference
        ref_score = ref.score if ref is not None else 0.0
        pool = [c for c in self.candidates if not c.failed and not c.supported]
        noises = [
            _variance(paired(c, ref)) for c in pool if ref is not None and c.evaluated and len(paired(c, ref)) > 1
        ]
        noise_prior = max(DEFAULT_NOISE / 4, sum(noises) / len(noises)) if noises else DEFAULT_NOISE
        arms = []
        for c in pool:
            mean, sd = prior_of(c, self.by_id, self.calibration)
            diffs = paired(c, ref) if ref is not None and c.evaluated else []
            gain, variance, noise = posterior(mean - ref_score, sd**2, diffs, noise_prior=noise_prior)
            scored = c.evaluation.example_ids if c.evaluated and c.evaluation else []
            costs = per_example_costs(c, self.by_id, self.order, self.fallback_cost)
            self.costs[c.id] = costs
            arms.append(
                Arm(
                    c.id,
                    gain,
                    variance,
                    noise,
                    len(scored),
                    self.order.share,
                    self._options(scored, costs),
                    predicted=mean,
                    paired=tuple(diffs),
                    fresh=c.id in self.proposals,
                )
            )
        return arms

    def _options(self, scored: Sequence[str], costs: Mapping[str, Spend]) -> tuple[Option, ...]:
        options, total = [], Spend()
        upcoming = self.order.next_ids(scored, self.order.share)
        done = len(scored)
        for target in stages(self.order.share, self.first_stage):
            if target <= done:
                continue
            for i in upcoming[: target - done]:
                total = total + costs[i]
            upcoming, done = upcoming[target - done :], target
            options.append(Option(target, total))
        return tuple(options)

    def arm(self, cid: str) -> Arm:
        return next(a for a in self.arms if a.id == cid)

    def next_stage(self, cid: str) -> int | None:
        """The candidate's next stage of the ladder (None when it is supported)."""
        arm = self.arm(cid)
        return arm.options[0].target if arm.options else None

    def cost_to(self, cid: str, target: int) -> Spend:
        arm = self.arm(cid)
        return next((o.cost for o in arm.options if o.target == target), Spend())

    def leader(self) -> str | None:
        """The partly scored candidate with the highest posterior mean, when it is above the reference."""
        scored = [a for a in self.arms if a.examples > 0 and a.mean > 0]
        return max(scored, key=lambda a: (a.mean, -self.candidates.index(self.by_id[a.id]))).id if scored else None


def _variance(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


@dataclass
class Round:
    """One round's decision: the targets to reach now (``steps``, candidate id -> examples; the examples are the
    next ones of the order, or ``ids[candidate]`` when given), why (``rule``), the solver's full answer when there
    was one, and the predicted cost of the steps."""

    steps: dict[str, int]
    rule: str
    predicted: Spend
    allocation: Allocation | None = None
    ids: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"steps": dict(self.steps), "rule": self.rule, "predicted": self.predicted.to_json()}
        if self.ids:
            out["ids"] = {k: list(v) for k, v in self.ids.items()}
        if self.allocation is not None:
            out["allocation"] = self.allocation.to_json()
        return out


def decide(standing: Standing, policy: Policy, *, solver: str = "auto") -> Round:
    """The next round of ``policy`` (module docstring); ``Round.steps`` empty when the iteration's evaluation is
    done. Every step fits what is left of the budget, by its predicted cost."""
    if policy not in POLICIES:
        raise InputError(f"Unknown evaluation policy {policy!r}; use one of {', '.join(POLICIES)}.")
    if policy == "planner":
        return _planner(standing, solver)
    if policy == "all":
        return _in_order(standing, [a.id for a in standing.arms], "all")
    if policy == "best-of-n":
        return _in_order(standing, [cid for cid in standing.proposals if _open(standing, cid)], "best-of-n")
    if policy == "gate":
        return _gate(standing)
    plan = allocate(standing.arms, standing.budget, solver="greedy" if policy == "greedy" else "halving")
    return Round(dict(plan.targets), policy, plan.cost, plan)


def _open(standing: Standing, cid: str) -> bool:
    return any(a.id == cid and a.options for a in standing.arms)


def _in_order(standing: Standing, ids: Sequence[str], rule: str) -> Round:
    """Each of ``ids`` in turn to its whole share, while it fits; stops at the first that does not."""
    steps, spent = {}, Spend()
    for cid in ids:
        arm = standing.arm(cid)
        if not arm.options:
            continue
        full = arm.options[-1]
        if not standing.budget.allows(spent + full.cost):
            break
        steps[cid], spent = full.target, spent + full.cost
    return Round(steps, rule, spent)


def _planner(standing: Standing, solver: str) -> Round:
    leader = standing.leader()
    if leader is not None:
        target = standing.next_stage(leader)
        if target is not None and standing.budget.allows(standing.cost_to(leader, target)):
            return Round({leader: target}, "leader", standing.cost_to(leader, target))
    plan = allocate(standing.arms, standing.budget, solver=solver)  # type: ignore[arg-type]
    steps = {}
    for cid in plan.targets:
        stage = standing.next_stage(cid)
        if stage is not None:
            steps[cid] = stage
    predicted = Spend()
    for cid, target in steps.items():
        predicted = predicted + standing.cost_to(cid, target)
    return Round(steps, "solver", predicted, plan)


def _gate(standing: Standing) -> Round:
    """GEPA's gate, one proposal at a time in the order written: score it on the iteration's minibatch (the
    ``GATE_EXAMPLES`` search examples at a window that moves on each iteration, as GEPA draws a new minibatch),
    then fully if it beats its nearest supported ancestor on those same examples."""
    share = standing.order.share
    size = min(GATE_EXAMPLES, share)
    start = (size * max(0, standing.iteration - 1)) % share
    batch = [standing.order.search[(start + k) % share] for k in range(size)]
    for cid in standing.proposals:
        if not _open(standing, cid):
            continue
        candidate = standing.by_id[cid]
        mine = _scores(candidate)
        todo = [i for i in batch if i not in mine]
        if todo:
            cost = Spend()
            for i in todo:
                cost = cost + standing.costs[cid][i]
            if not standing.budget.allows(cost):
                return Round({}, "gate", Spend())
            return Round({cid: len(mine) + len(todo)}, "gate", cost, ids={cid: todo})
        parent = _ancestor(candidate, standing.by_id, supported=True)
        theirs = _scores(parent) if parent is not None else {}
        wins = parent is None or sum(mine[i] for i in batch) > sum(theirs.get(i, 0.0) for i in batch)
        if len(mine) == size and wins:
            full = standing.arm(cid).options[-1]
            total = Spend()
            for i in standing.order.next_ids(list(mine), share):
                total = total + standing.costs[cid][i]
            if standing.budget.allows(total):
                return Round({cid: full.target}, "gate", total)
            return Round({}, "gate", Spend())
    return Round({}, "gate", Spend())


def alternatives(standing: Standing) -> dict[str, dict[str, int]]:
    """What the baselines would do in this standing (for the iteration's record)."""
    return {
        "greedy": dict(allocate(standing.arms, standing.budget, solver="greedy").targets),
        "halving": dict(allocate(standing.arms, standing.budget, solver="halving").targets),
    }
