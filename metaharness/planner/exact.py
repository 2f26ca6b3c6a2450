"""Exact solver: a label-setting dynamic programme over (node, steps used) with Pareto sets of cost vectors.

Walks are extended one step at a time; a label is a walk's end node, step, total cost and value. A label is dropped
when another label at the same node dominates it: it used no more steps, costs no more in every entry, and is worth
at least as much plus what its later discount could cost it (with discount d, a label at step s ahead of one at
step t >= s gains (d^s - d^t) * W more on a continuation of value W; ``bounds.least_values`` bounds W from below).
Labels are pruned when the cheapest way on to a goal (per limit, and for a weighted sum of the limits) leaves the
budget, when no goal is within the remaining steps, or when an upper bound on the value still reachable cannot beat
the best plan found: the least of several Lagrangian bounds (``bounds.dual_tables``), each the best walk's value
minus mu . cost plus mu . remaining budget.

How much such pruning saves depends on how good the best plan found is, so :func:`solve_exact` first gets a plan
from a beam pass and the Lagrangian walks, then runs passes with a falling floor (prune as if a plan worth the
floor were known). Passes above the optimum find nothing and are cheap; the first pass that finds a plan has found
the optimum, since everything it pruned was bounded by its floor or by that plan. This is exact for any number of
limits and any discount.

>>> from metaharness.planner.graph import PlanGraph
>>> from metaharness.planner.problem import prepare
>>> g = PlanGraph("s", [3])
>>> for v in ("s", "a"): _ = g.add_node(v)
>>> _ = g.add_node("g", 1, goal=True)
>>> _ = g.add_edge("direct", "s", "g", cost=[5])
>>> _ = g.add_edge("e1", "s", "a", cost=[1]); _ = g.add_edge("e2", "a", "g", cost=[1])
>>> solve_exact(prepare(g)).path
['e1', 'e2']
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Sequence
from operator import add, gt, le, mul

from metaharness.planner.bounds import (
    TABLE_STEPS_CAP,
    LagrangianTable,
    dual_tables,
    lagrangian_table,
    least_values,
    weighted_cost_to_goal,
)
from metaharness.planner.problem import VALUE_TOLERANCE, Problem
from metaharness.planner.result import PlanResult


class LabelLimitReached(Exception):
    """More labels than ``max_labels`` were created (``solver="auto"`` then hands over to the ILP)."""


class _Label:
    __slots__ = ("cost", "edge", "parent", "step", "value")

    def __init__(self, cost: tuple[float, ...], value: float, edge: int, parent: _Label | None, step: int) -> None:
        self.cost = cost
        self.value = value
        self.edge = edge
        self.parent = parent
        self.step = step

    def edges(self) -> list[int]:
        out = []
        label: _Label | None = self
        while label is not None and label.edge >= 0:
            out.append(label.edge)
            label = label.parent
        return out[::-1]


def _beats(value: float, best: float) -> bool:
    """Strictly better than ``best`` by more than the value tolerance (so ties keep the earlier, shorter plan)."""
    return best == -math.inf or value > best + VALUE_TOLERANCE * max(1.0, abs(best))


def solve_exact(problem: Problem, *, max_labels: int | None = None, beam: int = 3) -> PlanResult:
    """Return an optimal plan or "infeasible"; among optimal plans the one with fewest steps.

    A beam pass (at most ``beam`` labels per node and step; 0 skips it) and the Lagrangian walks give a first plan.
    Then exact passes run with a floor falling from the root's upper bound towards that plan's value: a pass
    prunes as if a plan worth the floor were known, so it is cheap, and the first pass that finds a plan better than
    its floor has found the optimum (every pruned label was bounded by the floor or by that plan). The last pass
    has no floor. ``max_labels`` caps the labels all passes together may create (:class:`LabelLimitReached`).
    """
    started = time.perf_counter()
    p = problem
    zero = lagrangian_table(p, [0.0] * p.limits)
    budget = _Budget(max_labels)
    shared = _Shared(p, [zero])
    incumbent = _search(shared, beam=beam, budget=_Budget(None)) if beam else None
    tables, walks = dual_tables(p, _objective(p, incumbent), first=zero)
    shared.use(tables)
    for route in walks:  # a Lagrangian walk that fits the budget is a plan too
        label = _label_of(p, route)
        if label is not None and (incumbent is None or _better(p, label, incumbent)):
            incumbent = label
    upper = min(table.bound(0, p.start, p.slack) for table in tables)
    best = None
    for floor in _floors(upper, _objective(p, incumbent)):
        best = _search(shared, incumbent=incumbent, floor=floor, budget=budget)
        if best is not None:
            break
    else:
        best = _search(shared, incumbent=incumbent, budget=budget)
    best = best or incumbent
    if best is None:
        return PlanResult("infeasible", "exact", time.perf_counter() - started)
    walk = p.check_walk([p.edge_ids[e] for e in best.edges()])
    return PlanResult.from_walk(
        "optimal", "exact", walk, soft=p.soft is not None, seconds=time.perf_counter() - started
    )


# Floors sit at upper - gap * f for these f (gap: upper bound minus the first plan's value), from gap / 64 on: passes
# above the optimum fail fast, and the factor of 2^(1/4) between floors keeps the successful one close below it.
FLOOR_FRACTIONS = tuple(2 ** (-k / 4) for k in range(24, 0, -1))


def _floors(upper: float, lower: float) -> list[float]:
    if not math.isfinite(upper) or upper <= lower:
        return []
    gap = upper - lower if math.isfinite(lower) else max(1.0, abs(upper))
    return [upper - gap * f for f in FLOOR_FRACTIONS]


class _Budget:
    """Labels the exact passes may still create (None: no cap)."""

    def __init__(self, cap: int | None) -> None:
        self.left = cap

    def spend(self) -> None:
        if self.left is not None:
            self.left -= 1
            if self.left < 0:
                raise LabelLimitReached()


def _objective(p: Problem, label: _Label | None) -> float:
    return -math.inf if label is None else p.objective(label.value, label.cost)


def _better(p: Problem, a: _Label, b: _Label) -> bool:
    oa, ob = _objective(p, a), _objective(p, b)
    return _beats(oa, ob) or (a.step < b.step and not _beats(ob, oa))


def _label_of(p: Problem, walk: list[int]) -> _Label | None:
    """The goal label of ``walk`` when it is a feasible plan (its Lagrangian walks may break the budget)."""
    label = _Label(tuple(0.0 for _ in p.budget), 0.0, -1, None, 0)
    for i, e in enumerate(walk):
        if i and p.goal[p.src[e]]:
            return None
        total = tuple(map(add, label.cost, p.cost[e]))
        label = _Label(total, label.value + p.discount**i * p.reward[p.dst[e]], e, label, i + 1)
    if not walk or not p.goal[p.dst[walk[-1]]] or any(map(gt, label.cost, p.slack)) or label.step > p.horizon:
        return None
    return label


class _Shared:
    """What every pass over one problem reads: the Lagrangian rows, the resource lower bounds and the dominance
    margins."""

    def __init__(self, p: Problem, tables: list[LagrangianTable]) -> None:
        self.p = p
        slack = p.slack
        self.weight = tuple(1.0 / b if b > 0 else 0.0 for b in slack)
        self.weighted_lower = weighted_cost_to_goal(p, self.weight) if p.limits > 1 else None
        self.weighted_slack = sum(w * s for w, s in zip(self.weight, slack, strict=False))
        self.dpow = [p.discount**t for t in range(p.horizon + 1)]
        self.use(tables)
        # margin[s][w]: a label at w and step s is dominated by one at an earlier step s' that costs no more and is
        # worth at least its value + (d^s' - d^s) * margin[s][w] (minus the least value of a continuation from w
        # within the remaining steps; nothing to add when d = 1, no dominance across steps beyond the tables).
        self.margin: list[list[float]] | None = None
        if p.discount < 1.0:
            low = least_values(p, min(p.horizon, TABLE_STEPS_CAP))
            n = len(p.node_ids)
            self.margin = [
                [-x for x in low[p.horizon - s]] if p.horizon - s < len(low) else [math.inf] * n
                for s in range(p.horizon + 1)
            ]

    def use(self, tables: list[LagrangianTable]) -> None:
        # Per table: mu, mu . slack and the rows of G; a label's bound is min_k G_k[t][w] + mu_k . (slack - cost).
        # Tightest at the start first: most labels are then pruned by the first table they are checked against.
        p = self.p
        ordered = sorted(tables, key=lambda t: t.bound(0, p.start, p.slack))
        self.duals = [(t.mu, sum(m * s for m, s in zip(t.mu, p.slack, strict=False)), t.G) for t in ordered]


def _search(
    shared: _Shared,
    *,
    budget: _Budget,
    beam: int | None = None,
    incumbent: _Label | None = None,
    floor: float = -math.inf,
) -> _Label | None:
    """Extend walks step by step; return the best goal label found that beats ``incumbent`` and ``floor`` (or None).

    With ``beam`` only that many labels per node survive each step (a heuristic: no proof, used for incumbents).
    """
    p = shared.p
    horizon, slack, soft = p.horizon, p.slack, p.soft
    steps_to_goal, cost_to_goal = p.steps_to_goal, p.cost_to_goal
    weight, weighted_lower, weighted_slack = shared.weight, shared.weighted_lower, shared.weighted_slack
    dpow, duals, margins = shared.dpow, shared.duals, shared.margin
    best = incumbent
    best_obj = _objective(p, incumbent)
    floor_only = floor > best_obj  # prune as if a plan worth ``floor`` were known (until one beats it)
    if floor_only:
        best_obj = floor
    found: _Label | None = None
    frontier: dict[int, list[_Label]] = {p.start: [_Label(tuple(0.0 for _ in p.budget), 0.0, -1, None, 0)]}
    # The kept labels per node, each list sorted by value (highest first): of this step, and of earlier steps.
    current: dict[int, list[_Label]] = {}
    earlier: dict[int, list[_Label]] = {}

    def useful(bound: float, goal_step: float) -> bool:
        """Could a plan with objective up to ``bound`` reaching a goal at ``goal_step`` (at the earliest) replace the
        best one?"""
        if (best is None and not floor_only) or _beats(bound, best_obj):
            return True
        return best is not None and goal_step < best.step and not _beats(best_obj, bound)  # a tie in fewer steps

    for t in range(horizon):
        if not frontier:
            break
        disc_here = dpow[t]
        remaining = horizon - t - 1
        touched: set[int] = set()
        row = t + 1
        for v, labels in frontier.items():
            for e in p.out[v]:
                w = p.dst[e]
                c = p.cost[e]
                gain = p.reward[w] * disc_here
                if p.goal[w]:
                    for lab in labels:
                        total = tuple(map(add, lab.cost, c))
                        if any(map(gt, total, slack)):
                            continue
                        value = lab.value + gain
                        obj = value - soft.penalty(total) if soft else value
                        if useful(obj, row):
                            best = found = _Label(total, value, e, lab, row)
                            best_obj = obj
                            floor_only = False
                    continue
                if steps_to_goal[w] > remaining:
                    continue
                lower = cost_to_goal[w]
                wlow = weighted_lower[w] if weighted_lower is not None else 0.0
                bases = [(mu, g[row][w] + ms) for mu, ms, g in duals if row < len(g)]
                margin = 0.0 if margins is None else margins[row][w]
                goal_step = row + steps_to_goal[w]
                here = current.setdefault(w, [])
                before = earlier.get(w, ())
                for lab in labels:
                    total = tuple(map(add, lab.cost, c))
                    if any(map(gt, map(add, total, lower), slack)):
                        continue
                    if weighted_lower is not None and wlow + sum(map(mul, weight, total)) > weighted_slack:
                        continue
                    value = lab.value + gain
                    if (best is not None or floor_only) and bases:
                        known = value - soft.penalty(total) if soft else value
                        if any(not useful(known + base - sum(map(mul, mu, total)), goal_step) for mu, base in bases):
                            continue  # some bound cannot beat the best plan (the tightest tables come first)
                    if _dominated(here, before, value, total, row, dpow, margin):
                        continue
                    at = _insert(here, _Label(total, value, e, lab, row))
                    here[at + 1 :] = [old for old in here[at + 1 :] if not all(map(le, total, old.cost))]
                    touched.add(w)
                    budget.spend()
        frontier = {}
        for w in touched:
            labs = current.pop(w)
            if beam is not None and len(labs) > beam:
                del labs[beam:]
            frontier[w] = labs
            pool = earlier.setdefault(w, [])
            for lab in labs:
                _insert(pool, lab)
    return found


def _insert(pool: list[_Label], label: _Label) -> int:
    """Insert ``label`` into ``pool`` (sorted by value, highest first; after equal values); return its index."""
    at = bisect.bisect_right(pool, -label.value, key=_negated_value)
    pool.insert(at, label)
    return at


def _negated_value(label: _Label) -> float:
    return -label.value


def _dominated(
    here: list[_Label],
    before: Sequence[_Label],
    value: float,
    total: tuple[float, ...],
    step: int,
    dpow: list[float],
    margin: float,
) -> bool:
    """Whether a kept label at the same node dominates a new one at ``step`` (see the module docstring): ``here``
    holds the labels of the same step, ``before`` those of earlier steps, both sorted by value (highest first)."""
    for old in here:
        if old.value < value:
            break
        if all(map(le, old.cost, total)):
            return True
    if margin == math.inf:
        return False  # no bound on what a continuation may lose
    now = dpow[step]
    least = value + min(0.0, margin)  # (d^s - d^step) * margin >= min(0, margin)
    for old in before:
        if old.value < least:
            break
        if old.value >= value + (dpow[old.step] - now) * margin and all(map(le, old.cost, total)):
            return True
    return False
