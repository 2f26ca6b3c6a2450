"""The path problem every path solver answers, prepared once: indexed arrays and the walk checker.

The problem (``docs/plan-graph.md``): find a walk start = v0, e1, v1, ..., ek, vk with 1 <= k <= horizon, total
cost within the budget in every entry, vk a goal and no goal among v1..v(k-1), maximising
sum_i discount^(i-1) * reward(vi) (minus a soft-target penalty when ``SoftTargets`` are given).
``path_problem`` validates the inputs and turns the graph into integer-indexed arrays, which the exact and ILP
solvers and their bounds (``metaharness.planner.path.bounds``) read.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx
import numpy as np

from metaharness.errors import InputError
from metaharness.planner.graph import BUDGET_TOLERANCE, NodeId, PlanGraph, fits, limit_names

# Objective values within this relative distance count as equal (ties keep the shorter walk).
VALUE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class SoftTargets:
    """Preferred cost levels inside the hard budget: each unit of cost above ``target[j]`` subtracts ``weight[j]``.

    The budget stays a hard limit; the objective becomes value - sum_j weight[j] * max(0, cost[j] - target[j]).
    """

    target: tuple[float, ...]
    weight: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.target) != len(self.weight):
            raise InputError(f"Soft targets need one weight per target; got {len(self.target)} and {len(self.weight)}.")
        if any(w < 0 for w in self.weight):
            raise InputError(f"Soft-target weights must be >= 0; got {list(self.weight)}.")

    def penalty(self, cost: Sequence[float]) -> float:
        return sum(w * max(0.0, c - t) for c, t, w in zip(cost, self.target, self.weight, strict=False) if w)


@dataclass(frozen=True)
class Walk:
    """A checked feasible walk: its edges, its nodes v0..vk, value, total cost (by limit name) and objective."""

    path: list[NodeId]
    nodes: list[NodeId]
    value: float
    cost: dict[str, float]
    objective: float


@dataclass(frozen=True)
class Arrays:
    """A problem's graph as arrays: edge ``src``, ``dst`` and ``cost`` (edges x limits), node ``reward`` and
    ``goal``; ``by_source`` lists the edges sorted by source, ``out_ptr[v]:out_ptr[v + 1]`` the slice of it leaving
    v. ``live`` are the edges that leave non-goal nodes (a walk ends at its first goal), sorted by source, in runs
    that start at ``live_starts`` and leave ``live_source_nodes`` (the form ``np.ufunc.reduceat`` takes)."""

    src: np.ndarray
    dst: np.ndarray
    cost: np.ndarray
    reward: np.ndarray
    goal: np.ndarray
    by_source: np.ndarray
    out_ptr: np.ndarray
    live_sources: np.ndarray
    live_starts: np.ndarray
    live_source_nodes: np.ndarray

    @classmethod
    def of(cls, p: PathProblem) -> Arrays:
        src = np.asarray(p.src, dtype=np.int64)
        goal = np.asarray(p.goal, dtype=bool)
        by_source = np.argsort(src, kind="stable")
        out_ptr = np.searchsorted(src[by_source], np.arange(len(goal) + 1))
        live = by_source[~goal[src[by_source]]]
        runs = np.flatnonzero(np.r_[True, src[live][1:] != src[live][:-1]]) if len(live) else np.zeros(0, np.int64)
        return cls(
            src,
            np.asarray(p.dst, dtype=np.int64),
            np.asarray(p.cost, dtype=float).reshape(len(src), p.limits),
            np.asarray(p.reward, dtype=float),
            goal,
            by_source,
            out_ptr,
            live,
            runs,
            src[live][runs] if len(live) else np.zeros(0, np.int64),
        )

    def out_edges(self, v: int) -> np.ndarray:
        return self.by_source[self.out_ptr[v] : self.out_ptr[v + 1]]


@dataclass
class PathProblem:
    """A validated problem in indexed form. ``horizon`` is the given one or a bound implied by the budget."""

    graph: PlanGraph
    budget: tuple[float, ...]
    horizon: int
    horizon_given: bool
    discount: float
    soft: SoftTargets | None
    node_ids: list[NodeId] = field(init=False)
    start: int = field(init=False)
    goal: list[bool] = field(init=False)
    reward: list[float] = field(init=False)
    edge_ids: list[NodeId] = field(init=False)
    src: list[int] = field(init=False)
    dst: list[int] = field(init=False)
    cost: list[tuple[float, ...]] = field(init=False)
    out: list[list[int]] = field(init=False)
    slack: tuple[float, ...] = field(init=False)
    names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        nodes = self.graph.nodes
        self.node_ids = [n.id for n in nodes]
        index = {n.id: i for i, n in enumerate(nodes)}
        self.start = index[self.graph.start]
        self.goal = [n.goal for n in nodes]
        self.reward = [n.reward for n in nodes]
        edges = self.graph.edges
        self.edge_ids = [e.id for e in edges]
        self.src = [index[e.source] for e in edges]
        self.dst = [index[e.target] for e in edges]
        self.cost = [e.cost for e in edges]
        self.out = [[] for _ in nodes]
        for i, s in enumerate(self.src):
            self.out[s].append(i)
        self.slack = tuple(b + BUDGET_TOLERANCE * max(1.0, abs(b)) for b in self.budget)
        self.names = limit_names(self.graph, len(self.budget))

    @property
    def limits(self) -> int:
        return len(self.budget)

    def by_name(self, cost: Sequence[float]) -> dict[str, float]:
        """A cost vector as a mapping by limit name (``limit_names``)."""
        return {n: float(c) for n, c in zip(self.names, cost, strict=True)}

    def objective(self, value: float, cost: Sequence[float]) -> float:
        return value - self.soft.penalty(cost) if self.soft else value

    @cached_property
    def arrays(self) -> Arrays:
        """The problem as numpy arrays, for the solvers' vectorised passes."""
        return Arrays.of(self)

    def check_walk(self, path: Sequence[NodeId]) -> Walk:
        """Check that ``path`` (edge ids) is a feasible plan; raise ``InputError`` saying why not."""
        if not path:
            raise InputError("The plan is empty: a plan takes at least one step.")
        if self.horizon_given and len(path) > self.horizon:
            raise InputError(f"The plan takes {len(path)} steps, more than the horizon of {self.horizon}.")
        at = self.graph.start
        nodes = [at]
        value = 0.0
        total = [0.0] * self.limits
        for i, eid in enumerate(path):
            edge = self.graph.edge(eid)
            if edge.source != at:
                raise InputError(f"Step {i + 1} takes edge {eid!r} from {edge.source!r}, but the plan is at {at!r}.")
            if i > 0 and self.graph.node(at).goal:
                raise InputError(f"The plan passes goal {at!r} before its last step; a plan ends at its first goal.")
            at = edge.target
            nodes.append(at)
            value += self.discount**i * self.graph.node(at).reward
            total = [a + c for a, c in zip(total, edge.cost, strict=False)]
        if not self.graph.node(at).goal:
            raise InputError(f"The plan ends at {at!r}, which is not a goal.")
        if not fits(total, self.budget):
            raise InputError(f"The plan costs {total}, over the budget {list(self.budget)}.")
        return Walk(list(path), nodes, value, self.by_name(total), self.objective(value, total))


