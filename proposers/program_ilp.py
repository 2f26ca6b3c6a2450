"""Which predicted candidates to implement and evaluate: the program-space selection ILP (pyscipopt).

The program graph is a ``networkx.DiGraph`` whose nodes are candidate harnesses and whose edges are revisions
(parent -> child). Node attributes:

- ``existing`` (bool): already implemented and evaluated; ``score`` is then its measured validation score.
- ``score`` (float): measured score of an existing node, predicted score of a predicted one (higher is better).
- ``std`` (float, default 0): uncertainty of a predicted score (standard deviation).
- ``eval_cost`` (dict, default {}): what evaluating the node on val costs, e.g. ``{"tokens": 12000, "usd": 0.01}``.
- ``label`` (int, default 0): the TPS reward label, +1 predicted to beat the best, -1 dead end, 0 otherwise.

Edge attribute ``cost`` (dict, default {}) is what implementing the revision costs (e.g. proposer tokens).

The problem: choose predicted nodes to *evaluate* (at most ``budget["evals"]``, and every other budget key summed
over implemented edges and evaluated nodes within its cap) where a node can only be evaluated when it is
implemented, and it is implemented through one incoming revision whose source is existing or itself implemented
(its whole revision chain). Dead ends are never evaluated. The objective is the expected best score after the
iteration, ``E[max(incumbent, max over evaluated v of true_v)]``, estimated over sampled scenarios of the true
scores (a sample-average approximation, exact as a MILP). Candidates that share a revision chain share noise in
those scenarios, so the objective prefers diverse bets to near-duplicates of one guess, and with ``std = 0`` it
reduces to "evaluate the best predicted candidate". A small bonus per evaluated candidate fills the budget.

Example::

    >>> g = ProgramGraph()
    >>> g.add_existing("seed", 0.30)
    >>> g.add_predicted("a", "seed", 0.40, summary="add label list")
    >>> g.add_predicted("b", "a", 0.55, summary="vote over neighbours")
    >>> select(g.graph, {"evals": 1}).evaluate
    ['b']
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from metaharness.errors import InputError

FILL_BONUS = 1e-4  # per evaluated candidate, times (1 + predicted score): use the budget, prefer the better ones


@dataclass
class Selection:
    """The solver's answer: which nodes to evaluate, which to implement on the way, and what it costs."""

    status: str  # "optimal" | "infeasible"
    evaluate: list[str]
    implement: list[str]  # every predicted node to write, in topological order (includes ``evaluate``)
    edges: list[tuple[str, str]]  # the revisions to carry out
    value: float  # expected best score after the iteration, under the scenarios
    cost: dict[str, float] = field(default_factory=dict)
    solver: str = "scip"
    seconds: float = 0.0


class ProgramGraph:
    """A small builder around the ``networkx.DiGraph`` that :func:`select` reads (attributes as in the module doc)."""

    def __init__(self, graph: nx.DiGraph | None = None) -> None:
        self.graph = graph if graph is not None else nx.DiGraph()

    def add_existing(self, node: str, score: float, parent: str | None = None) -> None:
        self.graph.add_node(node, existing=True, score=float(score), std=0.0, eval_cost={}, label=0)
        if parent is not None:
            self.graph.add_edge(parent, node, cost={}, summary="")

    def add_predicted(
        self,
        node: str,
        parent: str,
        score: float,
        *,
        std: float = 0.0,
        eval_cost: dict[str, float] | None = None,
        edit_cost: dict[str, float] | None = None,
        label: int = 0,
        summary: str = "",
        **attrs: Any,
    ) -> None:
        """Add (or merge into) predicted node ``node`` reached from ``parent`` by one revision."""
        if node not in self.graph:
            self.graph.add_node(
                node,
                existing=False,
                score=float(score),
                std=float(std),
                eval_cost=dict(eval_cost or {}),
                label=int(label),
                **attrs,
            )
        self.graph.add_edge(parent, node, cost=dict(edit_cost or {}), summary=summary)

    def incumbent(self) -> float:
        scores = [d["score"] for _, d in self.graph.nodes(data=True) if d.get("existing")]
        return max(scores) if scores else 0.0


def chain(graph: nx.DiGraph, node: str) -> list[tuple[str, str]]:
    """The revision chain from the nearest existing ancestor to ``node`` (first parent at every merge)."""
    edges: list[tuple[str, str]] = []
    while not graph.nodes[node].get("existing"):
        parent = next(iter(graph.predecessors(node)))
        edges.append((parent, node))
        node = parent
    return edges[::-1]


def validate_graph(graph: nx.DiGraph, budget: dict[str, float]) -> list[str]:
    for key, cap in budget.items():
        if not isinstance(cap, (int, float)) or math.isnan(cap) or cap < 0:
            raise InputError(f"Budget entry '{key}' must be a non-negative number, got {cap!r}.")
    predicted = [n for n, d in graph.nodes(data=True) if not d.get("existing")]
    for node, data in graph.nodes(data=True):
        if "score" not in data or "existing" not in data:
            raise InputError(f"Program graph node '{node}' needs 'score' and 'existing' attributes.")
        if not data["existing"] and graph.in_degree(node) == 0:
            raise InputError(
                f"Predicted candidate '{node}' has no parent revision; attach it to an existing candidate."
            )
        if any(v < 0 for v in data.get("eval_cost", {}).values()):
            raise InputError(f"Evaluation cost of '{node}' has a negative entry.")
    for u, v, data in graph.edges(data=True):
        if any(c < 0 for c in data.get("cost", {}).values()):
            raise InputError(f"Revision {u} -> {v} has a negative cost entry.")
    if not nx.is_directed_acyclic_graph(graph.subgraph(predicted)):
        raise InputError(
            "Predicted candidates form a cycle of revisions; a revision chain must start at an existing one."
        )
    return predicted


