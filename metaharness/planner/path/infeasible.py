"""Why a plan graph has no feasible plan: the first reason that applies, and the closest miss when there is one.

The checks go from the structure to the budget: no goal node; no goal reachable from the start (without passing
another goal); the nearest goal further than the horizon; a limit that even its own cheapest way to a goal breaks;
otherwise the walk that breaks the budget least (the least sum of cost / budget over the limits, within the
horizon), with what it costs and by how much it exceeds each limit.

>>> from metaharness.planner.graph import PlanGraph
>>> from metaharness.planner.path.problem import path_problem
>>> g = PlanGraph("s", [2, 2], limits=["steps", "usd"])
>>> for v in ("s", "a"): _ = g.add_node(v)
>>> _ = g.add_node("g", 1, goal=True)
>>> _ = g.add_edge("fast", "s", "g", cost=[1, 3])
>>> _ = g.add_edge("e1", "s", "a", cost=[1, 1]); _ = g.add_edge("e2", "a", "g", cost=[2, 1])
>>> found = diagnose(path_problem(g))
>>> found.reason
'No walk to a goal fits every limit at once; the closest miss (fast) costs steps 1, usd 3 and exceeds usd by 1.'
>>> found.closest["over"]
{'usd': 1.0}
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from metaharness.planner.path.bounds import reach
from metaharness.planner.path.problem import PathProblem


@dataclass(frozen=True)
class Diagnosis:
    """``reason``: one sentence; ``closest``: the closest miss as ``{"path", "nodes", "cost", "over"}`` (edge ids,
    node ids, its cost by limit name, and the amount by which it exceeds each limit it breaks), or None."""

    reason: str
    closest: dict[str, Any] | None = None


def diagnose(p: PathProblem) -> Diagnosis:
    """The reason ``p`` has no feasible plan (call it on a problem a solver proved infeasible)."""
    a = p.arrays
    names = p.names
    start = p.node_ids[p.start]
    if not a.goal.any():
        return Diagnosis('The graph has no goal node: mark the node(s) that satisfy the goal with "goal": true.')
    need = reach(p)
    # From the start (which may itself be a goal: a plan takes at least one step) through each of its edges.
    first = a.out_edges(p.start)
    ends = a.goal[a.dst[first]]
    steps = float((1 + np.where(ends, 0.0, need.steps[a.dst[first]])).min(initial=math.inf))
    if math.isinf(steps):
        return Diagnosis(f"No goal can be reached from the start {start!r} (without passing another goal first).")
    if steps > p.horizon:
        return Diagnosis(
            f"The nearest goal is {int(steps)} steps from the start {start!r}, beyond the horizon of {p.horizon}."
        )
    after = np.where(ends[:, None], 0.0, need.cost[need.row(p.horizon - 1), a.dst[first]])
    cheapest = (a.cost[first] + after).min(axis=0)
    alone = [
        f"{n} needs {c:g} (budget {b:g})"
        for n, c, b, s in zip(names, cheapest, p.budget, p.slack, strict=True)
        if c > s
    ]
    if alone:
        return Diagnosis(f"Even the cheapest way to a goal in each limit alone breaks the budget: {'; '.join(alone)}.")
    walk = _least_weighted_walk(p)
    cost = a.cost[walk].sum(axis=0)
    over = {n: float(c - b) for n, c, b, s in zip(names, cost, p.budget, p.slack, strict=True) if c > s}
    if not over:  # not expected after a proof of infeasibility; a solver stopped early may leave this case
        return Diagnosis("No feasible plan was found.")
    nodes = [start] + [p.node_ids[int(a.dst[e])] for e in walk]
    closest = {"path": [p.edge_ids[e] for e in walk], "nodes": nodes, "cost": p.by_name(cost), "over": over}
    spent = ", ".join(f"{n} {c:g}" for n, c in zip(names, cost, strict=True))
    excess = ", ".join(f"{n} by {x:g}" for n, x in over.items())
    return Diagnosis(
        f"No walk to a goal fits every limit at once; the closest miss ({', '.join(map(str, closest['path']))}) "
        f"costs {spent} and exceeds {excess}.",
        closest,
    )


def _least_weighted_walk(p: PathProblem) -> list[int]:
    """The walk to a first goal within the horizon with the least sum over the limits of cost / budget."""
    a = p.arrays
    need = reach(p)
    price = a.cost @ need.weight
    path: list[int] = []
    at, left = p.start, p.horizon
    while left > 0 and not (path and a.goal[at]):
        edges = a.out_edges(at)
        after = np.where(a.goal[a.dst[edges]], 0.0, need.weighted[need.row(left - 1), a.dst[edges]])
        e = int(edges[int(np.argmin(price[edges] + after))])
        path.append(e)
        at, left = int(a.dst[e]), left - 1
    return path
