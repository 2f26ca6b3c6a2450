"""The selection problem every selection solver answers, prepared once: candidates in topological order, their
usable revisions, costs and sampled true scores (``docs/program-graphs.md``; the objective is in
``metaharness.planner.selection``). ``selection_problem`` validates the inputs; ``selection_result``
turns a chosen set into the ``PlanResult`` every selection solver returns."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from metaharness.errors import InputError
from metaharness.planner.graph import BUDGET_TOLERANCE, NodeId, PlanGraph, limit_names
from metaharness.planner.path.problem import closest_name
from metaharness.planner.program import EVALUATED, IMPLEMENTED, PREDICTED
from metaharness.planner.result import PlanResult, Status

FILL_BONUS = 1e-4  # per evaluated candidate, times (1 + predicted score)
SCORE_BOUNDS = (0.0, 1.0)  # validation scores are means of 0/1 example scores


@dataclass
class SelectionProblem:
    """A validated selection problem in indexed form: candidates ``0..n-1`` in topological order.

    ``ins[i]`` lists the usable revisions into candidate i as ``(edge id, source, cost)`` triples, ``source`` the
    source candidate or -1 for an evaluated or implemented program (none for an implemented candidate);
    ``samples[s, i]`` is candidate i's true score in scenario s.
    """

    graph: PlanGraph
    budget: tuple[float, ...]
    ids: list[NodeId]
    implemented: list[bool]
    evaluable: list[bool]
    score: list[float]
    eval_cost: list[tuple[float, ...]]
    ins: list[list[tuple[NodeId, int, tuple[float, ...]]]]
    incumbent: float
    samples: np.ndarray
    fill: list[float] = field(init=False)

    def __post_init__(self) -> None:
        self.fill = [FILL_BONUS * (1.0 + s) for s in self.score]

    @property
    def size(self) -> int:
        return len(self.ids)

    def expected_best(self, chosen: Iterable[int]) -> float:
        """Sample-average expected best score when the candidates ``chosen`` are evaluated."""
        best = np.full(self.samples.shape[0], self.incumbent)
        for i in chosen:
            np.maximum(best, self.samples[:, i], out=best)
        return float(best.mean())

    def objective(self, chosen: Sequence[int]) -> float:
        """What the solvers maximise: ``expected_best`` plus the fill bonus."""
        return self.expected_best(chosen) + sum(self.fill[i] for i in chosen)

    def fits(self, total: Sequence[float]) -> bool:
        return all(c <= b + BUDGET_TOLERANCE * max(1.0, abs(b)) for c, b in zip(total, self.budget, strict=True))

    def plan_cost(self, chosen: Iterable[int], via: Mapping[int, int]) -> list[float]:
        """Evaluation costs of ``chosen`` plus the revisions ``via`` (candidate -> index into ``ins``) used."""
        total = [0.0] * len(self.budget)
        for i in chosen:
            total = [t + c for t, c in zip(total, self.eval_cost[i], strict=True)]
        for i, k in via.items():
            total = [t + c for t, c in zip(total, self.ins[i][k][2], strict=True)]
        return total

    def indices(self, ids: Iterable[NodeId]) -> list[int]:
        """Candidate indices of node ids."""
        position = {id: i for i, id in enumerate(self.ids)}
        return [position[v] for v in ids]

    def via_of(self, path: Iterable[NodeId]) -> dict[int, int]:
        """Candidate -> index of its used revision, from a result's edge ids."""
        used = set(path)
        return {i: k for i, revisions in enumerate(self.ins) for k, r in enumerate(revisions) if r[0] in used}


