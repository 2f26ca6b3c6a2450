"""The baselines of staged evaluation: rules from the literature and from other optimisers, each a `Policy`
registered by its name beside its definition. Every one keeps the iteration's budget by its predicted costs.

- ``greedy``: the best predicted candidates (any iteration's), each to its whole share, while they fit.
- ``best-of-n``: the iteration's proposals in the order they were written, each to its whole share, while they fit
  (the paper's best-of-N: the first N proposals, all fully evaluated).
- ``halving``: sequential halving (Karnin, Koren and Somekh, "Almost Optimal Exploration in Multi-Armed
  Bandits", ICML 2013; with evidence carried over between rounds as in Jamieson and Talwalkar, "Non-stochastic Best
  Arm Identification and Hyperparameter Optimization", AISTATS 2016) over the iteration's proposals from their
  measured scores alone: the iteration's budget split evenly over ceil(log2 n) rounds, each bringing the survivors
  to a common number of examples and keeping the better half, the last survivor completed (`_halving_schedule`).
- ``gate``: GEPA's acceptance gate: each proposal is scored on a minibatch (``GATE_EXAMPLES``) against its
  parent on the same examples, and fully evaluated only if the sum of its scores is strictly higher there.
- ``threshold``: ``greedy`` over the candidates whose prediction beats the reference's score only.
- ``thompson``: top-two Thompson sampling (Russo, "Simple Bayesian Algorithms for Best-Arm Identification",
  Operations Research 2020; COLT 2016): each round draws gains from the posteriors, measures the arm that wins
  the draw with probability 1/2 and otherwise the one that wins a redraw that the first does not (the next stage of
  it); when what is left no longer pays for a step and the completion of the arm with the best posterior mean,
  that arm is completed. Reads predictions (its priors).
- ``all``: every candidate to its whole share (the seeds; a run that records every proposal in full).

``best-of-n``, ``halving`` and ``gate`` read no prediction and ask for none (`Policy.asks_predictions`); ``all``
reads none but asks for them, so a run that records every outcome under it records the predictions too.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence

import numpy as np

from metaharness.budget import Spend
from metaharness.search.staging.allocation import AllocationSolver
from metaharness.search.staging.arms import Arm
from metaharness.search.staging.evidence import evaluated_ancestor, scores_of
from metaharness.search.staging.policy import Round, register
from metaharness.search.staging.standing import Standing

GATE_EXAMPLES = 3  # GEPA's default reflection minibatch
TOP_TWO = 0.5  # top-two Thompson sampling's probability of measuring the draw's winner (Russo's beta)


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
        if not standing.left.allows(spent + full.cost):
            break
        steps[cid], spent = full.target, spent + full.cost
    return Round(steps, rule, spent)


class Greedy:
    """The best predicted first (`Arm.predicted`), each to its whole share, while it fits (one that does not is
    skipped); with ``above_reference`` (``threshold``), only those predicted above the reference's score."""

    name = "greedy"
    above_reference = False
    reads_predictions = asks_predictions = compared = True
    merges = True

    def decide(self, standing: Standing, solver: AllocationSolver) -> Round:
        bar = standing.reference.score if standing.reference is not None else -math.inf
        steps, spent = {}, Spend()
        for arm in sorted(standing.arms, key=lambda a: -a.predicted):
            if not arm.options or (self.above_reference and not arm.predicted > bar):
                continue
            full = arm.options[-1]
            if standing.left.allows(spent + full.cost):
                steps[arm.id], spent = full.target, spent + full.cost
        return Round(steps, self.name, spent)


register(Greedy())


class BestOfN:
    """The iteration's proposals in the order they were written, each to its whole share, while they fit."""

    name = "best-of-n"
    reads_predictions = asks_predictions = False
    merges = True
    compared = True

    def decide(self, standing: Standing, solver: AllocationSolver) -> Round:
        return _in_order(standing, [cid for cid in standing.proposals if _open(standing, cid)], self.name)


register(BestOfN())


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


class Halving:
    """One round of sequential halving over the iteration's open proposals (module docstring).

    The schedule (`_halving_schedule`) is fixed by the iteration's budget in example-evaluations (what is left plus
    what the iteration's stages spent; a budget capped in tokens or dollars only is converted at the arms' mean
    predicted cost per example). Survivors are recomputed from the evidence: all arms race to the first count; the
    better half by mean paired difference on the examples they all have (`_better_half`) go on to the next;
    the last survivor is completed. A round gives the survivors behind their count that count in rank order while
    they fit; when none fits, the round is over with what they have (never waiting for what it cannot afford)."""

    name = "halving"
    reads_predictions = asks_predictions = False
    merges = True
    compared = True

    def decide(self, standing: Standing, solver: AllocationSolver) -> Round:
        fresh = [a for cid in standing.proposals for a in standing.arms if a.id == cid and a.options]
        if not fresh:
            return Round({}, self.name, Spend())
        share = standing.order.share
        total = _examples_affordable(standing, fresh)
        schedule = (
            _halving_schedule(len(fresh), total, share, standing.first_stage) if math.isfinite(total) else [share]
        )
        if not schedule:
            return Round({}, self.name, Spend())
        survivors = list(fresh)
        for level, count in enumerate(schedule):
            behind = [a for a in survivors if a.examples < count]
            steps, spent = {}, Spend()
            for arm in behind:
                cost = standing.cost_to(arm.id, count)
                if standing.left.allows(spent + cost):
                    steps[arm.id], spent = count, spent + cost
            if steps:
                return Round(steps, self.name, spent)
            if len(survivors) > 1 and level < len(schedule) - 1:
                survivors = _better_half(standing, survivors, count)
        if len(survivors) > 1:  # the last round kept two or more: the better by its evidence is completed
            survivors = _better_half(standing, survivors, share)[:1]
        (last,) = survivors
        cost = standing.cost_to(last.id, share)
        if last.examples < share and standing.left.allows(cost):
            return Round({last.id: share}, self.name, cost)
        return Round({}, self.name, Spend())


