"""Staged evaluation: each round of an iteration, which candidates get how many more validation examples.

The loop commits every proposal as soon as it passes its check, unscored, and then asks a ``Policy`` round
after round which candidates to score on more examples, until the policy has nothing more worth doing or the
iteration's budget (``SearchBudget``) is spent. The validation examples are taken in one
seeded order for the whole run (`ExampleOrder`), so two candidates' first examples are the same examples and
every comparison is paired; the order's tail can be held out of the search and used only to judge.

What a policy reads (`Standing`): every candidate that can still be scored (implemented, or partly scored) as an
`Arm`: its posterior gain over the *reference* (the supported candidate with the highest score), from its
prediction as the prior (`prior_of`, with the run's `Calibration` of its predictions) and its paired evidence,
and what each further stage is predicted to cost (`per_example_costs`: what will not be answered by calls the
run already made). Candidates whose outputs were identical on every example both were scored on (`Standing`'s
``outputs``) are one arm (`Standing.merged`): evaluating two copies of one behaviour buys nothing.

Policies (`POLICIES`); every one keeps the iteration's budget by its predicted costs:

- ``planner``: the TPS planner's allocation (`metaharness.planner.allocation.allocate`), which maximises the
  expected true score of the candidate the run will return (`metaharness.frontier.best`: the highest raw score
  among supported candidates). The leader (the partly scored candidate the return rule would favour, when its
  posterior mean is above the reference) is first taken to its next stage, so what the run would return is brought
  to support; then the solver chooses, within the budget and keeping the reserve to complete what it leaves
  partial, which candidates go to which stage, and every chosen candidate gets its next stage now (the rest of its
  plan is re-decided with the evidence it brings: a rolling horizon). Losers stop early. When the solver wants
  nothing more, what is left of the iteration's budget may go, a stage at a time, to the arm with the highest
  posterior mean that is worth completing and whose completion fits (``fill``): the solver's objective counts only
  the candidate returned after this iteration, not what a supported candidate is worth to the iterations after
  it, chiefly as a parent whose post-processing children are scored free by replaying its calls. The fill prices
  that option by what such free children were worth in this run so far (`Standing.child_lift`) and completes an
  arm only when its posterior mean gain over the reference plus that worth is not below 0; otherwise the budget
  is left unspent. Under a per-run cap that is tighter than the iteration's, the fill spends from the run's too.
- ``greedy``: the best predicted candidates (any iteration's), each to its whole share, while they fit.
- ``threshold``: ``greedy`` over the candidates whose prediction beats the reference's score only.
- ``thompson``: top-two Thompson sampling (Russo, "Simple Bayesian Algorithms for Best-Arm Identification",
  Operations Research 2020; COLT 2016): each round draws gains from the posteriors, measures the arm that wins
  the draw with probability 1/2 and otherwise the one that wins a redraw that the first does not (the next stage of
  it); when what is left no longer pays for a step and the completion of the arm with the best posterior mean,
  that arm is completed. Reads predictions (its priors).
- ``best-of-n``: the iteration's proposals in the order they were written, each to its whole share, while they fit
  (the paper's best-of-N: the first N proposals, all fully evaluated).
- ``halving``: sequential halving (Karnin, Koren and Somekh, "Almost Optimal Exploration in Multi-Armed
  Bandits", ICML 2013; with evidence carried over between rounds as in Jamieson and Talwalkar, "Non-stochastic Best
  Arm Identification and Hyperparameter Optimization", AISTATS 2016) over the iteration's proposals from their
  measured scores alone: the iteration's budget split evenly over ceil(log2 n) rounds, each bringing the survivors
  to a common number of examples and keeping the better half, the last survivor completed (`_halving_schedule`).
- ``gate``: GEPA's acceptance gate: each proposal is scored on a minibatch (``GATE_EXAMPLES``) against its
  parent on the same examples, and fully evaluated only if the sum of its scores is strictly higher there.
- ``all``: every candidate to its whole share (the seeds; a run that records every proposal in full).

The policies in `PREDICTION_FREE` read no prediction: they decide from a `Standing.blind` view in which every
candidate's prediction is removed (costs from measured ancestors), so a proposer serving them need make none.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal, get_args

import numpy as np

from metaharness.budget import Budget, Spend
from metaharness.candidate import Candidate, Prediction
from metaharness.errors import InputError
from metaharness.planner.allocation import (
    MIN_NOISE,
    Allocation,
    AllocationSolver,
    Arm,
    Option,
    allocate,
    posterior,
    shrunk_variance,
    stages,
)
from metaharness.search.model_free import record_outputs
from metaharness.store.files import read_jsonl

Policy = Literal["planner", "greedy", "best-of-n", "halving", "gate", "threshold", "thompson", "all"]
POLICIES: tuple[Policy, ...] = get_args(Policy)
# Policies that read no prediction (`Standing.blind`): a proposer serving them need predict nothing. ("all" reads
# none either, but it is no baseline: a run that records every outcome under it records the predictions too.)
PREDICTION_FREE: frozenset[Policy] = frozenset({"halving", "best-of-n", "gate"})
GATE_EXAMPLES = 3  # GEPA's default reflection minibatch
DEFAULT_PRIOR_SD = 0.1  # the spread of a revision's gain when nothing better is known (no prediction, few data)
MIN_PRIOR_SD = 0.02  # no prediction is believed to within less than 2 points of score
DEFAULT_NOISE = 0.2  # per-example variance of paired differences before any is measured (1 in 5 examples differ)
# The calibration's priors (`_fit_calibration`): the reported stds are right within a factor of about e^(2 x 1.5)
# = 20 either way (95%), and a predicted gain is realised in full, give or take SLOPE_PRIOR_SD.
SCALE_PRIOR_LOG_SD = 1.5
SLOPE_PRIOR_SD = 0.5
# Identical outputs on at least this many examples (both scored) make two candidates one arm: were they to differ on
# a quarter of the examples or more, 11 would show a difference with probability 1 - 0.75^11 > 0.95. (At 3, as
# before, two candidates that differ on every fourth example were merged 42% of the time, and one merged into a
# supported candidate was never scored again: a recorded run's best was lost so.)
MERGE_EXAMPLES = 11
TOP_TWO = 0.5  # top-two Thompson sampling's probability of measuring the draw's winner (Russo's beta)
# Held out of the search by default: 40% of the validation examples (20 of 50), unless there are fewer than 10.
HOLDOUT_SHARE = 0.4
MIN_HOLDOUT_EXAMPLES = 10


@dataclass(frozen=True)
class ExampleOrder:
    """The run's validation examples in one seeded order: the search's ``share`` first, then ``holdout``, examples
    no proposer ever sees in a trace, a score or a workspace: its first third (``confirm``) chooses the candidate the
    run returns among the search's best, the rest (``judge``) scores what it returns, once chosen."""

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

    @classmethod
    def split(
        cls, ids: Sequence[str], *, seed: int, limit: int | None = None, holdout: int | None = None
    ) -> ExampleOrder:
        """A run's order over its task's validation ``ids`` (split order): the search's share is the first ``limit``
        of them (all when None; the order of `of`), and ``holdout`` more are held out: from the examples after the
        first ``limit`` when there are any, else the last of the order. ``holdout`` None: `auto_holdout`."""
        held = auto_holdout(len(ids), limit) if holdout is None else holdout
        if limit is None or limit >= len(ids):
            return cls.of(ids, seed=seed, holdout=held)
        if held < 0:
            raise InputError(f"--holdout must be >= 0, got {held}.")
        if held > len(ids) - limit:
            raise InputError(
                f"--holdout {held} with --val-limit {limit}: only {len(ids) - limit} of the {len(ids)} validation "
                "examples are left outside the search's; hold out fewer or search on fewer."
            )
        search = cls.of(ids[:limit], seed=seed).search
        rest = list(ids[limit:])
        random.Random(f"holdout-order:{seed}").shuffle(rest)
        return cls(search, tuple(rest[:held]))

    @property
    def confirm(self) -> tuple[str, ...]:
        """The held-out examples that choose the returned candidate among the search's best (a third)."""
        return self.holdout[: confirm_size(len(self.holdout))]

    @property
    def judge(self) -> tuple[str, ...]:
        """The held-out examples that score the returned candidate, never used to choose it."""
        return self.holdout[confirm_size(len(self.holdout)) :]

    @property
    def share(self) -> int:
        return len(self.search)

    def next_ids(self, scored: Sequence[str], count: int) -> list[str]:
        """The first ``count`` search examples not in ``scored``, in order."""
        done = set(scored)
        return [i for i in self.search if i not in done][:count]


