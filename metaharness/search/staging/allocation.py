"""Staged evaluation as a planning problem: which candidates get how many more validation examples.

Every candidate (an `Arm`) has a posterior on its *gain* over the reference candidate (the best candidate whose
score is supported: scored on every example of the search's share), a Normal with `mean` and `variance`, built
from its prediction (the prior) and its paired evidence: on each example both scored, the candidate's score minus
the reference's (`posterior`). An allocation gives each arm a target: its examples now, or a larger stage of the
ladder (`stages`). Its cost is the sum of the arms' predicted costs for the examples they add (`Option.cost`:
example-evaluations, task-model tokens, dollars; what will not be cached), and it must leave a *reserve*: enough
to complete any arm it leaves partly scored, because only a supported candidate can be returned.

**The objective is the return rule's.** The run returns the supported candidate with the highest *raw* score
(`metaharness.frontier.best`), not the one the posterior likes best, so the solver maximises the expected true gain
of the candidate that rule will return (the reference counts as 0). Each (arm, target) gives two numbers once its
examples are seen: its *rank*, what the rule will compare (the raw paired gain over the whole share: measured when
the target is the share, else its expected value given the evidence, the certainty equivalent of the examples not
yet seen), and its *value*, the posterior mean of its true gain. Both are linear in the examples' paired sum, so
before they are seen the rank is Normal (its *preposterior*) and the value is ``alpha + beta * rank``
(`Arm.outcome`). A candidate left partly scored is completed afterwards (the reserve pays for it) only when its
posterior mean is above the reference, so an intermediate target counts as returnable only where its value is
positive; a target at the share is returned whenever its raw score is the highest, lucky or not. With `W` the
candidate of highest rank among the reference, the arms that stay and the arms given a target:

    value(targets) = E[value of W]
                   = v* P(no target's rank beats r*) + sum_i integral_{x > r*} (alpha_i + beta_i x) f_i(x)
                     prod_{j != i} F_j(x) dx

where `(r*, v*)` is the rank and value of the best of the reference and the arms that stay, `f_i`, `F_i` an
arm's rank density and distribution (its mass below the completion threshold removed). Each integral is taken by
Gauss-Legendre quadrature on the arm's own quantile scale (`Objective`): deterministic, with no sampling noise to
blur near-ties. Because `beta < 1` when a prior carries weight, a candidate with a poor prior can now *lower* the
value when it is completed: its raw score may win by luck (the winner's curse; Smith and Winkler, "The
Optimizer's Curse", Management Science 2006). The planner weighs that; a max of posterior means could not. A price
per example-evaluation (`price`, by default a full evaluation must buy 0.001 of expected score) is deducted, so
the budget is never filled with evaluations that cannot change the outcome: evaluating nothing is a valid answer.

Solvers (`allocate`): `exact` (branch and bound over each arm's target, proving optimality) and `auto` (the same
from a strong heuristic plan, stopped after `AUTO_NODE_LIMIT` nodes). The bound of a node is the expected maximum
of the posterior means reachable from it (the winner's value never exceeds the largest value, so it bounds this
objective too), relaxed to knapsacks (`_BranchAndBound`). Every answer says how far from optimal it may be:
`Allocation.bound` is an upper bound of the net objective over every feasible plan, `gap` the distance to it (0
when proved optimal), and `truncated` says the search stopped at its node limit. The baselines that use no solver
(greedy, halving, ...) are policies of `metaharness.search.staging.baselines`.

>>> from metaharness.budget import Spend
>>> from metaharness.search.staging.arms import stage_options
>>> sure = Arm("sure", mean=0.01, variance=0.005**2, noise=0.2, examples=0, share=50,
...            options=stage_options(0, 50, Spend(1, 300, 0)))
>>> unsure = Arm("unsure", mean=-0.02, variance=0.1**2, noise=0.2, examples=0, share=50,
...              options=stage_options(0, 50, Spend(1, 300, 0)))
>>> allocate([sure, unsure], Budget(evals=60)).targets  # "sure" could not be completed as well
{'unsure': 50}
>>> plan = allocate([sure, unsure], Budget(evals=120), solver="exact")
>>> plan.status, plan.targets, plan.gap
('optimal', {'sure': 4, 'unsure': 50}, 0.0)
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Literal, get_args

import numpy as np

from metaharness.budget import TOLERANCE, Budget
from metaharness.errors import InputError
from metaharness.search.staging.arms import Allocation, Arm
from metaharness.search.staging.objective import GRID_POINTS, MaxOfMeans, Objective, plan_cost

AllocationSolver = Literal["auto", "exact"]
ALLOCATION_SOLVERS: tuple[AllocationSolver, ...] = get_args(AllocationSolver)
THRESHOLDS = 16  # thresholds u of the branch-and-bound's bounds (every 16th grid point)
BOUND_SLACK = 1e-7  # added to every bound: the quadrature of a bound and of a value may differ by rounding
AUTO_NODE_LIMIT = 48  # branch-and-bound nodes before ``auto`` returns the best plan found with its bound
DEFAULT_PRICE_PER_SHARE = 1e-3  # a full evaluation must raise the expected best score by at least this much


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
    limit = None if solver == "exact" else (node_limit or AUTO_NODE_LIMIT)
    result = _BranchAndBound(arms, budget, lam, limit).allocation(solver)
    result.seconds = time.perf_counter() - started
    return result


class _BranchAndBound:
    """Depth-first over the arms, most promising first; a node fixes one arm's target (best net value first) or
    leaves it as it is; the heuristic plan is the first incumbent.

    Bounds on what a node's completions can reach, from the expected maximum of posterior means (`MaxOfMeans`,
    never below the objective). With Z = max(0, the means of the arms decided to stay, the chosen arms' posterior
    means) and V_a an undecided arm's posterior mean after its choice (its mean when it stays with evidence,
    nothing without), max(Z, V...) <= u + (Z - u)^+ + sum_a (V_a - u)^+ for every threshold u, and
    <= Z + sum_a (V_a - Z)^+; each gives a knapsack over the undecided arms (value: the expected excess of each
    choice, minus its price; cost: each capped budget entry), whose relaxation (`_knapsack_bound`) bounds the
    net value. So does every undecided arm at its largest target at once (replacing a mean by a spread around it
    only raises the expected maximum). A pair whose expected excess over 0 does not pay its price can only lower
    that maximum net of its price, so the knapsacks leave it out; the search still branches on it (under the
    return rule, evaluating a candidate can also keep a lucky weaker one from being returned)."""

    def __init__(self, arms: Sequence[Arm], budget: Budget, lam: float, node_limit: int | None) -> None:
        self.arms, self.lam, self.node_limit = arms, lam, node_limit
        self.objective = Objective(arms)
        self.q = q = MaxOfMeans(arms)
        n_pairs = len(q.pairs)
        self.limit = limit = np.asarray(budget.vector())
        self.slack = limit + TOLERANCE * np.maximum(1.0, np.where(np.isfinite(limit), limit, 1.0))
        cost = np.asarray([arms[a].options[o].cost.vector() for a, o in q.pairs], dtype=float).reshape(n_pairs, 3)
        self.cost = cost
        self.owner = owner = self.objective.owner
        self.evals = evals = cost[:, 0]
        self.completion = _completion(arms, q.pairs, cost)
        self.base = self.objective.value({})
        self.thresholds = thresholds = q.grid[:: max(1, GRID_POINTS // THRESHOLDS)]
        over = np.stack([q.weights(u) for u in thresholds], axis=1)  # [grid, thresholds]
        self.pair_excess = q.tail @ over  # E[(V_p - u)^+] per pair and threshold
        fits_alone = np.all(cost + self.completion <= self.slack, axis=1) if n_pairs else np.zeros(0, dtype=bool)
        self.useful = (self.pair_excess[:, 0] - lam * evals > 1e-12) & fits_alone
        self.means = np.asarray([arm.mean for arm in arms])
        self.evidenced = np.asarray([arm.examples > 0 for arm in arms], dtype=bool)
        net_root = np.where(fits_alone, self.objective.gains({}) - lam * evals, -np.inf)
        candidates = sorted({int(a) for a in owner[fits_alone]})
        self.order = sorted(candidates, key=lambda a: (-float(np.max(net_root[owner == a])), a))
        self.depth_of = np.full(len(arms), -1)
        self.depth_of[self.order] = np.arange(len(self.order))
        self.capped = [e for e in range(3) if math.isfinite(limit[e])]
        self.nodes = 0
        self.root_bound = math.inf
        self.exhausted = False
        self.best_chosen = _heuristic(self.objective, cost, self.completion, self.slack, lam, fits_alone)
        self.best = self.net_value(self.best_chosen)
        if self.best <= 0.0:
            self.best, self.best_chosen = 0.0, {}

    def allocation(self, solver: str) -> Allocation:
        """Search from the root; the best plan found (``"feasible"`` with the root's bound when the node limit cut
        the search short)."""
        self.search(0, {}, np.zeros(3), np.zeros(3), 0.0)
        arms, best_chosen = self.arms, self.best_chosen
        targets = {arms[a].id: arms[a].options[o].target for a, o in sorted(best_chosen.items())}
        value = self.objective.value(best_chosen)
        plan = Allocation(targets, value, plan_cost(arms, best_chosen), "optimal", solver, nodes=self.nodes)
        plan.net, plan.bound = self.best, self.best
        if self.exhausted:
            plan.status, plan.bound, plan.truncated = "feasible", max(self.best, self.root_bound), True
        return plan

    def net_value(self, chosen: Mapping[int, int]) -> float:
        spent = float(sum(self.arms[a].options[o].cost.evals for a, o in chosen.items()))
        return self.objective.value(chosen) - self.base - self.lam * spent

    def bound(self, chosen: Mapping[int, int], depth: int, spent: np.ndarray) -> float:
        """An upper bound of the net value of every completion of ``chosen``."""
        q, lam, owner, cost, thresholds = self.q, self.lam, self.owner, self.cost, self.thresholds
        free_arm = self.depth_of >= depth
        low = q.floor(chosen, np.flatnonzero(~free_arm))
        px = q.product(chosen)
        value_now = q.value(chosen)
        ceiling = value_now - self.base - lam * float(spent[0])  # the max of means now, net of what is chosen
        fits = self.useful & free_arm[owner] & np.all(spent + cost + self.completion <= self.slack, axis=1)
        ks = np.flatnonzero(fits)
        stayers = free_arm & self.evidenced
        if not len(ks):
            return ceiling + BOUND_SLACK
        # every undecided arm at its largest target at once
        widest = {int(owner[k]): q.pairs[k][1] for k in ks}
        result = q.value({**chosen, **widest}) - value_now
        sub_owner, sub_cost = owner[ks], cost[ks]
        capacity = [float(self.limit[e] - spent[e]) for e in self.capped]
        # threshold u: u + E[(Z - u)^+] + the excesses over u
        above = q.integral(1.0 - px, np.asarray([low]))[0]
        total = q.integral(1.0 - px, np.asarray([q.grid[-1]]))[0]
        z_excess = np.maximum(0.0, low - thresholds) + total - q.integral(1.0 - px, np.maximum(thresholds, low))
        z_excess = np.where(thresholds >= low, z_excess, low - thresholds + total - above)
        stay = np.maximum(self.means[:, None] - thresholds[None, :], 0.0) * stayers[:, None]
        values = self.pair_excess[ks] - lam * self.evals[ks, None]
        sums = _knapsack_bound(values, stay, sub_cost, sub_owner, self.capped, capacity)
        result = min(result, float(np.min(thresholds + z_excess + sums)) - value_now)
        # random threshold Z: Z + the excesses over Z
        reach = np.where(stayers, np.maximum(self.means, low), low)
        zs = q.integral(px, reach) - q.integral(px, np.full(len(self.arms), low))
        values = (q.excess(chosen, low)[ks] - lam * self.evals[ks])[:, None]
        ez = low + total - above
        sums = _knapsack_bound(values, zs[:, None], sub_cost, sub_owner, self.capped, capacity)
        return ceiling + max(0.0, min(result, ez + float(sums[0]) - value_now)) + BOUND_SLACK

    def search(
        self, depth: int, chosen: dict[int, int], spent: np.ndarray, reserve: np.ndarray, current: float
    ) -> None:
        """Depth-first from a node (``chosen`` fixed up to ``depth``, ``spent`` and the ``reserve`` its completions
        need, net value ``current``), keeping the best plan and stopping at the node limit."""
        self.nodes += 1
        if self.node_limit is not None and self.nodes > self.node_limit:
            self.exhausted = True
            return
        if current > self.best + 1e-12:
            self.best, self.best_chosen = current, dict(chosen)
        if depth >= len(self.order):
            return
        ub = self.bound(chosen, depth, spent)
        if depth == 0:
            self.root_bound = max(ub, current)
        if ub <= self.best + 1e-12:
            return
        a = self.order[depth]
        children = []
        for o in range(len(self.arms[a].options)):
            k = self.q.index[(a, o)]
            if np.all(spent + self.cost[k] + np.maximum(reserve, self.completion[k]) <= self.slack):
                child = {**chosen, a: o}
                children.append((self.net_value(child), o, k))
        for child_value, o, k in sorted(children, key=lambda c: (-c[0], c[1])):
            chosen[a] = o
            self.search(depth + 1, chosen, spent + self.cost[k], np.maximum(reserve, self.completion[k]), child_value)
            del chosen[a]
            if self.exhausted:
                return
        self.search(depth + 1, chosen, spent, reserve, current)


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


def _completion(arms: Sequence[Arm], pairs: Sequence[tuple[int, int]], cost: np.ndarray) -> np.ndarray:
    """Per pair, what completing its arm from the pair's target to the whole share costs (0 at the share)."""
    full = {a: np.asarray(arm.options[-1].cost.vector()) for a, arm in enumerate(arms) if arm.options}
    return np.asarray([full[a] - cost[k] for k, (a, _) in enumerate(pairs)], dtype=float).reshape(cost.shape)


