"""Bounds for the exact and ILP solvers: what a partial walk at (node, step) can still gain, and what it must still
spend. Every table is a dynamic programme over steps on the edge arrays (numpy), so building one costs a few
vector operations per step whatever the graph's size.

All tables ignore the path taken so far and relax the budget, so they bound every feasible continuation:

- ``reach``: per limit (and for a weighted sum of the limits) the least cost of a walk from each node to a goal
  within s steps, and the fewest steps to a goal: the resources a partial walk still needs.
- ``lagrangian_table``: for multipliers mu >= 0 (one per limit), ``G[t][v]`` is the largest
  sum_i (discount^i * reward(v(i+1)) - mu . cost(e(i+1))) over walks from v that start at absolute step t and end at
  their first goal by the horizon. A continuation that fits the remaining budget R gains at most G[t][v] + mu . R,
  since mu . cost <= mu . R; with mu = 0 this is the budget-free bound. ``dual_tables`` picks several mu by
  subgradient steps on the start's bound (a Lagrangian dual), and the solver takes the least bound over them.
- ``least_values``: ``low[s][v]``, the least value (first step undiscounted) of a walk from v to a goal in at
  most s steps; it prices how much a later label loses to discounting, for dominance across steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from metaharness.planner.path.problem import PathProblem

# Value tables are built for at most this many absolute steps; labels deeper than that get no value bound (+inf).
TABLE_STEPS_CAP = 512


@dataclass
class Reach:
    """What a walk from a node needs to reach a goal. ``cost[s, v, j]``: the least cost in limit j of a walk from v
    to a goal in at most s steps (each limit minimised on its own); ``weighted[s, v]`` the same for
    ``weight . cost``; ``steps[v]`` the fewest steps (inf when no goal is reachable). Rows stop where they stop
    changing: row ``min(s, rows - 1)`` holds for s steps."""

    cost: np.ndarray
    weighted: np.ndarray
    steps: np.ndarray
    weight: np.ndarray

    def row(self, steps_left: int) -> int:
        return min(steps_left, self.cost.shape[0] - 1)


def reach(p: PathProblem) -> Reach:
    """``Reach`` for ``p``, with weights 1 / budget (so the weighted sum binds when no single limit does)."""
    a = p.arrays
    weight = np.array([1.0 / b if b > 0 else 0.0 for b in p.slack])
    edge_costs = np.concatenate([a.cost, (a.cost @ weight)[:, None], np.ones((len(a.src), 1))], axis=1)
    rows = _least_rows(p, edge_costs)
    limits = p.limits
    return Reach(rows[:, :, :limits], rows[:, :, limits], rows[-1, :, limits + 1], weight)


def _least_rows(p: PathProblem, edge_costs: np.ndarray) -> np.ndarray:
    """``rows[s, v, k]``: least ``edge_costs[:, k]`` summed over a walk from v to its first goal in at most s steps
    (Bellman-Ford by steps, stopped when a row repeats: shortest walks to a goal are simple paths)."""
    a = p.arrays
    n = len(a.goal)
    start = np.where(a.goal, 0.0, np.inf)[:, None].repeat(edge_costs.shape[1], axis=1)
    rows = [start]
    live = a.live_sources  # edges out of non-goal nodes, sorted by source
    cost = edge_costs[live]
    dst = a.dst[live]
    starts, sources = a.live_starts, a.live_source_nodes
    for _ in range(max(1, min(p.horizon, n))):
        prev = rows[-1]
        row = prev.copy()
        if len(live):
            best = np.minimum.reduceat(cost + prev[dst], starts, axis=0)
            row[sources] = np.minimum(prev[sources], best)
        if np.array_equal(row, prev):
            break
        rows.append(row)
    return np.stack(rows)


@dataclass
class LagrangianTable:
    """``G[t][v]`` as above for multipliers ``mu`` (rows 0 .. min(horizon, cap) - 1)."""

    mu: np.ndarray
    G: np.ndarray

    def bound(self, t: int, v: int, remaining: Sequence[float]) -> float:
        """Upper bound on what a label at ``v`` after ``t`` steps with ``remaining`` budget can still gain."""
        if t >= len(self.G):
            return math.inf
        return float(self.G[t][v] + float(np.dot(self.mu, remaining)))

    def walk(self, p: PathProblem) -> list[int]:
        """The maximising walk from the start (edge indices; [] when no goal is reachable within the table)."""
        a = p.arrays
        penalty = a.cost @ self.mu
        path: list[int] = []
        at = p.start
        for t in range(len(self.G) - 1):
            edges = a.out_edges(at)
            if not len(edges):
                return []
            after = np.where(a.goal[a.dst[edges]], 0.0, self.G[t + 1][a.dst[edges]])
            values = p.discount**t * a.reward[a.dst[edges]] - penalty[edges] + after
            k = int(np.argmax(values))
            if values[k] == -np.inf:
                return []
            e = int(edges[k])
            path.append(e)
            at = int(a.dst[e])
            if a.goal[at]:
                return path
        return []


def lagrangian_table(p: PathProblem, mu: Sequence[float] | np.ndarray) -> LagrangianTable:
    """The table for one vector of multipliers (see ``lagrangian_tables``)."""
    return lagrangian_tables(p, [mu])[0]


def lagrangian_tables(p: PathProblem, mus: Sequence[Sequence[float] | np.ndarray]) -> list[LagrangianTable]:
    """Backward DP over absolute steps H-1 .. 0 (``H`` capped at ``TABLE_STEPS_CAP``), for several vectors of
    multipliers at once."""
    a = p.arrays
    n, steps = len(a.goal), min(p.horizon, TABLE_STEPS_CAP)
    multipliers = np.asarray(mus, dtype=float).reshape(len(mus), p.limits)
    live = a.live_sources
    dst = a.dst[live]
    penalty = multipliers @ a.cost[live].T  # tables x live edges
    reward = a.reward[dst]
    ends = a.goal[dst]
    starts, sources = a.live_starts, a.live_source_nodes
    G = np.full((len(multipliers), steps + 1, n), -np.inf)
    # Walks still running at the cap are not bounded by the table: +inf beyond it.
    G[:, steps] = np.inf if steps < p.horizon else -np.inf
    for t in range(steps - 1, -1, -1):
        if len(live):
            values = p.discount**t * reward - penalty + np.where(ends, 0.0, G[:, t + 1, dst])
            G[:, t, sources] = np.maximum.reduceat(values, starts, axis=1)
    return [LagrangianTable(mu, table) for mu, table in zip(multipliers, G, strict=True)]


def dual_tables(
    p: PathProblem, incumbent: float, *, first: LagrangianTable | None = None, iterations: int = 8
) -> tuple[list[LagrangianTable], list[list[int]]]:
    """Tables for mu = 0 and a few subgradient steps on min_mu G_mu[0][start] + mu . budget.

    ``incumbent`` (the value of a known plan, or -inf) sets the Polyak step length; ``first`` is the mu = 0 table
    when the caller has it. Also returns the maximising walks met on the way (candidate plans for the caller to
    check against the budget).
    """
    a = p.arrays
    budget = np.asarray(p.budget, dtype=float)
    mu = np.zeros(p.limits)
    tables: list[LagrangianTable] = []
    walks: list[list[int]] = []
    for k in range(iterations if p.limits else 1):
        table = first if k == 0 and first is not None else lagrangian_table(p, mu)
        tables.append(table)
        bound = table.bound(0, p.start, p.budget)
        walk = table.walk(p)
        if not walk or not math.isfinite(bound):
            break
        walks.append(walk)
        grad = budget - a.cost[walk].sum(axis=0)  # subgradient of the dual at mu
        norm = float(grad @ grad)
        if norm == 0.0 or (math.isfinite(incumbent) and bound <= incumbent):
            break
        target = incumbent if math.isfinite(incumbent) else bound - max(1.0, abs(bound)) * 0.1
        new_mu = np.maximum(0.0, mu - max(bound - target, 1e-6) / norm * grad)
        if np.array_equal(new_mu, mu):
            break
        mu = new_mu
    return tables, walks


def least_values(p: PathProblem, steps: int) -> np.ndarray:
    """``low[s][v]``: the least value of a walk from v to a goal in at most s steps (first step undiscounted, budget
    ignored); +inf where no goal is reachable in s steps."""
    a = p.arrays
    n = len(a.goal)
    live = a.live_sources
    dst = a.dst[live]
    reward = a.reward[dst]
    ends = a.goal[dst]
    starts, sources = a.live_starts, a.live_source_nodes
    low = np.full((steps + 1, n), np.inf)
    for s in range(1, steps + 1):
        if len(live):
            after = low[s - 1][dst]
            with np.errstate(invalid="ignore"):  # discount 0 times an unreachable (+inf) continuation stays +inf
                after = np.where(np.isinf(after), after, p.discount * after)
            values = reward + np.where(ends, 0.0, after)
            low[s][sources] = np.minimum.reduceat(values, starts)
    return low