def auto_holdout(examples: int, limit: int | None = None) -> int:
    """The validation examples a run holds out when none is said: ``HOLDOUT_SHARE`` of them (none with fewer than
    ``MIN_HOLDOUT_EXAMPLES`` in all), at most what the search's ``limit`` leaves."""
    if examples < MIN_HOLDOUT_EXAMPLES:
        return 0
    wanted = round(HOLDOUT_SHARE * examples)
    return min(wanted, examples - limit) if limit is not None and limit < examples else wanted


def confirm_size(holdout: int) -> int:
    """How many of ``holdout`` held-out examples choose the returned candidate: a third (at least one of two)."""
    return max(1, holdout // 3) if holdout >= 2 else 0


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
    """The nearest ancestor (the candidate itself excluded; its prediction's base first) that is evaluated
    (supported, when asked)."""
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


# --- calibration ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Fit:
    """The posterior of one calibration model: scale^2 (``scale2``, its posterior geometric mean), the slope's mean
    and sd, the rows."""

    scale2: float
    slope: float
    slope_sd: float
    rows: int


def _fit_calibration(rows: Sequence[tuple[float, float, float, float]], prior_scale: float) -> _Fit:
    """Bayesian calibration of predictions from paired evidence (a hierarchical Normal model on a grid).

    Each row is ``(measured gain, predicted gain, reported sd, sampling variance)``: the candidate's mean paired
    difference over its base on the examples both scored, the prediction's gain over that base, the sd the proposer
    reported (1 when it reported none) and the paired sampling variance of the measured gain (per-example variance
    of the differences over the examples). The model: measured gain ~ Normal(slope x predicted gain, scale^2 x
    reported sd^2 + sampling variance), with weakly informative priors slope ~ Normal(1, ``SLOPE_PRIOR_SD``^2) and
    log scale ~ Normal(log ``prior_scale``, ``SCALE_PRIOR_LOG_SD``^2). This is the random-effects model of
    meta-analysis with known within-study variances (Gelman et al., Bayesian Data Analysis, 3rd ed., section 5.6),
    with a slope on the predictor. The posterior is evaluated on a grid (slope x log scale^2): exact up to the grid,
    never 0 (the prior keeps mass away from 0 however well a few predictions happened to land, where a moment
    estimate that subtracts noise from squared misses reaches 0), and with no rows it is the prior's centre. The
    scale reported is the posterior geometric mean (the mean of log scale^2, on which the prior is symmetric): with
    a log-normal prior the arithmetic mean would sit far in the tail on a handful of rows."""
    if not rows:
        return _Fit(prior_scale**2, 1.0, SLOPE_PRIOR_SD, 0)
    centre = math.log(prior_scale**2)
    widest = max((measured - predicted) ** 2 / (sd * sd) for measured, predicted, sd, _ in rows)
    top = max(centre + 6 * SCALE_PRIOR_LOG_SD, math.log(max(widest, 1e-12)) + 4.0)
    log_s2 = np.linspace(centre - 6 * SCALE_PRIOR_LOG_SD, top, 321)
    s2 = np.exp(log_s2)
    slopes = np.linspace(1 - 5 * SLOPE_PRIOR_SD, 1 + 5 * SLOPE_PRIOR_SD, 81)
    # log prior on the (slope, log s2) grid: log s2 = 2 log scale ~ Normal(centre, (2 x its sd)^2)
    log_post = (-0.5 * ((log_s2 - centre) / (2 * SCALE_PRIOR_LOG_SD)) ** 2)[None, :] - 0.5 * (
        (slopes - 1) / SLOPE_PRIOR_SD
    )[:, None] ** 2
    for measured, predicted, sd, sampling in rows:
        variance = s2[None, :] * sd * sd + sampling
        miss = measured - slopes[:, None] * predicted
        log_post = log_post - 0.5 * np.log(variance) - 0.5 * miss * miss / variance
    weights = np.exp(log_post - log_post.max())
    weights /= weights.sum()
    slope = float((weights.sum(axis=1) * slopes).sum())
    slope_var = float((weights.sum(axis=1) * (slopes - slope) ** 2).sum())
    scale2 = math.exp(float((weights.sum(axis=0) * log_s2).sum()))  # the geometric mean: where the prior is centred
    return _Fit(scale2, slope, math.sqrt(slope_var), len(rows))


@dataclass(frozen=True)
class Calibration:
    """How far the run's predictions held, from paired evidence (`_fit_calibration`, over every scored candidate
    whose base was scored on some of the same examples): ``std_scale`` rescales the stds the proposer reported,
    ``spread`` is the sd of a true gain around a prediction without a std,
    ``gain_spread`` that of a child's gain over its parent (candidates without a prediction), and ``slope`` how much
    of a predicted gain is realised (posterior mean, sd ``slope_sd``: below 1 when the large predictions miss
    towards their base). ``pairs`` counts the predictions the fit read; a prediction with a std of 0 (exact by
    construction, e.g. measured on recorded calls) is not one. With no evidence every value is its prior
    (``std_scale`` 1: the reported stds are taken at their word)."""

    spread: float = DEFAULT_PRIOR_SD
    gain_spread: float = DEFAULT_PRIOR_SD
    pairs: int = 0
    std_scale: float = 1.0
    slope: float = 1.0
    slope_sd: float = SLOPE_PRIOR_SD
    spread_slope: float = 1.0
    spread_slope_sd: float = SLOPE_PRIOR_SD

    @classmethod
    def of(cls, candidates: Sequence[Candidate]) -> Calibration:
        by_id = {c.id: c for c in candidates}
        evidence = []  # (candidate, base, paired differences)
        for c in candidates:
            base = _ancestor(c, by_id, supported=False) if c.evaluated and not c.failed else None
            if base is None:
                continue
            mine, theirs = _scores(c), _scores(base)
            diffs = [s - theirs[i] for i, s in mine.items() if i in theirs]
            if diffs:
                evidence.append((c, base, diffs))
        variances = [sample_variance(d) for _, _, d in evidence if len(d) > 1]
        pooled = max(MIN_NOISE, sum(variances) / len(variances)) if variances else DEFAULT_NOISE
        scaled, unscaled, gains = [], [], []
        for c, base, diffs in evidence:
            sampling = max(MIN_NOISE, shrunk_variance(diffs, pooled, 5.0)) / len(diffs)
            measured = sum(diffs) / len(diffs)
            prediction = c.prediction or Prediction()
            if prediction.score is None:
                gains.append((measured, 0.0, 1.0, sampling))
                continue
            if prediction.std == 0:  # exact by construction (e.g. measured on recorded calls): says nothing of misses
                continue
            predicted = float(prediction.score) - base.score
            if prediction.std is not None and prediction.std > 0:
                scaled.append((measured, predicted, float(prediction.std), sampling))
            else:
                unscaled.append((measured, predicted, 1.0, sampling))
        scale = _fit_calibration(scaled, 1.0)
        plain = _fit_calibration(unscaled, DEFAULT_PRIOR_SD)
        gain = _fit_calibration(gains, DEFAULT_PRIOR_SD)
        return cls(
            spread=math.sqrt(plain.scale2),
            gain_spread=math.sqrt(gain.scale2),
            pairs=len(scaled) + len(unscaled),
            std_scale=math.sqrt(scale.scale2),
            slope=scale.slope,
            slope_sd=scale.slope_sd,
            spread_slope=plain.slope,
            spread_slope_sd=plain.slope_sd,
        )

    def to_json(self) -> dict[str, float | None]:
        return {
            "spread": round(self.spread, 4),
            "gain_spread": round(self.gain_spread, 4),
            "pairs": self.pairs,
            "std_scale": round(self.std_scale, 4),
            "slope": round(self.slope, 4),
            "slope_sd": round(self.slope_sd, 4),
        }


def prior_of(candidate: Candidate, by_id: Mapping[str, Candidate], calibration: Calibration) -> tuple[float, float]:
    """(mean, sd) of the candidate's score before its own evidence.

    With a prediction: its gain over its base (the prediction's ``base``, else the nearest evaluated ancestor)
    times the calibrated slope, and an sd of its reported std times the calibrated scale (or the calibrated spread
    when it reported none), widened by the slope's uncertainty on that gain; a std of 0 (exact by construction) is
    taken at its word. Without one: its nearest evaluated
    ancestor's score with the calibrated spread of the run's revisions. Never below ``MIN_PRIOR_SD``."""
    prediction = candidate.prediction or Prediction()
    score = prediction.score
    if score is not None:
        base = _ancestor(candidate, by_id, supported=False)
        gain = float(score) - base.score if base is not None else 0.0
        anchor = base.score if base is not None else float(score)
        sd = float(prediction.std) if prediction.std is not None else None
        if sd == 0:  # exact by construction
            return float(score), MIN_PRIOR_SD
        if sd is not None:
            slope, slope_sd, width = calibration.slope, calibration.slope_sd, calibration.std_scale * sd
        else:
            slope, slope_sd, width = calibration.spread_slope, calibration.spread_slope_sd, calibration.spread
        return anchor + slope * gain, max(MIN_PRIOR_SD, math.hypot(width, slope_sd * gain))
    parent = _ancestor(candidate, by_id, supported=False)
    return (parent.score if parent is not None else 0.0), max(MIN_PRIOR_SD, calibration.gain_spread)


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


def trace_outputs(path: Path) -> dict[str, str]:
    """Example id -> the harness's output of every record of a candidate's trace file (`record_outputs`), for
    `Standing`'s ``outputs``; a torn line is skipped."""
    return record_outputs(read_jsonl(path))


@dataclass
class Standing:
    """What a policy decides from: the run's candidates now, its example order, the budget left for this
    iteration, the iteration's proposals (in the order written), the ladder's first stage, and, when known, each
    candidate's ``outputs`` (candidate id -> example id -> output, e.g. from `trace_outputs`; what merges alike
    candidates). ``arms`` are the candidates that can still be scored (one per class of alike candidates);
    ``merged`` maps each class's arm (or the supported candidate that stands for it) to the candidates merged into
    it."""

    candidates: list[Candidate]
    order: ExampleOrder
    budget: Budget
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
            self.budget,
            self.iteration,
            self.proposals,
            self.first_stage,
            self.fallback_cost,
            self.outputs,
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
        """Every implemented or partly scored candidate not merged into another, as an allocation arm."""
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
            return list(_scores(candidate).values())
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


def sample_variance(values: Sequence[float]) -> float:
    """The unbiased sample variance of two or more values."""
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


@dataclass
class Round:
    """One round's decision: the targets to reach now (``steps``, candidate id -> examples; the examples are the
    next ones of the order, or ``ids[candidate]`` when given), why (``rule``), the solver's full answer when there
    was one (its optimality gap, and whether its search was cut short), the predicted cost of the steps, what the
    baselines would have chosen in the same standing (``alternatives``) and the candidates merged into others
    (``merged``)."""

    steps: dict[str, int]
    rule: str
    predicted: Spend
    allocation: Allocation | None = None
    ids: dict[str, list[str]] = field(default_factory=dict)
    alternatives: dict[str, dict[str, int]] = field(default_factory=dict)
    merged: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"steps": dict(self.steps), "rule": self.rule, "predicted": self.predicted.to_json()}
        if self.ids:
            out["ids"] = {k: list(v) for k, v in self.ids.items()}
        if self.allocation is not None:
            out["allocation"] = self.allocation.to_json()
        if self.alternatives:
            out["alternatives"] = {k: dict(v) for k, v in self.alternatives.items()}
        if self.merged:
            out["merged"] = {k: list(v) for k, v in self.merged.items()}
        return out


