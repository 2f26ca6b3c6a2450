"""Staged evaluation as a planning problem: which candidates get how many more validation examples.

Every candidate (an ``Arm``) has a posterior on its *gain* over the reference candidate (the best candidate
whose score is supported: scored on every example of the search's share), a Normal with ``mean`` and
``variance``, built from its prediction (the prior) and its paired evidence: on each example both scored, the
candidate's score minus the reference's (``posterior``). Scoring ``k`` more examples, in the run's fixed
example order, narrows it: before the examples are seen, the posterior mean after them is Normal around today's
mean with variance ``variance - variance_after`` (its *preposterior*; ``spread``).

An allocation gives each arm a target: its examples now, or a larger stage of the ladder (``stages``). Its
cost is the sum of the arms' predicted costs for the examples they add (``Option.cost``: example-evaluations,
task-model tokens, dollars; what will not be cached), and it must leave a *reserve*: enough to complete any arm it
leaves partly scored, because the candidate a run returns must be supported (the loop completes the leader).
Within the budget it maximises the expected gain of the candidate the run will return, the one with the highest
posterior mean among the candidates with evidence (the reference counts as gain 0):

    value(targets) = E[max(0, max over arms of their posterior mean after their target)]

where an arm kept at its examples contributes its current mean when it has evidence and nothing when it has none,
minus ``price`` per example-evaluation (by default a full evaluation must buy 0.001 of expected score), so the
budget is never filled with evaluations that cannot change the outcome: evaluating nothing is a valid answer.
Arms are independent, so the expectation is a one-dimensional integral, ``c0 + integral over t > c0 of
(1 - prod CDF_i(t)) dt``, computed by quadrature on a fixed grid: deterministic, with no sampling noise to blur
near-ties.

Solvers (``allocate``): ``exact`` (branch and bound over each arm's target, proving optimality; the bounds are
in ``_branch_and_bound``), ``auto`` (the same from a strong heuristic plan, stopped after
``AUTO_NODE_LIMIT`` nodes with the best plan and the bound), and two baselines that use no solver: ``greedy``
(the best predicted candidates fully evaluated while they fit) and ``halving`` (successive halving without
predictions: every arm of the iteration to the first stage, then the better half by its measured paired score to
the next, ...).

>>> sure = Arm("sure", mean=0.01, variance=0.005**2, noise=0.2, examples=0, share=50,
...            options=stage_options(0, 50, Spend(1, 300, 0)))
>>> unsure = Arm("unsure", mean=-0.02, variance=0.1**2, noise=0.2, examples=0, share=50,
...              options=stage_options(0, 50, Spend(1, 300, 0)))
>>> allocate([sure, unsure], Budget(evals=60)).targets  # "sure" could not be completed as well
{'unsure': 50}
>>> plan = allocate([sure, unsure], Budget(evals=120))
>>> plan.status, plan.targets, plan.cost.evals  # 54 spent, 46 kept to complete "sure" if it leads
('optimal', {'sure': 4, 'unsure': 50}, 54.0)
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
from scipy.special import ndtr

from metaharness.budget import TOLERANCE, Budget, Spend
from metaharness.errors import InputError

AllocationSolver = Literal["auto", "exact", "greedy", "halving"]
ALLOCATION_SOLVERS: tuple[AllocationSolver, ...] = get_args(AllocationSolver)
GRID_POINTS = 256  # quadrature points over the range the gains can reach
THRESHOLDS = 16  # thresholds u of the branch-and-bound's bounds (every 16th grid point)
BOUND_SLACK = 1e-7  # added to every bound: the quadrature of a bound and of a value may differ by rounding
SPREAD_SDS = 8.0  # the grid reaches this many preposterior sds above the highest mean
AUTO_NODE_LIMIT = 24  # branch-and-bound nodes before ``auto`` returns the best plan found with its bound
MIN_NOISE = 0.01  # a per-example variance of paired differences below this is not believed (a few examples)
DEFAULT_PRICE_PER_SHARE = 1e-3  # a full evaluation must raise the expected best score by at least this much


@dataclass(frozen=True)
class Option:
    """Continue an arm to ``target`` examples for ``cost`` (what the added examples are predicted to spend)."""

    target: int
    cost: Spend


@dataclass(frozen=True)
class Arm:
    """A candidate in the allocation.

    ``mean``/``variance``: posterior of its gain over the reference; ``noise``: the per-example variance of its
    paired differences; ``examples``: how many it has scored (0: no evidence, so it cannot be returned as it is);
    ``share``: the examples that make its score supported; ``options``: the larger targets it may be given, in
    increasing order; ``predicted``: its prior predicted score (what ``greedy`` ranks by); ``paired``: its paired
    differences so far, in the example order (what ``halving`` ranks by); ``fresh``: proposed this iteration
    (``halving`` races these).
    """

    id: str
    mean: float
    variance: float
    noise: float
    examples: int
    share: int
    options: tuple[Option, ...]
    predicted: float = 0.0
    paired: tuple[float, ...] = ()
    fresh: bool = True

    def spread(self, target: int) -> float:
        """The sd of its posterior mean after ``target`` examples, seen from now (0 for its current examples)."""
        return spread(self.variance, self.noise, max(0, target - self.examples))


@dataclass
class Allocation:
    """A solver's answer: ``targets`` (arm id -> examples it should reach; arms left as they are are absent),
    ``value`` (expected gain of the returned candidate over the reference, price not deducted), ``cost``,
    ``status`` ("optimal": proved; "feasible": the best found, ``bound`` above it; the baselines say "feasible"),
    ``solver``, ``seconds``, ``nodes`` (branch-and-bound nodes)."""

    targets: dict[str, int]
    value: float
    cost: Spend
    status: Literal["optimal", "feasible"]
    solver: str
    seconds: float = 0.0
    bound: float | None = None
    nodes: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "targets": dict(self.targets),
            "value": round(self.value, 6),
            "cost": self.cost.to_json(),
            "status": self.status,
            "solver": self.solver,
            "seconds": round(self.seconds, 6),
            "bound": None if self.bound is None else round(self.bound, 6),
            "nodes": self.nodes,
        }


# --- the statistics ---------------------------------------------------------------------------------------------
def posterior(
    prior_mean: float, prior_variance: float, paired: Sequence[float], *, noise_prior: float, noise_weight: float = 5.0
) -> tuple[float, float, float]:
    """``(mean, variance, noise)`` of a candidate's gain over the reference after its paired differences.

    ``noise`` (the per-example variance of the differences) is their sample variance shrunk towards
    ``noise_prior`` with the weight of ``noise_weight`` examples, floored at ``MIN_NOISE``; the gain then has a
    Normal prior and a Normal likelihood with that noise (conjugate update).

    >>> mean, variance, noise = posterior(0.0, 0.05**2, [1, 0, 0, 0], noise_prior=0.2)
    >>> round(mean, 3), round(variance ** 0.5, 3), round(noise, 3)
    (0.011, 0.049, 0.219)
    """
    if prior_variance <= 0:
        raise InputError(f"A prior variance must be > 0, got {prior_variance!r}.")
    n = len(paired)
    total = float(sum(paired))
    if n:
        mean_d = total / n
        squares = float(sum((d - mean_d) ** 2 for d in paired))
        noise = (squares + noise_weight * noise_prior) / (n - 1 + noise_weight) if n > 1 else noise_prior
    else:
        noise = noise_prior
    noise = max(MIN_NOISE, noise)
    precision = 1.0 / prior_variance + n / noise
    mean = (prior_mean / prior_variance + total / noise) / precision
    return mean, 1.0 / precision, noise


def spread(variance: float, noise: float, more: int) -> float:
    """The preposterior sd of a posterior mean with ``variance`` after ``more`` examples of per-example ``noise``."""
    if more <= 0:
        return 0.0
    after = 1.0 / (1.0 / variance + more / noise)
    return math.sqrt(max(0.0, variance - after))


def stages(share: int, first: int | None = None) -> list[int]:
    """The evaluation ladder of a share of ``share`` examples: doubling from the first stage up to the share.

    >>> stages(50), stages(25), stages(10)
    ([4, 8, 16, 32, 50], [3, 6, 12, 25], [3, 6, 10])
    """
    if share < 1:
        raise InputError(f"The search share must hold at least one example, got {share}.")
    size = first if first is not None else max(3, round(share / 12))
    ladder = []
    while size < share:
        ladder.append(size)
        if size * 2 > 0.8 * share:  # no last stage of a handful of examples
            break
        size *= 2
    return ladder + [share]


def stage_options(examples: int, share: int, per_example: Spend, *, first: int | None = None) -> tuple[Option, ...]:
    """The options of an arm with ``examples`` scored whose every further example costs ``per_example``."""
    return tuple(Option(t, per_example.scaled(t - examples)) for t in stages(share, first) if t > examples)


# --- the objective ----------------------------------------------------------------------------------------------
class _Quadrature:
    """The objective of any allocation of ``arms``: the preposterior CDF of every (arm, option) pair tabulated on
    one grid, and trapezoid weights for integrals from any lower limit."""

    def __init__(self, arms: Sequence[Arm]) -> None:
        self.arms = list(arms)
        self.pairs = [(a, o) for a, arm in enumerate(self.arms) for o in range(len(arm.options))]
        self.index = {pair: k for k, pair in enumerate(self.pairs)}
        means = np.asarray([self.arms[a].mean for a, _ in self.pairs], dtype=float)
        sds = np.asarray([self.arms[a].spread(self.arms[a].options[o].target) for a, o in self.pairs], dtype=float)
        top = max([0.0, *(arm.mean for arm in self.arms), *(means + SPREAD_SDS * sds)])
        self.grid = np.linspace(0.0, max(top, 1e-9), GRID_POINTS)
        self.h = float(self.grid[1] - self.grid[0])
        safe = np.where(sds > 0, sds, 1.0)
        z = (self.grid[None, :] - means[:, None]) / safe[:, None]
        self.cdf = np.where(sds[:, None] > 0, ndtr(z), (self.grid[None, :] >= means[:, None]).astype(float))
        self.tail = 1.0 - self.cdf  # P(posterior mean after the option > t), per pair and grid point
        # the means of the arms that can stay and still be returned (they have evidence); -inf for the others
        self.stay_means = np.asarray([arm.mean if arm.examples > 0 else -np.inf for arm in self.arms], dtype=float)

    def weights(self, low: float, high: float | None = None) -> np.ndarray:
        """Trapezoid weights of the integral over [low, high] (default: to the grid's end), the partial end cells
        interpolated linearly."""
        return self._from(low) - (self._from(high) if high is not None else 0.0)

    def _from(self, low: float) -> np.ndarray:
        w = np.zeros(GRID_POINTS)
        if low >= self.grid[-1]:
            return w
        low = max(0.0, low)
        j = min(GRID_POINTS - 2, int(low / self.h))
        frac, part = (low - self.grid[j]) / self.h, self.grid[j + 1] - low
        w[j] += part * 0.5 * (1.0 - frac)  # f(low) = (1 - frac) f_j + frac f_(j+1); the cell is [low, t_(j+1)]
        w[j + 1] += part * 0.5 * (1.0 + frac)
        w[j + 1 : GRID_POINTS - 1] += self.h
        w[j + 1] -= self.h / 2
        w[GRID_POINTS - 1] += self.h / 2
        return w

    def floor(self, chosen: Mapping[int, int], staying: Iterable[int] | None = None) -> float:
        """The best of 0 (the reference) and the means of the arms with evidence that stay as they are (all not in
        ``chosen``, or only those in ``staying``)."""
        mask = np.ones(len(self.arms), dtype=bool) if staying is None else np.zeros(len(self.arms), dtype=bool)
        if staying is not None:
            mask[list(staying)] = True
        mask[list(chosen)] = False
        return max(0.0, float(np.max(self.stay_means[mask], initial=0.0)))

    def product(self, chosen: Mapping[int, int]) -> np.ndarray:
        """P(no chosen arm's posterior mean exceeds t), per grid point."""
        out = np.ones(GRID_POINTS)
        for a, o in chosen.items():
            out = out * self.cdf[self.index[(a, o)]]
        return out

    def value(self, chosen: Mapping[int, int]) -> float:
        """E[max(0, stayers' means, chosen arms' posterior means)] for ``chosen`` (arm index -> option index)."""
        c0 = self.floor(chosen)
        return c0 + float(self.weights(c0) @ (1.0 - self.product(chosen)))

    def excess(self, chosen: Mapping[int, int], low: float) -> np.ndarray:
        """Per pair, E[(its posterior mean - Z)^+] where Z = max(``low``, the chosen arms' posterior means)."""
        return self.tail @ (self.weights(low) * self.product(chosen))

    def gains(self, chosen: Mapping[int, int]) -> np.ndarray:
        """Each pair's marginal gain in ``value`` at ``chosen`` (meaningless for pairs of chosen arms): its
        ``excess`` over the current maximum, except for a stayer that sets the floor, whose choice moves it."""
        c0 = self.floor(chosen)
        out = self.excess(chosen, c0)
        current: float | None = None
        for a, arm in enumerate(self.arms):
            if arm.examples > 0 and a not in chosen and arm.mean >= c0 and arm.options:
                current = self.value(chosen) if current is None else current
                for o in range(len(arm.options)):
                    out[self.index[(a, o)]] = self.value({**chosen, a: o}) - current
        return out

    def integral(self, f: np.ndarray, points: np.ndarray) -> np.ndarray:
        """The integral of ``f`` (tabulated on the grid) from 0 to each of ``points``: its cumulative trapezoid sum,
        interpolated linearly between grid points (clipped to the grid)."""
        cumulative = np.concatenate(([0.0], np.cumsum((f[1:] + f[:-1]) * (self.h / 2))))
        return np.interp(np.clip(points, 0.0, self.grid[-1]), self.grid, cumulative)


def _cost(arms: Sequence[Arm], chosen: Mapping[int, int]) -> Spend:
    total = Spend()
    for a, o in chosen.items():
        total = total + arms[a].options[o].cost
    return total


def value(arms: Sequence[Arm], targets: Mapping[str, int]) -> float:
    """The objective (expected gain of the returned candidate, price not deducted) of giving each arm its target
    in ``targets`` (absent arms stay as they are)."""
    return _Quadrature(arms).value(_chosen(arms, targets))


def _chosen(arms: Sequence[Arm], targets: Mapping[str, int]) -> dict[int, int]:
    by_id = {arm.id: a for a, arm in enumerate(arms)}
    chosen = {}
    for cid, target in targets.items():
        if cid not in by_id:
            raise InputError(f"No arm {cid!r} in the allocation problem.")
        arm = by_id[cid]
        if target == arms[arm].examples:
            continue
        options = [o for o, option in enumerate(arms[arm].options) if option.target == target]
        if not options:
            known = [option.target for option in arms[arm].options]
            raise InputError(f"Arm {cid!r} cannot be continued to {target} examples (its options: {known}).")
        chosen[arm] = options[0]
    return chosen


def _allocation(
    arms: Sequence[Arm], q: _Quadrature, chosen: Mapping[int, int], status: str, solver: str, **extra: object
) -> Allocation:
    targets = {arms[a].id: arms[a].options[o].target for a, o in sorted(chosen.items())}
    return Allocation(targets, q.value(chosen), _cost(arms, chosen), status, solver, **extra)  # type: ignore[arg-type]


# --- solvers ----------------------------------------------------------------------------------------------------
def allocate(
    arms: Sequence[Arm],
    budget: Budget,
    *,
    solver: AllocationSolver = "auto",
    price: float | None = None,
    node_limit: int | None = None,
) -> Allocation:
    """Choose each arm's target within ``budget`` with ``solver`` (module docstring).

    ``price``: the expected gain one example-evaluation must buy (default ``DEFAULT_PRICE_PER_SHARE`` per
    share of the largest arm); ``node_limit``: branch-and-bound nodes for ``auto`` (default
    ``AUTO_NODE_LIMIT``; ``exact`` has none). Arm ids must be unique; an empty list allocates nothing.
    """
    if solver not in ALLOCATION_SOLVERS:
        raise InputError(f"Unknown allocation solver {solver!r}; use one of {', '.join(ALLOCATION_SOLVERS)}.")
    ids = [arm.id for arm in arms]
    if len(set(ids)) != len(ids):
        raise InputError("Arm ids must be unique.")
    started = time.perf_counter()
    share = max((arm.share for arm in arms), default=1)
    lam = DEFAULT_PRICE_PER_SHARE / share if price is None else float(price)
    if lam < 0 or math.isnan(lam):
        raise InputError(f"price must be >= 0, got {price!r}.")
    q = _Quadrature(arms)
    if solver == "greedy":
        result = _greedy_full(arms, q, budget)
    elif solver == "halving":
        result = _halving(arms, q, budget)
    else:
        limit = None if solver == "exact" else (node_limit or AUTO_NODE_LIMIT)
        result = _branch_and_bound(arms, q, budget, lam, limit)
    result.seconds = time.perf_counter() - started
    return result


def _greedy_full(arms: Sequence[Arm], q: _Quadrature, budget: Budget) -> Allocation:
    """The best predicted first, each to its whole share, while it fits (arms without a full option skipped)."""
    chosen: dict[int, int] = {}
    spent = Spend()
    for a in sorted(range(len(arms)), key=lambda a: (-arms[a].predicted, a)):
        full = [o for o, option in enumerate(arms[a].options) if option.target >= arms[a].share]
        if not full or arms[a].examples >= arms[a].share:
            continue
        total = spent + arms[a].options[full[0]].cost
        if budget.allows(total):
            chosen[a], spent = full[0], total
    return _allocation(arms, q, chosen, "feasible", "greedy")


def _halving(arms: Sequence[Arm], q: _Quadrature, budget: Budget) -> Allocation:
    """One round of successive halving over the fresh arms, from their measured paired scores alone.

    Survivors are recomputed from the evidence: all fresh arms race at the first stage; once every survivor has
    reached a stage, the better half (by mean paired difference over that stage's examples; ties: earlier arm)
    goes on to the next. The round gives the survivors that have not reached the current stage that stage, in
    rank order while they fit; the last survivor is taken to its whole share."""
    fresh = [a for a, arm in enumerate(arms) if arm.fresh]
    if not fresh:
        return _allocation(arms, q, {}, "feasible", "halving")
    share = max(arms[a].share for a in fresh)
    ladder = stages(share)
    survivors = list(fresh)
    for level, size in enumerate(ladder):
        behind = [a for a in survivors if arms[a].examples < size]
        if behind:
            chosen: dict[int, int] = {}
            spent = Spend()
            for a in behind:
                options = [o for o, option in enumerate(arms[a].options) if option.target == min(size, arms[a].share)]
                if not options:
                    continue
                total = spent + arms[a].options[options[0]].cost
                if budget.allows(total):
                    chosen[a], spent = options[0], total
            return _allocation(arms, q, chosen, "feasible", "halving")
        if len(survivors) > 1 and level < len(ladder) - 1:
            ranked = sorted(survivors, key=lambda a: (-_prefix_mean(arms[a].paired, size), survivors.index(a)))
            survivors = ranked[: math.ceil(len(ranked) / 2)]
    return _allocation(arms, q, {}, "feasible", "halving")


def _prefix_mean(paired: Sequence[float], size: int) -> float:
    head = paired[:size]
    return float(sum(head)) / len(head) if head else 0.0


def _branch_and_bound(
    arms: Sequence[Arm], q: _Quadrature, budget: Budget, lam: float, node_limit: int | None
) -> Allocation:
    """Depth-first over the arms, most promising first; a node fixes one arm's target (best net gain first) or
    leaves it as it is; the greedy plan is the first incumbent.

    Bounds on what a node's completions can add. With Z = max(0, the means of the arms decided to stay, the chosen
    arms' posterior means) and V_a an undecided arm's posterior mean after its choice (its mean when it stays with
    evidence, nothing without), max(Z, V...) <= u + (Z - u)^+ + sum_a (V_a - u)^+ for every threshold u, and
    <= Z + sum_a (V_a - Z)^+; each gives a knapsack over the undecided arms (value: the expected excess of each
    choice, minus its price; cost: each capped budget entry), whose relaxation (``_knapsack_bound``) bounds the
    net value. So does every undecided arm at its largest target at once (replacing a mean by a spread around it
    only raises the expected maximum). A pair whose expected excess over 0 does not pay its price is dropped first:
    it never gains more than that."""
    solver = "exact" if node_limit is None else "auto"
    n_pairs = len(q.pairs)
    limit = np.asarray(budget.vector())
    slack = limit + TOLERANCE * np.maximum(1.0, np.where(np.isfinite(limit), limit, 1.0))
    cost = np.asarray([arms[a].options[o].cost.vector() for a, o in q.pairs], dtype=float).reshape(n_pairs, 3)
    owner = np.asarray([a for a, _ in q.pairs], dtype=int)
    evals = cost[:, 0]
    completion = _completion(arms, q, cost)
    base = q.value({})
    thresholds = q.grid[:: max(1, GRID_POINTS // THRESHOLDS)]
    over = np.stack([q.weights(u) for u in thresholds], axis=1)  # [grid, thresholds]
    pair_excess = q.tail @ over  # E[(V_p - u)^+] per pair and threshold
    useful = (pair_excess[:, 0] - lam * evals > 1e-12) & np.all(cost + completion <= slack, axis=1)
    means = np.asarray([arm.mean for arm in arms])
    evidenced = np.asarray([arm.examples > 0 for arm in arms], dtype=bool)
    net_root = np.where(useful, q.gains({}) - lam * evals, -np.inf)
    candidates = sorted({int(a) for a in owner[useful]})
    order = sorted(candidates, key=lambda a: (-float(np.max(net_root[owner == a])), a))
    depth_of = np.full(len(arms), -1)
    depth_of[order] = np.arange(len(order))
    capped = [e for e in range(3) if math.isfinite(limit[e])]

    def net_value(chosen: Mapping[int, int]) -> float:
        return q.value(chosen) - base - lam * float(sum(arms[a].options[o].cost.evals for a, o in chosen.items()))

    best_chosen = _heuristic(arms, q, cost, completion, slack, lam, useful)
    best = net_value(best_chosen)
    if best <= 0.0:
        best, best_chosen = 0.0, {}
    nodes = 0
    root_bound = math.inf
    exhausted = False

    def bound(chosen: Mapping[int, int], depth: int, spent: np.ndarray) -> float:
        free_arm = depth_of >= depth
        low = q.floor(chosen, np.flatnonzero(~free_arm))
        px = q.product(chosen)
        value_now = q.value(chosen)
        fits = useful & free_arm[owner] & np.all(spent + cost + completion <= slack, axis=1)
        ks = np.flatnonzero(fits)
        stayers = free_arm & evidenced
        if not len(ks):
            return 0.0
        # every undecided arm at its largest target at once
        widest = {int(owner[k]): q.pairs[k][1] for k in ks}
        result = q.value({**chosen, **widest}) - value_now
        sub_owner, sub_cost = owner[ks], cost[ks]
        capacity = [float(limit[e] - spent[e]) for e in capped]
        # threshold u: u + E[(Z - u)^+] + the excesses over u
        above = q.integral(1.0 - px, np.asarray([low]))[0]
        total = q.integral(1.0 - px, np.asarray([q.grid[-1]]))[0]
        z_excess = np.maximum(0.0, low - thresholds) + total - q.integral(1.0 - px, np.maximum(thresholds, low))
        z_excess = np.where(thresholds >= low, z_excess, low - thresholds + total - above)
        stay = np.maximum(means[:, None] - thresholds[None, :], 0.0) * stayers[:, None]
        values = pair_excess[ks] - lam * evals[ks, None]
        sums = _knapsack_bound(values, stay, sub_cost, sub_owner, capped, capacity)
        result = min(result, float(np.min(thresholds + z_excess + sums)) - value_now)
        # random threshold Z: Z + the excesses over Z
        reach = np.where(stayers, np.maximum(means, low), low)
        zs = q.integral(px, reach) - q.integral(px, np.full(len(arms), low))
        values = (q.excess(chosen, low)[ks] - lam * evals[ks])[:, None]
        ez = low + total - above
        sums = _knapsack_bound(values, zs[:, None], sub_cost, sub_owner, capped, capacity)
        return min(result, ez + float(sums[0]) - value_now) + BOUND_SLACK

    def search(depth: int, chosen: dict[int, int], spent: np.ndarray, reserve: np.ndarray, current: float) -> None:
        nonlocal nodes, root_bound, exhausted, best, best_chosen
        nodes += 1
        if node_limit is not None and nodes > node_limit:
            exhausted = True
            return
        if current > best + 1e-12:
            best, best_chosen = current, dict(chosen)
        if depth >= len(order):
            return
        ub = bound(chosen, depth, spent)
        if depth == 0:
            root_bound = current + ub
        if current + ub <= best + 1e-12:
            return
        a = order[depth]
        children = []
        for o in range(len(arms[a].options)):
            k = q.index[(a, o)]
            if useful[k] and np.all(spent + cost[k] + np.maximum(reserve, completion[k]) <= slack):
                child = {**chosen, a: o}
                children.append((net_value(child), o, k))
        for child_value, o, k in sorted(children, key=lambda c: (-c[0], c[1])):
            chosen[a] = o
            search(depth + 1, chosen, spent + cost[k], np.maximum(reserve, completion[k]), child_value)
            del chosen[a]
            if exhausted:
                return
        search(depth + 1, chosen, spent, reserve, current)

    search(0, {}, np.zeros(3), np.zeros(3), 0.0)
    if exhausted:
        return _allocation(arms, q, best_chosen, "feasible", solver, nodes=nodes, bound=base + root_bound)
    return _allocation(arms, q, best_chosen, "optimal", solver, nodes=nodes)


def _knapsack_bound(
    values: np.ndarray,
    stay: np.ndarray,
    cost: np.ndarray,
    owner: np.ndarray,
    capped: Sequence[int],
    capacity: Sequence[float],
) -> np.ndarray:
    """Per column, an upper bound of max sum over arms of the value of one choice per arm (staying: ``stay``, free;
    option k: ``values[k]``, ``-inf`` when unavailable) within every capped entry's capacity.

    An option's increment over the arm's previous option (its first over staying) is an item; dropping the rule
    that an arm's increments are taken in order, and the items that lose value, can only raise the optimum, which
    is then a fractional knapsack per capped entry (the smallest of those bounds; with no capped entry, every
    positive increment)."""
    n_pairs, columns = values.shape
    first = np.concatenate(([True], owner[1:] != owner[:-1]))  # rows are grouped by arm, options ascending
    previous = np.where(first[:, None], stay[owner], np.vstack([np.zeros((1, columns)), values[:-1]]))
    previous = np.where(np.isfinite(previous), previous, stay[owner])
    gain = np.where(np.isfinite(values), values - previous, 0.0)
    gain = np.maximum(gain, 0.0)
    base = stay.sum(axis=0)
    if not capped:
        return base + gain.sum(axis=0)
    bounds = []
    for e, cap in zip(capped, capacity, strict=True):
        step = cost[:, e] - np.where(first, 0.0, np.concatenate(([0.0], cost[:-1, e])))
        step = np.maximum(step, 0.0)
        free = step <= 1e-15
        total = base + (gain * free[:, None]).sum(axis=0)
        ratio = np.where(free[:, None], -np.inf, gain / np.where(free, 1.0, step)[:, None])
        rank = np.argsort(-ratio, axis=0, kind="stable")
        g = np.take_along_axis(np.where(free[:, None], 0.0, gain), rank, axis=0)
        c = np.where(g > 0, step[rank], 0.0)
        before = np.cumsum(c, axis=0) - c
        take = np.clip((max(0.0, cap) - before) / np.where(c > 0, c, 1.0), 0.0, 1.0)
        take = np.where(c > 0, take, 0.0)
        bounds.append(total + (take * g).sum(axis=0))
    return np.min(np.stack(bounds), axis=0)


def _completion(arms: Sequence[Arm], q: _Quadrature, cost: np.ndarray) -> np.ndarray:
    """Per pair, what completing its arm from the pair's target to the whole share costs (0 at the share)."""
    full = {a: np.asarray(arm.options[-1].cost.vector()) for a, arm in enumerate(arms) if arm.options}
    return np.asarray([full[a] - cost[k] for k, (a, _) in enumerate(q.pairs)], dtype=float).reshape(cost.shape)


def _heuristic(
    arms: Sequence[Arm],
    q: _Quadrature,
    cost: np.ndarray,
    completion: np.ndarray,
    slack: np.ndarray,
    lam: float,
    useful: np.ndarray,
) -> dict[int, int]:
    """A good plan fast: the better of two greedy plans (best net gain per share of the tightest budget entry, and
    best net gain), then local search (add an arm, change or drop one, or swap one for another) while a move helps.
    Every plan keeps the reserve to complete any chosen arm."""
    owner = np.asarray([a for a, _ in q.pairs], dtype=int)
    finite = np.isfinite(slack) & (slack > 0)
    limit = np.where(finite, slack, 1.0)
    share = np.max(np.where(finite, cost / limit, 0.0), axis=1)

    def totals(chosen: Mapping[int, int]) -> tuple[np.ndarray, np.ndarray]:
        ks = [q.index[pair] for pair in chosen.items()]
        return cost[ks].sum(axis=0), (completion[ks].max(axis=0) if ks else np.zeros(3))

    def net(chosen: Mapping[int, int]) -> float:
        return q.value(chosen) - lam * float(sum(cost[q.index[pair], 0] for pair in chosen.items()))

    def additions(chosen: Mapping[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """Net gain of adding each pair to ``chosen`` (-inf where it does not fit or its arm is chosen)."""
        spent, reserve = totals(chosen)
        fits = np.all(spent + cost + np.maximum(reserve, completion) <= slack, axis=1)
        taken = np.isin(owner, list(chosen))
        gain = q.gains(chosen) - lam * cost[:, 0]
        return np.where(useful & fits & ~taken & (gain > 1e-12), gain, -np.inf), gain

    plans = []
    for by_ratio in (True, False):
        chosen: dict[int, int] = {}
        while True:
            gain, _ = additions(chosen)
            if not np.isfinite(gain).any():
                break
            k = int(np.argmax(gain / np.maximum(share, 1e-9) if by_ratio else gain))
            chosen[q.pairs[k][0]] = q.pairs[k][1]
        plans.append(chosen)
    chosen = max(plans, key=net)
    current = net(chosen)
    while True:
        best_move, best_value = None, current + 1e-12
        for removed in [None, *chosen]:
            rest = {a: o for a, o in chosen.items() if a != removed}
            gain, _ = additions(rest)
            if removed is not None:
                rest_value = net(rest)
                if rest_value > best_value:
                    best_move, best_value = rest, rest_value
            else:
                rest_value = current
            if np.isfinite(gain).any():
                k = int(np.argmax(gain))
                if rest_value + gain[k] > best_value:
                    best_move, best_value = {**rest, q.pairs[k][0]: q.pairs[k][1]}, rest_value + gain[k]
        if best_move is None:
            return chosen
        chosen, current = best_move, net(best_move)