def _heuristic(
    objective: Objective,
    cost: np.ndarray,
    completion: np.ndarray,
    slack: np.ndarray,
    lam: float,
    allowed: np.ndarray,
) -> dict[int, int]:
    """A good plan fast: the better of two greedy plans (best net gain per share of the tightest budget entry, and
    best net gain), then local search (add an arm, change or drop one, or swap one for another) while a move helps.
    Every plan keeps the reserve to complete any chosen arm."""
    finite = np.isfinite(slack) & (slack > 0)
    limit = np.where(finite, slack, 1.0)
    share = np.max(np.where(finite, cost / limit, 0.0), axis=1) if len(cost) else np.zeros(0)

    def totals(chosen: Mapping[int, int]) -> tuple[np.ndarray, np.ndarray]:
        ks = [objective.index[pair] for pair in chosen.items()]
        return cost[ks].sum(axis=0), (completion[ks].max(axis=0) if ks else np.zeros(3))

    def net(chosen: Mapping[int, int]) -> float:
        return objective.value(chosen) - lam * float(sum(cost[objective.index[pair], 0] for pair in chosen.items()))

    def additions(chosen: Mapping[int, int]) -> np.ndarray:
        """Net gain of adding each pair to ``chosen`` (-inf where it does not fit or its arm is chosen)."""
        spent, reserve = totals(chosen)
        fits = np.all(spent + cost + np.maximum(reserve, completion) <= slack, axis=1)
        gain = np.nan_to_num(objective.gains(chosen), nan=-np.inf) - lam * cost[:, 0]
        return np.where(allowed & fits & (gain > 1e-12), gain, -np.inf)

    if not len(objective.pairs):
        return {}
    plans = []
    for by_ratio in (True, False):
        chosen: dict[int, int] = {}
        while True:
            gain = additions(chosen)
            if not np.isfinite(gain).any():
                break
            k = int(np.argmax(gain / np.maximum(share, 1e-9) if by_ratio else gain))
            chosen[objective.pairs[k][0]] = objective.pairs[k][1]
        plans.append(chosen)
    chosen = max(plans, key=net)
    current = net(chosen)
    while True:
        best_move, best_value = None, current + 1e-12
        for removed in [None, *chosen]:
            rest = {a: o for a, o in chosen.items() if a != removed}
            rest_value = current if removed is None else net(rest)
            if removed is not None and rest_value > best_value:
                best_move, best_value = rest, rest_value
            gain = additions(rest)
            if np.isfinite(gain).any():
                k = int(np.argmax(gain))
                if rest_value + gain[k] > best_value:
                    best_move, best_value = {**rest, objective.pairs[k][0]: objective.pairs[k][1]}, rest_value + gain[k]
        if best_move is None:
            return chosen
        chosen, current = best_move, net(best_move)