def decide(standing: Standing, policy: Policy, *, solver: AllocationSolver = "auto", compare: bool = True) -> Round:
    """The next round of ``policy`` (module docstring); ``Round.steps`` empty when the iteration's evaluation is
    done. Every step fits what is left of the budget, by its predicted cost. ``compare``: also record what greedy
    and halving would choose now (``Round.alternatives``)."""
    if policy not in POLICIES:
        raise InputError(f"Unknown evaluation policy {policy!r}; use one of {', '.join(POLICIES)}.")
    view = standing.blind() if policy in PREDICTION_FREE or policy == "all" else standing
    decision = _POLICY[policy](view, solver)
    if compare and policy != "all" and standing.iteration > 0 and standing.arms:
        decision.alternatives = alternatives(standing)
    decision.merged = dict(view.merged)
    return decision


def alternatives(standing: Standing) -> dict[str, dict[str, int]]:
    """What the baselines would do in this standing (for the iteration's record)."""
    return {"greedy": _greedy(standing, "auto").steps, "halving": _halving(standing.blind(), "auto").steps}


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


def _all(standing: Standing, _solver: AllocationSolver) -> Round:
    return _in_order(standing, [a.id for a in standing.arms], "all")


def _best_of_n(standing: Standing, _solver: AllocationSolver) -> Round:
    return _in_order(standing, [cid for cid in standing.proposals if _open(standing, cid)], "best-of-n")