def selection_problem(
    graph: PlanGraph,
    budget: Sequence[float] | Mapping[str, float] | None = None,
    *,
    scenarios: int = 64,
    correlation: float = 0.5,
    seed: int = 0,
) -> SelectionProblem:
    """Validate ``graph`` and ``budget`` (default: the graph's; a mapping names limits, absent ones are unlimited)
    and sample the scenarios; raise ``InputError`` naming the problem."""
    if graph.problem != "selection":
        raise InputError(
            f'select() chooses programs to evaluate in a program graph (problem "selection"); this graph\'s problem is '
            f'"{graph.problem}": use solve() for a walk.'
        )
    vector = _budget_vector(graph, budget)
    graph.validate([b if math.isfinite(b) else 0.0 for b in vector])  # lengths and node conditions
    if isinstance(scenarios, bool) or not isinstance(scenarios, int) or scenarios < 1:
        raise InputError(f"scenarios must be an integer >= 1; got {scenarios!r}.")
    if not 0.0 <= correlation <= 1.0:
        raise InputError(f"correlation must be between 0 and 1; got {correlation!r}.")
    predicted = list(nx.topological_sort(graph.nx.subgraph(n.id for n in graph.nodes if n.status == PREDICTED)))
    implemented = [n.id for n in graph.nodes if n.status == IMPLEMENTED]
    ids: list[NodeId] = []
    index: dict[NodeId, int] = {}
    ins: list[list[tuple[NodeId, int, tuple[float, ...]]]] = []
    for id in implemented + predicted:
        usable = []
        if graph.node(id).status == PREDICTED:
            for edge in graph.in_edges(id):
                source = graph.node(edge.source).status
                if source in (EVALUATED, IMPLEMENTED):
                    usable.append((edge.id, -1, edge.cost))
                elif edge.source in index:  # a reachable predicted node (earlier in topological order)
                    usable.append((edge.id, index[edge.source], edge.cost))
            if not usable:
                continue  # no way to implement it (its parents failed or cannot be reached)
        index[id] = len(ids)
        ids.append(id)
        ins.append(usable)
    nodes = [graph.node(i) for i in ids]
    zero = (0.0,) * len(vector)
    problem = SelectionProblem(
        graph,
        vector,
        ids,
        [n.status == IMPLEMENTED for n in nodes],
        [not (n.dead_end or n.reward < 0) for n in nodes],
        [float(n.score or 0.0) for n in nodes],
        [n.cost or zero for n in nodes],
        ins,
        max((n.score for n in graph.nodes if n.status == EVALUATED and n.score is not None), default=0.0),
        np.zeros((1, 0)),
    )
    problem.samples = _scenarios(problem, scenarios if any(n.std > 0 for n in nodes) else 1, correlation, seed)
    return problem


def selection_result(
    problem: SelectionProblem,
    status: Status,
    solver: str,
    chosen: Iterable[int],
    via: Mapping[int, int],
    gap: float | None = None,
) -> PlanResult:
    """The PlanResult of evaluating ``chosen``, implementing each predicted one through the revisions ``via``
    (candidate -> index into its ``ins``); revisions no evaluated node needs are dropped."""
    chosen = sorted(set(chosen), key=lambda i: (-problem.score[i], i))
    if not chosen:
        return PlanResult("infeasible", solver, note="No candidate fits the budget.")
    needed: dict[int, int] = {}
    for i in chosen:
        node = i
        while not problem.implemented[node] and node not in needed:
            needed[node] = via[node]
            node = problem.ins[node][via[node]][1]
            if node < 0:
                break
    touched = sorted(set(chosen) | set(needed))
    return PlanResult(
        status,
        solver,
        path=[problem.ins[i][needed[i]][0] for i in sorted(needed)],
        nodes=[problem.ids[i] for i in touched],
        value=problem.expected_best(chosen),
        cost=dict(zip(limit_names(problem.graph, len(problem.budget)), problem.plan_cost(chosen, needed), strict=True)),
        evaluate=[problem.ids[i] for i in chosen],
        gap=gap,
    )


def _budget_vector(graph: PlanGraph, budget: Sequence[float] | Mapping[str, float] | None) -> tuple[float, ...]:
    if budget is None:
        if graph.budget is None:
            raise InputError("No budget given: pass budget= to select() or set the program graph's budget.")
        return graph.budget
    if isinstance(budget, Mapping):
        if graph.limits is None:
            raise InputError("A budget by name needs the graph's limits; give one number per budget entry instead.")
        unknown = [k for k in budget if k not in graph.limits]
        if unknown:
            hint = closest_name(unknown, graph.limits)
            raise InputError(
                f"Unknown budget entries {unknown}{hint}; the graph's limits are {', '.join(graph.limits)}."
            )
        vector = [budget.get(name, math.inf) for name in graph.limits]
    else:
        vector = list(budget)
    out = []
    for b in vector:
        if isinstance(b, bool) or not isinstance(b, (int, float)) or math.isnan(b) or b < 0:
            raise InputError(f"Every budget entry must be a non-negative number; got {b!r}.")
        out.append(float(b))
    return tuple(out)


def _scenarios(problem: SelectionProblem, count: int, correlation: float, seed: int) -> np.ndarray:
    """``samples[s, i]``: ``score + std * noise`` clipped to ``SCORE_BOUNDS``, where a candidate's noise is
    ``correlation`` times that of its first candidate parent plus fresh noise (chains share their errors)."""
    rng = random.Random(seed)
    rest = math.sqrt(max(0.0, 1.0 - correlation**2))
    parent = [next((source for _, source, _ in revisions if source >= 0), -1) for revisions in problem.ins]
    std = [problem.graph.node(i).std for i in problem.ids]
    noise = np.zeros((count, problem.size))
    for s in range(count):
        row = noise[s]
        for i in range(problem.size):
            p = parent[i]
            row[i] = correlation * row[p] + rest * rng.gauss(0.0, 1.0) if p >= 0 else rng.gauss(0.0, 1.0)
    low, high = SCORE_BOUNDS
    return np.clip(np.asarray(problem.score) + np.asarray(std) * noise, low, high)