register(Halving())


def _examples_affordable(standing: Standing, arms: Sequence[Arm]) -> float:
    """How many example-evaluations the iteration's evaluation budget buys in all (what is left plus what its
    stages spent): its ``evals``, else its tokens or dollars at the arms' mean predicted cost per example (inf
    when nothing is capped)."""
    left, spent = standing.left.vector(), standing.spent.vector()
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
    scores = [scores_of(standing.by_id[a.id]) for a in survivors]
    ref = scores_of(standing.reference) if standing.reference is not None else {}
    common = [i for i in standing.order.search if all(i in mine for mine in scores)][:count]

    def mean(k: int) -> float:
        ids = common or list(scores[k])
        return sum(scores[k][i] - ref.get(i, 0.0) for i in ids) / len(ids) if ids else 0.0

    ranked = sorted(range(len(survivors)), key=lambda k: (-mean(k), k))
    return [survivors[k] for k in ranked[: math.ceil(len(survivors) / 2)]]


class Gate:
    """GEPA's gate, one proposal at a time in the order written: score it on the iteration's minibatch (the
    ``GATE_EXAMPLES`` search examples at a window that moves on each iteration, as GEPA draws a new minibatch),
    then fully if the sum of its scores there is strictly above its parent's on those same examples (GEPA's
    ``StrictImprovementAcceptance``)."""

    name = "gate"
    reads_predictions = asks_predictions = False
    merges = True
    compared = True

    def decide(self, standing: Standing, solver: AllocationSolver) -> Round:
        share = standing.order.share
        size = min(GATE_EXAMPLES, share)
        start = (size * max(0, standing.iteration - 1)) % share
        batch = [standing.order.search[(start + k) % share] for k in range(size)]
        for cid in standing.proposals:
            if not _open(standing, cid):
                continue
            candidate = standing.by_id[cid]
            mine = scores_of(candidate)
            todo = [i for i in batch if i not in mine]
            if todo:
                cost = Spend()
                for i in todo:
                    cost = cost + standing.costs[cid][i]
                if not standing.left.allows(cost):
                    return Round({}, self.name, Spend())
                return Round({cid: len(mine) + len(todo)}, self.name, cost, ids={cid: todo})
            parent = evaluated_ancestor(candidate, standing.by_id, supported=True)
            theirs = scores_of(parent) if parent is not None else {}
            wins = parent is None or sum(mine[i] for i in batch) > sum(theirs.get(i, 0.0) for i in batch)
            if len(mine) == size and wins:
                total = Spend()
                for i in standing.order.next_ids(list(mine), share):
                    total = total + standing.costs[cid][i]
                if standing.left.allows(total):
                    return Round({cid: share}, self.name, total)
                return Round({}, self.name, Spend())
        return Round({}, self.name, Spend())


register(Gate())


class Threshold(Greedy):
    """``greedy`` over the candidates predicted above the reference's score only."""

    name = "threshold"
    above_reference = True


register(Threshold())


class Thompson:
    """One step of top-two Thompson sampling (module docstring): the next stage of the arm it picks, when what is
    left still completes the recommendation (the arm with the best posterior mean above the reference) afterwards;
    else that completion."""

    name = "thompson"
    reads_predictions = asks_predictions = compared = True
    merges = True

    def decide(self, standing: Standing, solver: AllocationSolver) -> Round:
        arms = [a for a in standing.arms if a.options]
        if not arms:
            return Round({}, self.name, Spend())
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
        if standing.left.allows(step.cost + reserve):
            return Round({arm.id: step.target}, self.name, step.cost)
        if best is not None and best.options and standing.left.allows(best.options[-1].cost):
            return Round({best.id: best.share}, self.name, best.options[-1].cost)
        return Round({}, self.name, Spend())


register(Thompson())


def _seed(standing: Standing) -> list[int]:
    """A seed for the round's draws from what the standing holds (the same standing draws the same)."""
    state = [standing.iteration, *((c.id, c.evaluation.examples if c.evaluation else 0) for c in standing.candidates)]
    digest = hashlib.sha256(json.dumps(state).encode()).digest()
    return [int.from_bytes(digest[k : k + 4], "little") for k in range(0, 16, 4)]


class All:
    """Every candidate to its whole share, in order, while it fits (the seeds; a run that records every proposal in
    full): merged or not, since a recording needs every candidate's outcome on every example."""

    name = "all"
    reads_predictions = compared = merges = False
    asks_predictions = True

    def decide(self, standing: Standing, solver: AllocationSolver) -> Round:
        return _in_order(standing, [a.id for a in standing.arms], self.name)


register(All())