def _greedy(standing: Standing, _solver: AllocationSolver, *, threshold: bool = False) -> Round:
    """The best predicted first (`Arm.predicted`), each to its whole share, while it fits (one that does not is
    skipped); with ``threshold``, only those predicted above the reference's score."""
    bar = standing.reference.score if standing.reference is not None else -math.inf
    steps, spent = {}, Spend()
    for arm in sorted(standing.arms, key=lambda a: -a.predicted):
        if not arm.options or (threshold and not arm.predicted > bar):
            continue
        full = arm.options[-1]
        if standing.budget.allows(spent + full.cost):
            steps[arm.id], spent = full.target, spent + full.cost
    return Round(steps, "threshold" if threshold else "greedy", spent)


def _threshold(standing: Standing, solver: AllocationSolver) -> Round:
    return _greedy(standing, solver, threshold=True)


def _planner(standing: Standing, solver: AllocationSolver) -> Round:
    leader = standing.leader()
    if leader is not None:
        target = standing.next_stage(leader)
        if target is not None and standing.budget.allows(standing.cost_to(leader, target)):
            return Round({leader: target}, "leader", standing.cost_to(leader, target))
    plan = allocate(standing.arms, standing.budget, solver=solver)
    steps = {}
    for cid in plan.targets:
        stage = standing.next_stage(cid)
        if stage is not None:
            steps[cid] = stage
    if not steps:
        return _fill(standing, plan)
    predicted = Spend()
    for cid, target in steps.items():
        predicted = predicted + standing.cost_to(cid, target)
    return Round(steps, "solver", predicted, plan)


