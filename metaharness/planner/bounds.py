"""Bounds for the exact solver: what a label at (node, step) can still gain, and what it must still lose.

All tables ignore the path taken so far and relax the budget, so they bound every feasible continuation:

- :func:`lagrangian_table`: for multipliers mu >= 0 (one per limit), ``G[t][v]`` is the largest
  sum_i (discount^i * reward(v(i+1)) - mu . cost(e(i+1))) over walks from v that start at absolute step t and end at
  their first goal by the horizon. A continuation that fits the remaining budget R gains at most G[t][v] + mu . R,
  since mu . cost <= mu . R; with mu = 0 this is the budget-free bound. :func:`dual_tables` picks several mu by
  subgradient steps on the start's bound (a Lagrangian dual), and the solver takes the least bound over them.
- :func:`least_values`: ``low[s][v]``, the least value (first step undiscounted) of a walk from v to a goal in at
  most s steps; it prices how much a later label loses to discounting, for dominance across steps.
- ``Problem.steps_to_goal`` and ``Problem.cost_to_goal`` (per-limit shortest paths to the goals on the reverse
  graph) are the resources still needed; :func:`weighted_cost_to_goal` adds shortest paths for a weighted sum of
  the limits, which binds when no single limit does.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from metaharness.planner.problem import Problem

# Tables are built for at most this many absolute steps; labels deeper than that get no value bound (+inf).
TABLE_STEPS_CAP = 512


@dataclass
class LagrangianTable:
    """``G[t][v]`` as above for multipliers ``mu``; ``choice[t][v]`` is the maximising edge (-1 where none)."""

    mu: tuple[float, ...]
    G: list[list[float]]
    choice: list[list[int]]

    def bound(self, t: int, v: int, remaining: Sequence[float]) -> float:
        """Upper bound on what a label at ``v`` after ``t`` steps with ``remaining`` budget can still gain."""
        if t >= len(self.G):
            return math.inf
        return self.G[t][v] + sum(m * r for m, r in zip(self.mu, remaining, strict=False) if m)

    def walk(self, p: Problem) -> list[int]:
        """The maximising walk from the start (edge indices; [] when no goal is reachable)."""
        path, at = [], p.start
        for t in range(len(self.choice)):
            e = self.choice[t][at]
            if e < 0:
                return []
            path.append(e)
            at = p.dst[e]
            if p.goal[at]:
                return path
        return []


def lagrangian_table(p: Problem, mu: Sequence[float]) -> LagrangianTable:
    """Backward DP over absolute steps H-1 .. 0 (``H`` capped at :data:`TABLE_STEPS_CAP`)."""
    n, steps = len(p.node_ids), min(p.horizon, TABLE_STEPS_CAP)
    penalty = [sum(m * c for m, c in zip(mu, cost, strict=False) if m) for cost in p.cost]
    # Walks still running at the cap are not bounded by the table: +inf beyond it.
    nxt = [math.inf if steps < p.horizon else -math.inf] * n
    edges = [(e, p.src[e], p.dst[e], p.goal[p.dst[e]]) for e in range(len(p.src))]
    reward, goal_reward = p.reward, [r if g else 0.0 for r, g in zip(p.reward, p.goal, strict=False)]
    G: list[list[float]] = [[]] * steps
    choice: list[list[int]] = [[]] * steps
    for t in range(steps - 1, -1, -1):
        scale = p.discount**t
        row = [-math.inf] * n
        pick = [-1] * n
        for e, u, w, is_goal in edges:
            val = (scale * goal_reward[w] if is_goal else scale * reward[w] + nxt[w]) - penalty[e]
            if val > row[u]:
                row[u] = val
                pick[u] = e
        G[t], choice[t] = row, pick
        nxt = row
    return LagrangianTable(tuple(mu), G, choice)


def dual_tables(
    p: Problem, incumbent: float, *, first: LagrangianTable | None = None, iterations: int = 6
) -> tuple[list[LagrangianTable], list[list[int]]]:
    """Tables for mu = 0 and a few subgradient steps on min_mu G_mu[0][start] + mu . budget.

    ``incumbent`` (the value of a known plan, or -inf) sets the Polyak step length; ``first`` is the mu = 0 table
    when the caller has it. Also returns the maximising walks met on the way (candidate plans for the caller to
    check against the budget).
    """
    mu = [0.0] * p.limits
    tables: list[LagrangianTable] = []
    walks: list[list[int]] = []
    best_bound = math.inf
    for k in range(iterations if p.limits else 1):
        table = first if k == 0 and first is not None else lagrangian_table(p, mu)
        tables.append(table)
        bound = table.bound(0, p.start, p.budget)
        best_bound = min(best_bound, bound)
        walk = table.walk(p)
        if not walk or not math.isfinite(bound):
            break
        walks.append(walk)
        used = [sum(p.cost[e][j] for e in walk) for j in range(p.limits)]
        grad = [b - u for b, u in zip(p.budget, used, strict=False)]  # subgradient of the dual at mu
        norm = sum(g * g for g in grad)
        if norm == 0.0 or (math.isfinite(incumbent) and bound <= incumbent):
            break
        target = incumbent if math.isfinite(incumbent) else bound - max(1.0, abs(bound)) * 0.1
        step = max(bound - target, 1e-6) / norm
        new_mu = [max(0.0, m - step * g) for m, g in zip(mu, grad, strict=False)]
        if new_mu == mu:
            break
        mu = new_mu
    return tables, walks


def least_values(p: Problem, steps: int) -> list[list[float]]:
    """``low[s][v]``: the least value of a walk from v to a goal in at most s steps (first step undiscounted, budget
    ignored); +inf where no goal is reachable in s steps."""
    n = len(p.node_ids)
    rows = [[math.inf] * n]
    d = p.discount
    for _ in range(steps):
        prev = rows[-1]
        row = [math.inf] * n
        for e, v in enumerate(p.src):
            w = p.dst[e]
            if p.goal[w]:
                val = p.reward[w]
            elif prev[w] < math.inf:
                val = p.reward[w] + d * prev[w]
            else:
                continue
            if val < row[v]:
                row[v] = val
        rows.append(row)
    return rows


def weighted_cost_to_goal(p: Problem, weight: Sequence[float]) -> list[float]:
    """Least ``weight . cost`` of a walk from each node to a goal (Dijkstra on the reverse graph; inf when none)."""
    into: list[list[int]] = [[] for _ in p.node_ids]
    for e, w in enumerate(p.dst):
        into[w].append(e)
    price = [sum(a * c for a, c in zip(weight, cost, strict=False)) for cost in p.cost]
    best = [0.0 if g else math.inf for g in p.goal]
    heap = [(0.0, i) for i, g in enumerate(p.goal) if g]
    while heap:
        d, v = heapq.heappop(heap)
        if d > best[v]:
            continue
        for e in into[v]:
            u = p.src[e]
            if p.goal[u]:
                continue
            nd = d + price[e]
            if nd < best[u]:
                best[u] = nd
                heapq.heappush(heap, (nd, u))
    return best
