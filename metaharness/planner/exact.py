"""Exact solver: a label-setting dynamic programme over (node, steps used) with Pareto sets of cost vectors.

Walks are extended one step at a time. At each (node, step) only labels whose (total cost, value) is not dominated
(another label costs no more in every entry and is worth at least as much) are kept: both reach the same futures
with the same discount, so the dominated one can never do better. With discount 1 a label also dominates later
labels at the same node (fewer steps used leaves more horizon). Labels are pruned when the cheapest way on to a goal
(per limit) leaves the budget, when no goal is within the remaining steps, or when an upper bound on the remaining
value (ignoring the budget) cannot beat the best plan found. This is exact for any number of limits.

>>> from metaharness.planner.graph import PlanGraph
>>> from metaharness.planner.problem import prepare
>>> g = PlanGraph("s", [3])
>>> for v in ("s", "a"): _ = g.add_node(v)
>>> _ = g.add_node("g", 1, goal=True)
>>> _ = g.add_edge("direct", "s", "g", cost=[5]); _ = g.add_edge("e1", "s", "a", cost=[1]); _ = g.add_edge("e2", "a", "g", cost=[1])
>>> solve_exact(prepare(g)).path
['e1', 'e2']
"""

from __future__ import annotations

import math
import time

from metaharness.planner.problem import VALUE_TOLERANCE, Problem
from metaharness.planner.result import PlanResult

# Value-bound tables are built for at most this many remaining steps; deeper labels are pruned by the other bounds.
BOUND_STEPS_CAP = 512


class LabelLimitReached(Exception):
    """More labels than ``max_labels`` were created (used by ``solver="auto"`` to switch to the ILP)."""


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


def _dominates(a: _Label, b: _Label) -> bool:
    return a.value >= b.value and all(x <= y for x, y in zip(a.cost, b.cost))


def _beats(value: float, best: float) -> bool:
    """Strictly better than ``best`` by more than the value tolerance (so ties keep the earlier, shorter plan)."""
    return best == -math.inf or value > best + VALUE_TOLERANCE * max(1.0, abs(best))


def solve_exact(problem: Problem, *, max_labels: int | None = None) -> PlanResult:
    """Return an optimal plan or "infeasible"; ties keep the plan with fewer steps."""
    started = time.perf_counter()
    p = problem
    horizon, d, slack = p.horizon, p.discount, p.slack
    steps_to_goal, cost_to_goal = p.steps_to_goal, p.cost_to_goal
    bounds = p.value_bounds(min(horizon, BOUND_STEPS_CAP))
    soft = p.soft
    same_level_only = d < 1.0  # with discount 1, labels from earlier steps dominate later ones too

    best: _Label | None = None
    best_obj = -math.inf
    created = 0
    root = _Label(tuple(0.0 for _ in p.budget), 0.0, -1, None, 0)
    frontier: dict[int, list[_Label]] = {p.start: [root]}
    archive: dict[int, list[_Label]] = {}

    for t in range(horizon):
        if not frontier:
            break
        disc_here = d**t
        disc_next = disc_here * d
        remaining = horizon - t - 1
        level: dict[int, list[_Label]] = {} if same_level_only else archive
        touched: set[int] = set()
        for v, labels in frontier.items():
            for e in p.out[v]:
                w = p.dst[e]
                c = p.cost[e]
                gain = p.reward[w] * disc_here
                if p.goal[w]:
                    for lab in labels:
                        total = tuple(a + b for a, b in zip(lab.cost, c))
                        if any(x > s for x, s in zip(total, slack)):
                            continue
                        value = lab.value + gain
                        obj = value - soft.penalty(total) if soft else value
                        if _beats(obj, best_obj):
                            best, best_obj = _Label(total, value, e, lab, t + 1), obj
                    continue
                if steps_to_goal[w] > remaining:
                    continue
                future = bounds[remaining][w] if remaining <= BOUND_STEPS_CAP else math.inf
                lower = cost_to_goal[w]
                for lab in labels:
                    total = tuple(a + b for a, b in zip(lab.cost, c))
                    if any(x + y > s for x, y, s in zip(total, lower, slack)):
                        continue
                    value = lab.value + gain
                    if best is not None and math.isfinite(future):
                        bound = value + disc_next * future
                        if soft:
                            bound -= soft.penalty(total)
                        if not _beats(bound, best_obj):
                            continue
                    new = _Label(total, value, e, lab, t + 1)
                    pool = level.setdefault(w, [])
                    if any(_dominates(old, new) for old in pool):
                        continue
                    pool[:] = [old for old in pool if old.step != t + 1 or not _dominates(new, old)]
                    pool.append(new)
                    touched.add(w)
                    created += 1
                    if max_labels is not None and created > max_labels:
                        raise LabelLimitReached(created)
        frontier = {w: [lab for lab in level[w] if lab.step == t + 1] for w in touched}
        frontier = {w: labs for w, labs in frontier.items() if labs}

    seconds = time.perf_counter() - started
    if best is None:
        return PlanResult("infeasible", "exact", seconds)
    walk = p.check_walk([p.edge_ids[e] for e in best.edges()])
    return PlanResult.from_walk("optimal", "exact", walk, soft=soft is not None, seconds=time.perf_counter() - started)
