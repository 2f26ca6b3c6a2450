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
>>> _ = g.add_edge("direct", "s", "g", cost=[5])
>>> _ = g.add_edge("e1", "s", "a", cost=[1]); _ = g.add_edge("e2", "a", "g", cost=[1])
>>> solve_exact(prepare(g)).path
['e1', 'e2']
"""

from __future__ import annotations

import math
import time
from operator import add, gt, le

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


def _beats(value: float, best: float) -> bool:
    """Strictly better than ``best`` by more than the value tolerance (so ties keep the earlier, shorter plan)."""
    return best == -math.inf or value > best + VALUE_TOLERANCE * max(1.0, abs(best))


def solve_exact(problem: Problem, *, max_labels: int | None = None, beam: int | None = None) -> PlanResult:
    """Return an optimal plan or "infeasible"; among optimal plans the one with fewest steps.

    With a discount below 1 a quick beam pass (at most ``beam`` labels per node and step, default 3; 0 skips it)
    first finds a good plan so that the exact pass can prune from the start (with discount 1 the exact pass finds
    good plans early by itself); the exact pass then proves optimality or improves on it.
    """
    started = time.perf_counter()
    if beam is None:
        beam = 3 if problem.discount < 1.0 else 0
    bounds = problem.value_bounds(min(problem.horizon, BOUND_STEPS_CAP))
    incumbent = _search(problem, bounds, beam=beam) if beam else None
    best = _search(problem, bounds, incumbent=incumbent, max_labels=max_labels) or incumbent
    if best is None:
        return PlanResult("infeasible", "exact", time.perf_counter() - started)
    walk = problem.check_walk([problem.edge_ids[e] for e in best.edges()])
    return PlanResult.from_walk(
        "optimal", "exact", walk, soft=problem.soft is not None, seconds=time.perf_counter() - started
    )


def _search(
    p: Problem,
    bounds: list[list[float]],
    *,
    beam: int | None = None,
    incumbent: _Label | None = None,
    max_labels: int | None = None,
) -> _Label | None:
    """Extend walks step by step; return the best goal label found that beats ``incumbent`` (or None).

    With ``beam`` only that many labels per node survive each step (a heuristic: no proof, used for incumbents).
    """
    horizon, d, slack, soft = p.horizon, p.discount, p.slack, p.soft
    steps_to_goal, cost_to_goal = p.steps_to_goal, p.cost_to_goal
    same_level_only = d < 1.0 or beam is not None  # with discount 1, earlier labels dominate later ones too
    best = incumbent
    best_obj = p.objective(incumbent.value, incumbent.cost) if incumbent else -math.inf
    found: _Label | None = None
    created = 0
    frontier: dict[int, list[_Label]] = {p.start: [_Label(tuple(0.0 for _ in p.budget), 0.0, -1, None, 0)]}
    archive: dict[int, list[_Label]] = {}

    def useful(bound: float, goal_step: float) -> bool:
        """Could a plan with objective up to ``bound`` reaching a goal at ``goal_step`` (at the earliest) replace the
        best one?"""
        if best is None or _beats(bound, best_obj):
            return True
        return goal_step < best.step and not _beats(best_obj, bound)  # a tie in fewer steps

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
                        total = tuple(map(add, lab.cost, c))
                        if any(map(gt, total, slack)):
                            continue
                        value = lab.value + gain
                        obj = value - soft.penalty(total) if soft else value
                        if useful(obj, t + 1):
                            best = found = _Label(total, value, e, lab, t + 1)
                            best_obj = obj
                    continue
                if steps_to_goal[w] > remaining:
                    continue
                future = bounds[remaining][w] if remaining <= BOUND_STEPS_CAP else math.inf
                lower = cost_to_goal[w]
                for lab in labels:
                    total = tuple(map(add, lab.cost, c))
                    if any(map(gt, map(add, total, lower), slack)):
                        continue
                    value = lab.value + gain
                    if best is not None and math.isfinite(future):
                        bound = value + disc_next * future - (soft.penalty(total) if soft else 0.0)
                        if not useful(bound, t + 1 + steps_to_goal[w]):
                            continue
                    pool = level.setdefault(w, [])
                    if any(old.value >= value and all(map(le, old.cost, total)) for old in pool):
                        continue
                    new = _Label(total, value, e, lab, t + 1)
                    pool[:] = [
                        old
                        for old in pool
                        if old.step != t + 1 or old.value > value or not all(map(le, total, old.cost))
                    ]
                    pool.append(new)
                    touched.add(w)
                    created += 1
                    if max_labels is not None and created > max_labels:
                        raise LabelLimitReached(created)
        frontier = {}
        for w in touched:
            labs = [lab for lab in level[w] if lab.step == t + 1]
            if beam is not None and len(labs) > beam:
                labs = sorted(labs, key=lambda lab: -lab.value)[:beam]
            if labs:
                frontier[w] = labs
    return found