def scenarios(
    graph: nx.DiGraph, count: int, *, correlation: float = 0.5, seed: int = 0, bounds: tuple[float, float] = (0.0, 1.0)
) -> list[dict[str, float]]:
    """Sampled true scores of the predicted nodes: ``score + std * noise`` where a child's noise is ``correlation``
    times its (first) predicted parent's noise plus fresh noise, so a revision chain shares its errors. Samples are
    clipped to ``bounds`` (scores are means of 0/1 example scores)."""
    low, high = bounds
    rng = random.Random(seed)
    predicted = [n for n in nx.topological_sort(graph) if not graph.nodes[n].get("existing")]
    rest = math.sqrt(max(0.0, 1.0 - correlation**2))
    out = []
    for _ in range(count):
        noise: dict[str, float] = {}
        for node in predicted:
            parents = [p for p in graph.predecessors(node) if p in noise]
            shared = correlation * noise[parents[0]] if parents else 0.0
            noise[node] = shared + (rest if parents else 1.0) * rng.gauss(0.0, 1.0)
        out.append(
            {
                n: min(high, max(low, graph.nodes[n]["score"] + graph.nodes[n].get("std", 0.0) * noise[n]))
                for n in predicted
            }
        )
    return out


def select(
    graph: nx.DiGraph,
    budget: dict[str, float],
    *,
    n_scenarios: int = 64,
    correlation: float = 0.5,
    seed: int = 0,
    time_limit: float = 20.0,
) -> Selection:
    """Solve the selection problem of the module docstring.

    ``budget`` maps limit names to caps; ``"evals"`` caps the number of evaluated candidates, every other key caps
    the sum of that key over implemented revisions (edge ``cost``) and evaluated nodes (``eval_cost``). Returns
    status ``"infeasible"`` (and nothing to do) when not even one candidate fits the budget.
    """
    from pyscipopt import Model, quicksum

    started = time.perf_counter()
    predicted = validate_graph(graph, budget)
    nodes = graph.nodes
    incumbent = max((d["score"] for _, d in graph.nodes(data=True) if d.get("existing")), default=0.0)
    any_std = any(nodes[n].get("std", 0.0) > 0 for n in predicted)
    samples = scenarios(graph, n_scenarios if any_std else 1, correlation=correlation, seed=seed)

    model = Model("program-selection")
    model.hideOutput()
    model.setParam("limits/time", time_limit)
    implement = {n: model.addVar(f"y_{i}", vtype="B") for i, n in enumerate(predicted)}
    evaluate = {n: model.addVar(f"z_{i}", vtype="B") for i, n in enumerate(predicted)}
    in_edges = {n: list(graph.in_edges(n)) for n in predicted}
    use = {e: model.addVar(f"x_{i}", vtype="B") for i, e in enumerate(e for n in predicted for e in in_edges[n])}

    for node in predicted:
        # Implemented through exactly one revision whose source is existing or implemented itself.
        model.addCons(quicksum(use[e] for e in in_edges[node]) == implement[node])
        for source, target in in_edges[node]:
            if not nodes[source].get("existing"):
                model.addCons(use[(source, target)] <= implement[source])
        model.addCons(evaluate[node] <= implement[node])
        if nodes[node].get("label", 0) < 0:
            model.addCons(evaluate[node] == 0)
    model.addCons(quicksum(evaluate.values()) >= 1)
    for key, cap in budget.items():
        if key == "evals":
            model.addCons(quicksum(evaluate.values()) <= cap)
            continue
        spent = quicksum(graph.edges[e].get("cost", {}).get(key, 0.0) * x for e, x in use.items()) + quicksum(
            nodes[n].get("eval_cost", {}).get(key, 0.0) * evaluate[n] for n in predicted
        )
        model.addCons(spent <= cap)

    # Expected max: in scenario s, weight w[s][v] <= z_v picks the best evaluated candidate (or the incumbent).
    best_terms = []
    for s, sample in enumerate(samples):
        keep = model.addVar(f"w_{s}_inc", lb=0.0, ub=1.0)
        weights = {n: model.addVar(f"w_{s}_{i}", lb=0.0, ub=1.0) for i, n in enumerate(predicted)}
        model.addCons(keep + quicksum(weights.values()) == 1)
        for node, weight in weights.items():
            model.addCons(weight <= evaluate[node])
        best_terms.append(incumbent * keep + quicksum(sample[n] * w for n, w in weights.items()))
    fill = quicksum(FILL_BONUS * (1.0 + nodes[n]["score"]) * evaluate[n] for n in predicted)
    model.setObjective(quicksum(best_terms) * (1.0 / len(samples)) + fill, "maximize")
    model.optimize()

    seconds = time.perf_counter() - started
    if model.getNSols() == 0:
        return Selection("infeasible", [], [], [], incumbent, {}, seconds=seconds)
    chosen = [n for n in predicted if model.getVal(evaluate[n]) > 0.5]
    built = [n for n in nx.topological_sort(graph) if n in implement and model.getVal(implement[n]) > 0.5]
    edges = [e for e, x in use.items() if model.getVal(x) > 0.5]
    cost = {"evals": float(len(chosen))}
    for key in budget:
        if key != "evals":
            cost[key] = sum(graph.edges[e].get("cost", {}).get(key, 0.0) for e in edges) + sum(
                nodes[n].get("eval_cost", {}).get(key, 0.0) for n in chosen
            )
    value = model.getObjVal() - sum(FILL_BONUS * (1.0 + nodes[n]["score"]) for n in chosen)
    status = "optimal" if model.getStatus() == "optimal" else model.getStatus()
    return Selection(status, chosen, built, edges, value, cost, seconds=seconds)