def _fill(standing: Standing, plan: Allocation) -> Round:
    """The planner's use of what its solver leaves (module docstring): the next stage of the arm with the highest
    posterior mean (ties: the earlier) that is worth completing and whose completion fits what is left; none when
    none is. Worth completing: its posterior mean gain over the reference plus what a supported candidate's free
    children were worth in this run (`Standing.child_lift`) is not below 0, i.e. counting that option, it is at
    least as likely as not to beat the reference once completed."""
    lift = standing.child_lift
    worth = (a for a in standing.arms if a.options and a.mean + lift >= 0)
    for arm in sorted(worth, key=lambda a: -a.mean):
        if standing.budget.allows(standing.cost_to(arm.id, arm.share)):
            step = arm.options[0]
            return Round({arm.id: step.target}, "fill", step.cost, plan)
    return Round({}, "solver", Spend(), plan)


def _halving_schedule(arms: int, budget: float, share: int, first: int | None) -> list[int]:
    """Sequential halving's per-arm example counts, round by round, for ``arms`` arms, ``budget`` examples in all
    and a share of ``share``: ceil(log2 arms) rounds of equal budget b, round r bringing its ceil(arms / 2^r)
    survivors to t_r = t_(r-1) + b / survivors (Karnin et al.'s equal split, with evidence carried over), and
    the last survivor then completed, so b (R - sum_r 1 / survivors_r) + share = budget. ``first`` (the run's
    first stage) is the least the first round gives. Empty when the budget cannot complete one arm.

    >>> _halving_schedule(12, 150, 50, None), _halving_schedule(12, 150, 50, 5), _halving_schedule(2, 100, 50, None)
    ([2, 8, 20, 37], [6, 8, 14, 21], [50])
    """
    if budget < share or arms < 1:
        return []
    rounds = math.ceil(math.log2(arms)) if arms > 1 else 0
    sizes = [math.ceil(arms / 2**r) for r in range(rounds)]
    if not rounds or budget >= arms * share:
        return [share]
    start = min(share, first) if first is not None else 0
    spare = budget - share - start * (arms - 1)  # what is left once the first round's floor is paid
    per_round = max(0.0, spare / (rounds - sum(1 / s for s in sizes)))
    out, reached = [], float(start)
    for size in sizes:
        reached = max(reached + per_round / size, float(start))
        out.append(min(share, max(1, math.floor(reached))))
    return out


