"""Exact solver: a label-setting dynamic programme over (node, steps used) with Pareto sets of cost vectors.

Walks are extended one step at a time; a label is a walk's end node, step, total cost and value. A label is dropped
when another label at the same node dominates it: it used no more steps, costs no more in every entry, and is worth
at least as much plus what its later discount could cost it (with discount d, a label at step s ahead of one at
step t >= s gains (d^s - d^t) * W more on a continuation of value W; ``bounds.least_values`` bounds W from below).
Labels are pruned when the cheapest way on to a goal within the steps left (per limit, and for a weighted sum of the
limits) leaves the budget, or when an upper bound on the value still reachable cannot beat the best plan found:
the least of several Lagrangian bounds (``bounds.dual_tables``), each the best walk's value minus mu . cost plus
mu . remaining budget.

How much such pruning saves depends on how good the best plan found is, so ``exact_path`` first gets a plan
from a beam pass and the Lagrangian walks, then searches under a falling floor (prune as if a plan worth the floor
were known): labels a bound prunes wait, with their bound, and the search resumes the ones a lower floor admits,
so the labels with the highest bounds are extended first and nothing is extended twice. Once the best plan found
beats the floor, the waiting labels that could still beat it (or tie it in fewer steps) are resumed, and what is
left is proof. This is exact for any number of limits and any discount.

Each step handles all of its labels at once as numpy arrays (extension, budget and bound checks, and dominance
against the labels of the same step and of earlier steps at the same node), so a step costs a few dozen vector
operations rather than Python work per label.

>>> from metaharness.planner.graph import PlanGraph
>>> from metaharness.planner.path.problem import path_problem
>>> g = PlanGraph("s", [3])
>>> for v in ("s", "a"): _ = g.add_node(v)
>>> _ = g.add_node("g", 1, goal=True)
>>> _ = g.add_edge("direct", "s", "g", cost=[5])
>>> _ = g.add_edge("e1", "s", "a", cost=[1]); _ = g.add_edge("e2", "a", "g", cost=[1])
>>> exact_path(path_problem(g)).path
['e1', 'e2']
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from metaharness.planner.path.bounds import (
    TABLE_STEPS_CAP,
    LagrangianTable,
    dual_tables,
    lagrangian_table,
    lagrangian_tables,
    least_values,
    reach,
)
from metaharness.planner.path.problem import VALUE_TOLERANCE, PathProblem
from metaharness.planner.result import PlanResult


class LabelLimitReached(Exception):
    """More labels than ``max_labels`` were created (``solver="auto"`` then hands over to the ILP)."""


@dataclass
class FoundPlan:
    """A feasible plan the search found: its objective (value minus any soft-target penalty), value, cost (a vector,
    one entry per limit) and edges (indices into the problem's edges)."""

    objective: float
    value: float
    cost: np.ndarray
    edges: list[int]

    @property
    def steps(self) -> int:
        return len(self.edges)


def _beats(value: float, best: float) -> bool:
    """Strictly better than ``best`` by more than the value tolerance (so ties keep the earlier, shorter plan)."""
    return best == -math.inf or value > best + VALUE_TOLERANCE * max(1.0, abs(best))


def beam_plan(problem: PathProblem, *, beam: int = 3) -> FoundPlan | None:
    """A good feasible plan fast, without proof: the beam search alone (at most ``beam`` labels per node and step).
    The ILP starts from it."""
    zero = lagrangian_table(problem, [0.0] * problem.limits)
    return _Search(_Shared(problem, [zero]), beam=beam).run()


# Subgradient steps for the Lagrangian tables, and the factors by which each multiplier of the best table is scaled
# for more tables: labels deep in the search have other remaining budgets than the start, and other best multipliers.
DUAL_ITERATIONS = 16
MULTIPLIER_FACTORS = (0.5, 2.0)
# The first floor sits this fraction of the gap (the root's upper bound minus the first plan's value) below the
# upper bound; each later one admits about half as many waiting labels as the search has kept (at least
# ADMIT_AT_LEAST; their descendants come with them), and drops at most twice as far as the one before.
FIRST_FLOOR = 1 / 64
ADMIT_AT_LEAST = 64


def exact_path(problem: PathProblem, *, max_labels: int | None = None, beam: int = 3) -> PlanResult:
    """Return an optimal plan or "infeasible"; among optimal plans the one with fewest steps.

    A beam search (at most ``beam`` labels per node and step; 0 skips it) and the Lagrangian walks give a first
    plan. Then the exact search runs under a falling floor (module docstring) until the best plan beats it, and
    finishes with the waiting labels that could still beat that plan. ``max_labels`` caps the labels the exact
    search may keep (``LabelLimitReached``).
    """
    started = time.perf_counter()
    p = problem
    zero = lagrangian_table(p, [0.0] * p.limits)
    shared = _Shared(p, [zero])
    incumbent = _Search(shared, beam=beam).run() if beam else None
    tables, walks = dual_tables(p, _objective(incumbent), first=zero, iterations=DUAL_ITERATIONS)
    shared.use(tables + _scaled_tables(p, tables))
    for route in walks:  # a Lagrangian walk that fits the budget is a plan too
        plan = _plan_of(p, route)
        if plan is not None and (incumbent is None or _better(plan, incumbent)):
            incumbent = plan
    search = _Search(shared, best=incumbent, labels=_Budget(max_labels))
    upper = min(table.bound(0, p.start, p.slack) for table in tables)
    lower = _objective(incumbent)
    floor = upper - (upper - lower if math.isfinite(lower) else max(1.0, abs(upper))) * FIRST_FLOOR
    drop = upper - floor
    while math.isfinite(floor) and _beats(floor, search.objective):
        search.run(floor)
        lower = min(max(search.next_floor(), floor - 2 * drop), floor - 4 * VALUE_TOLERANCE * max(1.0, abs(floor)))
        floor, drop = lower, floor - lower
    best = search.run()
    if best is None:
        return PlanResult("infeasible", "exact", time.perf_counter() - started)
    walk = p.check_walk([p.edge_ids[e] for e in best.edges])
    return PlanResult.from_walk(
        "optimal", "exact", walk, soft=p.soft is not None, seconds=time.perf_counter() - started
    )


def _scaled_tables(p: PathProblem, tables: list[LagrangianTable]) -> list[LagrangianTable]:
    """Tables whose multipliers are the best table's with one entry scaled by each of ``MULTIPLIER_FACTORS``."""
    if not p.limits:
        return []
    best = min(tables, key=lambda t: t.bound(0, p.start, p.slack)).mu
    scaled = []
    for j in range(p.limits):
        for factor in MULTIPLIER_FACTORS:
            mu = best.copy()
            mu[j] = mu[j] * factor if mu[j] > 0 else (factor - 1.0) * max(float(best.mean()), 0.0)
            if mu[j] >= 0 and not np.array_equal(mu, best):
                scaled.append(mu)
    return lagrangian_tables(p, scaled) if scaled else []


class _Budget:
    """Labels the exact search may still keep (None: no cap)."""

    def __init__(self, cap: int | None) -> None:
        self.left = cap

    def spend(self, count: int) -> None:
        if self.left is not None:
            self.left -= count
            if self.left < 0:
                raise LabelLimitReached()


def _objective(plan: FoundPlan | None) -> float:
    return -math.inf if plan is None else plan.objective


def _better(a: FoundPlan, b: FoundPlan) -> bool:
    return _beats(a.objective, b.objective) or (a.steps < b.steps and not _beats(b.objective, a.objective))


def _plan_of(p: PathProblem, walk: list[int]) -> FoundPlan | None:
    """``walk`` as a plan when it is feasible (the Lagrangian walks may break the budget)."""
    a = p.arrays
    if not walk or len(walk) > p.horizon or not a.goal[a.dst[walk[-1]]] or a.goal[a.dst[walk[:-1]]].any():
        return None
    cost = a.cost[walk].sum(axis=0)
    if (cost > np.asarray(p.slack)).any():
        return None
    value = float(np.dot(p.discount ** np.arange(len(walk)), a.reward[a.dst[walk]]))
    return FoundPlan(p.objective(value, cost.tolist()), value, cost, list(walk))


class _Shared:
    """What every pass over one problem reads: the resource lower bounds, the Lagrangian rows and the dominance
    margins."""

    def __init__(self, p: PathProblem, tables: list[LagrangianTable]) -> None:
        self.p = p
        self.a = p.arrays
        self.reach = reach(p)
        self.slack = np.asarray(p.slack, dtype=float)
        self.weighted_slack = float(self.reach.weight @ self.slack)
        self.dpow = p.discount ** np.arange(p.horizon + 1, dtype=float)
        if p.soft is not None:
            self.soft_target = np.asarray(p.soft.target, dtype=float)
            self.soft_weight = np.asarray(p.soft.weight, dtype=float)
        # margin(s)[w]: a label at w and step s is dominated by one at an earlier step s' that costs no more and is
        # worth at least its value + (d^s' - d^s) * margin(s)[w] (minus the least value of a continuation from w
        # within the remaining steps; no bound, +inf, beyond the table; 0 when d = 1).
        self.low = least_values(p, min(p.horizon, TABLE_STEPS_CAP)) if p.discount < 1.0 else None
        # Twice the largest |value| any label can have, and more: the pool orders labels by node * span - value.
        self.span = 4.0 * (float(np.abs(self.a.reward).max(initial=0.0)) * (p.horizon + 1) + 1.0)
        self.use(tables)

    def use(self, tables: list[LagrangianTable]) -> None:
        """Bound labels with these tables: a label's bound is min_k G_k[t][w] + mu_k . (slack - cost)."""
        self.mu = np.stack([t.mu for t in tables])
        self.mu_slack = self.mu @ self.slack
        self.G = np.stack([t.G for t in tables])

    def margin(self, step: int) -> np.ndarray | None:
        """Per node, the margin of dominance across steps for labels at ``step`` (None: 0 everywhere)."""
        if self.low is None:
            return None
        left = self.p.horizon - step
        if left >= len(self.low):
            return np.full(len(self.a.goal), np.inf)
        return -self.low[left]

    def penalty(self, total: np.ndarray) -> np.ndarray | float:
        if self.p.soft is None:
            return 0.0
        return (np.maximum(0.0, total - self.soft_target) * self.soft_weight).sum(axis=1)


class _Labels:
    """Labels as two arrays: ``ints`` with the columns node, parent (the parent's label id; -1: none) and edge (-1:
    none); ``floats`` with value, bound (of what the label can still reach; for waiting labels), goal step (the
    earliest step it can reach a goal), then the cost entries."""

    def __init__(self, ints: np.ndarray, floats: np.ndarray) -> None:
        self.ints = ints
        self.floats = floats

    @classmethod
    def of(cls, node, parent, edge, value, bound, goal_step, cost) -> _Labels:
        return cls(np.column_stack([node, parent, edge]), np.column_stack([value, bound, goal_step, cost]))

    def __len__(self) -> int:
        return len(self.ints)

    node = property(lambda self: self.ints[:, 0])
    parent = property(lambda self: self.ints[:, 1])
    edge = property(lambda self: self.ints[:, 2])
    value = property(lambda self: self.floats[:, 0])
    bound = property(lambda self: self.floats[:, 1])
    goal_step = property(lambda self: self.floats[:, 2])
    cost = property(lambda self: self.floats[:, 3:])

    def take(self, keep: np.ndarray) -> _Labels:
        return _Labels(self.ints[keep], self.floats[keep])

    @staticmethod
    def join(parts: list[_Labels]) -> _Labels:
        if len(parts) == 1:
            return parts[0]
        return _Labels(np.concatenate([p.ints for p in parts]), np.concatenate([p.floats for p in parts]))


class _Pool:
    """The kept labels, sorted by node and then by value, highest first (``ptr[v]:ptr[v + 1]`` are node v's):
    ``key`` = node * span - value (``span`` exceeds twice any label's |value|), and ``rows`` with the columns value,
    step, then the cost entries."""

    def __init__(self, nodes: int, limits: int, span: float) -> None:
        self.nodes = nodes
        self.span = span
        self.key = np.zeros(0)
        self.rows = np.zeros((0, 2 + limits))
        self.ptr = np.zeros(nodes + 1, dtype=np.int64)

    value = property(lambda self: self.rows[:, 0])
    step = property(lambda self: self.rows[:, 1])
    cost = property(lambda self: self.rows[:, 2:])

    def add(self, labels: _Labels, step: int) -> None:
        """Add labels sorted by node, then value (highest first), kept at ``step``."""
        key = labels.node * self.span - labels.value
        at = np.searchsorted(self.key, key, side="right")
        self.key = np.insert(self.key, at, key)
        rows = np.column_stack([labels.value, np.full(len(labels), float(step)), labels.cost])
        self.rows = np.insert(self.rows, at, rows, axis=0)
        self.ptr = np.searchsorted(self.key, np.arange(self.nodes + 1) * self.span - self.span / 2)

    def at_least(self, node: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each (node, value): where its labels worth at least ``value`` start, and how many there are (a
        rounding error only changes how many are compared, never a comparison)."""
        start = self.ptr[node]
        threshold = np.clip(value, -self.span / 4, self.span / 4)
        end = np.clip(np.searchsorted(self.key, node * self.span - threshold, side="right"), start, self.ptr[node + 1])
        return start, end - start


def _segments(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For item i with ``counts[i]`` partners at ``starts[i] .. starts[i] + counts[i] - 1``: the pairs (item,
    partner) as two index arrays."""
    total = int(counts.sum())
    items = np.repeat(np.arange(len(counts)), counts)
    offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    return items, starts[items] + offsets


def _no_dearer(
    cost: np.ndarray, items: np.ndarray, others: np.ndarray, other_cost: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (item, other) whose other costs no more than the item in every entry (``other_cost`` defaults to
    ``cost``); entry by entry, so each comparison runs on the pairs that are still candidates."""
    other_cost = cost if other_cost is None else other_cost
    for j in range(cost.shape[1]):
        cheaper = other_cost[others, j] <= cost[items, j]
        items, others = items[cheaper], others[cheaper]
    return items, others


class _Search:
    """The label search over one problem; ``run`` resumes it under a floor (see the module docstring).

    Labels a bound prunes wait in ``waiting`` (by step). With ``beam`` only that many labels per node survive
    each step and pruned labels are dropped, not kept waiting (a heuristic: no proof, used for the first plan).
    """

    def __init__(
        self, shared: _Shared, *, best: FoundPlan | None = None, labels: _Budget | None = None, beam: int | None = None
    ) -> None:
        self.shared = shared
        self.best = best
        self.labels = labels or _Budget(None)
        self.beam = beam
        self.kept = 0
        p = shared.p
        self.pool = _Pool(len(shared.a.goal), p.limits, shared.span)
        self.parent: list[int] = []
        self.via: list[int] = []
        start = _Labels.of([p.start], [-1], [-1], [0.0], [math.inf], [0.0], np.zeros((1, p.limits)))
        self.waiting: dict[int, _Labels] = {0: start}

    @property
    def objective(self) -> float:
        return _objective(self.best)

    def next_floor(self) -> float:
        """A floor that admits about an eighth as many waiting labels as the search has kept (-inf: none waits)."""
        if not self.waiting:
            return -math.inf
        pending = np.concatenate([w.bound for w in self.waiting.values()])
        count = min(len(pending), max(self.kept // 8, ADMIT_AT_LEAST))
        bound = float(np.partition(pending, len(pending) - count)[len(pending) - count])
        return bound - 2 * VALUE_TOLERANCE * max(1.0, abs(bound))  # so labels with exactly this bound are admitted

    def run(self, floor: float = -math.inf) -> FoundPlan | None:
        """Extend every label that could beat ``floor`` and the best plan (or tie the best in fewer steps), and
        their descendants; return the best plan found so far (None: none yet)."""
        shared = self.shared
        p, a = shared.p, shared.a
        horizon, slack, dpow, rch = p.horizon, shared.slack, shared.dpow, shared.reach
        due = [s for s, w in self.waiting.items() if self._may_admit(w, floor)]
        if not due:
            return self.best
        step, last = min(due), max(due)
        frontier: _Labels | None = None  # the labels kept at the step before; their ids follow from ``first_id``
        first_id = 0
        while step <= horizon and (step <= last or frontier is not None):
            incoming = [self._resume(step, floor)] if step in self.waiting else []
            if frontier is not None:
                starts = a.out_ptr[frontier.node]
                which, slot = _segments(starts, a.out_ptr[frontier.node + 1] - starts)
                edge = a.by_source[slot]
                w = a.dst[edge]
                total = frontier.cost[which] + a.cost[edge]
                val = frontier.value[which] + dpow[step - 1] * a.reward[w]
                fits = (total <= slack).all(axis=1)
                ends = a.goal[w]
                self._goals(np.flatnonzero(fits & ends), total, val, first_id + which, edge, step)
                # Budget and reach: the cheapest way on to a goal within the steps left must fit.
                steps_left = horizon - step
                r = rch.row(steps_left)
                keep = fits & ~ends & (rch.steps[w] <= steps_left)
                keep &= (total + rch.cost[r, w] <= slack).all(axis=1)
                if p.limits > 1:
                    keep &= total @ rch.weight + rch.weighted[r, w] <= shared.weighted_slack
                idx = np.flatnonzero(keep)
                wi, ti = w[idx], total[idx]
                if step < shared.G.shape[1]:
                    bound = (shared.G[:, step, wi] + shared.mu_slack[:, None] - shared.mu @ ti.T).min(axis=0)
                    bound += val[idx] - shared.penalty(ti)
                else:
                    bound = np.full(len(idx), np.inf)
                born = _Labels.of(wi, first_id + which[idx], edge[idx], val[idx], bound, step + rch.steps[wi], ti)
                admit = self._admits(born, floor)
                incoming.append(born.take(admit))
                if self.beam is None and not admit.all():
                    self._wait(step, born.take(~admit))
            arrived = _Labels.join(incoming) if incoming else None
            frontier = None
            if arrived is not None and len(arrived):
                first_id = len(self.parent)
                frontier = self._keep(arrived, step)
                if not len(frontier):
                    frontier = None
            step += 1
        return self.best

    def _may_admit(self, labels: _Labels, floor: float) -> bool:
        """Whether any of ``labels`` could be admitted (every admitted label has a bound near the threshold or
        above it)."""
        threshold = max(floor, self.objective)
        return threshold == -math.inf or float(labels.bound.max()) >= threshold - VALUE_TOLERANCE * max(
            1.0, abs(threshold)
        )

    def _admits(self, labels: _Labels, floor: float) -> np.ndarray:
        """Which labels could lead to a plan that beats the floor and the best plan, or ties the best in fewer
        steps."""
        threshold = max(floor, self.objective)
        if threshold == -math.inf:
            return np.ones(len(labels), dtype=bool)
        bound = labels.bound
        admit = bound > threshold + VALUE_TOLERANCE * max(1.0, abs(threshold))
        if self.best is not None:
            tie = threshold <= bound + VALUE_TOLERANCE * np.maximum(1.0, np.abs(bound))
            admit |= (labels.goal_step < self.best.steps) & tie
        return admit

    def _wait(self, step: int, labels: _Labels) -> None:
        old = self.waiting.get(step)
        self.waiting[step] = labels if old is None else _Labels.join([old, labels])

    def _resume(self, step: int, floor: float) -> _Labels:
        """Take the waiting labels of ``step`` that the floor and the best plan admit."""
        waiting = self.waiting[step]
        if not self._may_admit(waiting, floor):
            return waiting.take(np.zeros(0, dtype=np.int64))
        admit = self._admits(waiting, floor)
        if admit.all():
            del self.waiting[step]
        else:
            self.waiting[step] = waiting.take(~admit)
        return waiting.take(admit)

    def _goals(
        self, goals: np.ndarray, total: np.ndarray, value: np.ndarray, parents: np.ndarray, edge: np.ndarray, step: int
    ) -> None:
        """Keep the best of the plans that end at ``step`` with these edges if it beats the best plan (or ties it in
        fewer steps)."""
        if not len(goals):
            return
        objective = value[goals] - self.shared.penalty(total[goals])
        k = int(np.argmax(objective))
        top = float(objective[k])
        best = self.best
        if best is None or _beats(top, best.objective) or (step < best.steps and not _beats(best.objective, top)):
            g = goals[k]
            self.best = FoundPlan(top, float(value[g]), total[g], [*self._path(int(parents[g])), int(edge[g])])

    def _path(self, label: int) -> list[int]:
        edges = []
        while label >= 0 and self.via[label] >= 0:
            edges.append(self.via[label])
            label = self.parent[label]
        return edges[::-1]

    def _keep(self, labels: _Labels, step: int) -> _Labels:
        """The labels of ``step`` that no other label dominates (module docstring), sorted by node, given the next
        label ids and added to the pool."""
        shared, pool = self.shared, self.pool
        # Per node: sort by node, then value (highest first), then arrival.
        order = np.lexsort((np.arange(len(labels)), -labels.value, labels.node))
        labels = labels.take(order)
        node, cost, value = labels.node, labels.cost, labels.value
        dominated = np.zeros(len(node), dtype=bool)
        first = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
        group = np.repeat(np.arange(len(first)), np.diff(np.r_[first, len(node)]))
        group_start = first[group]
        later, earlier = _segments(group_start, np.arange(len(node)) - group_start)
        later, earlier = _no_dearer(cost, later, earlier)  # an earlier label of the node is worth at least as much
        dominated[later] = True
        margin = shared.margin(step)
        if margin is None:
            start, count = pool.at_least(node, value)
        else:
            margin = margin[node]
            start, count = pool.at_least(node, value + np.minimum(margin, 0.0))
            count[np.isinf(margin)] = 0  # no bound on what a continuation may lose: no dominance across steps
        candidates, old = _segments(start, count)
        old_step = pool.step[old]
        earlier_step = old_step <= step
        candidates, old, old_step = candidates[earlier_step], old[earlier_step], old_step[earlier_step]
        need = value[candidates]
        if margin is not None:
            need = need + (shared.dpow[old_step.astype(np.int64)] - shared.dpow[step]) * margin[candidates]
        worth = pool.value[old] >= need
        candidates, old = _no_dearer(cost, candidates[worth], old[worth], pool.cost)
        dominated[candidates] = True
        survive = ~dominated
        if self.beam is not None:  # the best ``beam`` surviving labels per node
            counted = np.cumsum(survive)
            survive &= counted - (counted - survive)[first][group] <= self.beam
        kept = labels.take(survive)
        self.labels.spend(len(kept))
        self.kept += len(kept)
        self.parent.extend(kept.parent.tolist())
        self.via.extend(kept.edge.tolist())
        pool.add(kept, step)
        return kept