def path_problem(
    graph: PlanGraph,
    budget: Sequence[float] | None = None,
    *,
    horizon: int | None = None,
    discount: float | None = None,
    soft: SoftTargets | None = None,
) -> PathProblem:
    """Validate ``graph`` with the given overrides and return the indexed ``PathProblem``."""
    chosen = graph.validate(budget, horizon)
    horizon = horizon if horizon is not None else graph.horizon
    discount = graph.discount if discount is None else float(discount)
    if not 0.0 <= discount <= 1.0:
        raise InputError(f'"discount" must be between 0 and 1; got {discount!r}.')
    if soft is not None and len(soft.target) != len(chosen):
        raise InputError(f"Soft targets have {len(soft.target)} entries but the budget has {len(chosen)}.")
    bound = horizon if horizon is not None else implied_horizon(graph, chosen)
    return PathProblem(graph, chosen, bound, horizon is not None, discount, soft)


def implied_horizon(graph: PlanGraph, budget: Sequence[float]) -> int:
    """An upper bound on the length of any walk within budget, for graphs without zero-cost cycles.

    Every edge with a positive cost entry j uses at least the smallest positive cost of entry j, so at most
    sum_j floor(budget_j / min positive cost_j) such edges fit; between two of them lies a path of zero-cost edges,
    no longer than the longest path of the (acyclic) zero-cost subgraph.
    """
    free = nx.DiGraph()
    free.add_nodes_from(graph.nx.nodes)
    free.add_edges_from((e.source, e.target) for e in graph.edges if not any(e.cost))
    longest_free = nx.dag_longest_path_length(free) if free.number_of_edges() else 0
    paid = 0
    for j, b in enumerate(budget):
        positive = [e.cost[j] for e in graph.edges if e.cost[j] > 0]
        if positive:
            paid += math.floor((b + BUDGET_TOLERANCE * max(1.0, abs(b))) / min(positive))
    return max(1, paid + (paid + 1) * longest_free)


def closest_name(unknown: Sequence[str], names: Sequence[str]) -> str:
    """' (did you mean "usd"?)' for the first unknown name with a close known one, else ''."""
    for name in unknown:
        close = difflib.get_close_matches(str(name), list(names), n=1, cutoff=0.5)
        if close:
            return f' (did you mean "{close[0]}" for "{name}"?)'
    return ""


def budget_by_name(graph: PlanGraph, budget: Mapping[str, float]) -> list[float]:
    """The graph's budget with the named entries replaced (names from ``graph.limits``; a graph that names none has
    "limit 1", "limit 2", ..., as its results do)."""
    own = graph.budget or ()
    if graph.limits is None and not own:
        raise InputError('A budget by name needs the graph\'s limits (its "limits" field); give a list instead.')
    names = limit_names(graph, len(own) if graph.limits is None else len(graph.limits))
    unknown = sorted(set(map(str, budget)) - set(names))
    if unknown:
        hint = closest_name(unknown, names)
        raise InputError(f"Unknown budget entries {unknown}{hint}; the graph's limits are {', '.join(names)}.")
    return [budget.get(name, own[j] if j < len(own) else 0.0) for j, name in enumerate(names)]