def _halving(standing: Standing, _solver: AllocationSolver) -> Round:
    """One round of sequential halving over the iteration's open proposals (module docstring).

    The schedule (`_halving_schedule`) is fixed by the iteration's budget in example-evaluations (what is left plus
    what the iteration's stages spent; a budget capped in tokens or dollars only is converted at the arms' mean
    predicted cost per example). Survivors are recomputed from the evidence: all arms race to the first count; the
    better half by mean paired difference on the examples they all have (`_better_half`) go on to the next;
    the last survivor is completed. A round gives the survivors behind their count that count in rank order while
    they fit; when none fits, the round is over with what they have (never waiting for what it cannot afford)."""
    fresh = [a for cid in standing.proposals for a in standing.arms if a.id == cid and a.options]
    if not fresh:
        return Round({}, "halving", Spend())
    share = standing.order.share
    total = _examples_affordable(standing, fresh)
    schedule = _halving_schedule(len(fresh), total, share, standing.first_stage) if math.isfinite(total) else [share]
    if not schedule:
        return Round({}, "halving", Spend())
    survivors = list(fresh)
    for level, count in enumerate(schedule):
        behind = [a for a in survivors if a.examples < count]
        steps, spent = {}, Spend()
        for arm in behind:
            cost = standing.cost_to(arm.id, count)
            if standing.budget.allows(spent + cost):
                steps[arm.id], spent = count, spent + cost
        if steps:
            return Round(steps, "halving", spent)
        if len(survivors) > 1 and level < len(schedule) - 1:
            survivors = _better_half(standing, survivors, count)
    if len(survivors) > 1:  # the last round kept two or more: the better by its evidence is completed
        survivors = _better_half(standing, survivors, share)[:1]
    (last,) = survivors
    cost = standing.cost_to(last.id, share)
    if last.examples < share and standing.budget.allows(cost):
        return Round({last.id: share}, "halving", cost)
    return Round({}, "halving", Spend())


def _examples_affordable(standing: Standing, arms: Sequence[Arm]) -> float:
    """How many example-evaluations the iteration's evaluation budget buys in all (what is left plus what its
    stages spent): its ``evals``, else its tokens or dollars at the arms' mean predicted cost per example (inf
    when nothing is capped)."""
    left, spent = standing.budget.vector(), standing.spent.vector()
    if math.isfinite(left[0]):
        return left[0] + spent[0]
    examples = sum(max(1, a.share - a.examples) for a in arms)
    per = [sum(a.options[-1].cost.vector()[e] for a in arms) / examples for e in range(3)]
    ratios = [(left[e] + spent[e]) / per[e] for e in (1, 2) if math.isfinite(left[e]) and per[e] > 0]
    return min(ratios, default=math.inf)


def _better_half(standing: Standing, survivors: Sequence[Arm], count: int) -> list[Arm]:
    """The better half of ``survivors`` (rounded up) by their mean paired difference over the reference on the
    examples every one of them was scored on (at most ``count`` of them, first in the order; a survivor's own
    examples when they share none), ties to the earlier written. Scored examples need not be a prefix of the order
    (a candidate replayed for free holds its parent's examples)."""
    scores = [_scores(standing.by_id[a.id]) for a in survivors]
    ref = _scores(standing.reference) if standing.reference is not None else {}
    common = [i for i in standing.order.search if all(i in mine for mine in scores)][:count]

    def mean(k: int) -> float:
        ids = common or list(scores[k])
        return sum(scores[k][i] - ref.get(i, 0.0) for i in ids) / len(ids) if ids else 0.0

    ranked = sorted(range(len(survivors)), key=lambda k: (-mean(k), k))
    return [survivors[k] for k in ranked[: math.ceil(len(survivors) / 2)]]


def _gate(standing: Standing, _solver: AllocationSolver) -> Round:
    """GEPA's gate, one proposal at a time in the order written: score it on the iteration's minibatch (the
    ``GATE_EXAMPLES`` search examples at a window that moves on each iteration, as GEPA draws a new minibatch),
    then fully if the sum of its scores there is strictly above its parent's on those same examples (GEPA's
    ``StrictImprovementAcceptance``)."""
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
            total = Spend()
            for i in standing.order.next_ids(list(mine), share):
                total = total + standing.costs[cid][i]
            if standing.budget.allows(total):
                return Round({cid: share}, "gate", total)
            return Round({}, "gate", Spend())
    return Round({}, "gate", Spend())


def _thompson(standing: Standing, _solver: AllocationSolver) -> Round:
    """One step of top-two Thompson sampling (module docstring): the next stage of the arm it picks, when what is
    left still completes the recommendation (the arm with the best posterior mean above the reference) afterwards;
    else that completion."""
    arms = [a for a in standing.arms if a.options]
    if not arms:
        return Round({}, "thompson", Spend())
    evidenced = [a for a in standing.arms if a.returnable]
    best = max(evidenced, key=lambda a: a.mean, default=None)
    rng = np.random.default_rng(_seed(standing))
    means = np.asarray([0.0] + [a.mean for a in arms])
    sds = np.sqrt(np.asarray([0.0] + [a.variance for a in arms]))
    first = int(np.argmax(means + sds * rng.standard_normal(len(means))))
    pick = first
    if rng.random() >= TOP_TWO:
        for _ in range(100):
            again = int(np.argmax(means + sds * rng.standard_normal(len(means))))
            if again != first:
                pick = again
                break
    if pick == 0:  # the reference cannot be measured: the other of the two
        pick = first if first != 0 else int(np.argmax(means[1:])) + 1
    arm = arms[pick - 1]
    step = arm.options[0]
    reserve = Spend()
    if best is not None and best.id != arm.id:
        reserve = best.options[-1].cost if best.options else Spend()
    elif best is not None:
        reserve = standing.cost_to(arm.id, arm.share) - step.cost
    if standing.budget.allows(step.cost + reserve):
        return Round({arm.id: step.target}, "thompson", step.cost)
    if best is not None and best.options and standing.budget.allows(best.options[-1].cost):
        return Round({best.id: best.share}, "thompson", best.options[-1].cost)
    return Round({}, "thompson", Spend())


def _seed(standing: Standing) -> list[int]:
    """A seed for the round's draws from what the standing holds (the same standing draws the same)."""
    state = [standing.iteration, *((c.id, c.evaluation.examples if c.evaluation else 0) for c in standing.candidates)]
    digest = hashlib.sha256(json.dumps(state).encode()).digest()
    return [int.from_bytes(digest[k : k + 4], "little") for k in range(0, 16, 4)]


_POLICY: dict[str, Callable[[Standing, AllocationSolver], Round]] = {
    "planner": _planner,
    "greedy": _greedy,
    "threshold": _threshold,
    "thompson": _thompson,
    "best-of-n": _best_of_n,
    "halving": _halving,
    "gate": _gate,
    "all": _all,
}
