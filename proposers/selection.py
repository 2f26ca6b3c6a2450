"""Selection strategies over a program graph: the TPS ILP and the baselines it is compared against.

Every strategy reads the same graph as :func:`metaharness.proposers.program_ilp.select` and returns a
:class:`~metaharness.proposers.program_ilp.Selection` that respects the same budget:

- ``ilp``: the expected-best-score ILP (planning).
- ``greedy``: evaluate the top predicted candidates, best first, while they fit.
- ``random``: evaluate random predicted candidates while they fit.
- ``best_of_n``: no planning graph beyond one revision: evaluate the single-revision children of existing
  candidates in the order they were sampled (the Meta-Harness default of writing K revisions and evaluating all).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable

import networkx as nx

from metaharness.errors import InputError
from metaharness.proposers.program_ilp import Selection, chain, select, validate_graph

STRATEGIES = ("ilp", "greedy", "random", "best_of_n")


def _fill(graph: nx.DiGraph, budget: dict[str, float], order: Iterable[str]) -> Selection:
    """Take candidates in ``order`` while each one's missing chain plus its evaluation fits the budget."""
    started = time.perf_counter()
    spent = {key: 0.0 for key in budget}
    built: set[str] = set()
    edges: list[tuple[str, str]] = []
    chosen: list[str] = []
    for node in order:
        if graph.nodes[node].get("label", 0) < 0:
            continue
        new_edges = [e for e in chain(graph, node) if e[1] not in built]
        extra = {key: 0.0 for key in budget}
        for key in budget:
            if key == "evals":
                extra[key] = 1.0
                continue
            extra[key] = sum(graph.edges[e].get("cost", {}).get(key, 0.0) for e in new_edges)
            extra[key] += graph.nodes[node].get("eval_cost", {}).get(key, 0.0)
        if all(spent[k] + extra[k] <= budget[k] + 1e-9 for k in budget):
            chosen.append(node)
            edges.extend(new_edges)
            built.update(t for _, t in new_edges)
            spent = {k: spent[k] + extra[k] for k in budget}
    implement = [n for n in nx.topological_sort(graph) if n in built]
    if not chosen:
        return Selection("infeasible", [], [], [], 0.0, {}, solver="fill", seconds=time.perf_counter() - started)
    value = max(graph.nodes[n]["score"] for n in chosen)
    spent["evals"] = float(len(chosen))
    return Selection(
        "feasible", chosen, implement, edges, value, spent, solver="fill", seconds=time.perf_counter() - started
    )


def choose(
    strategy: str, graph: nx.DiGraph, budget: dict[str, float], *, seed: int = 0, correlation: float = 0.5
) -> Selection:
    """Pick the candidates to evaluate with ``strategy`` (one of :data:`STRATEGIES`); ``correlation`` is the ILP's
    assumed correlation of prediction errors along a revision chain."""
    if strategy == "ilp":
        return select(graph, budget, seed=seed, correlation=correlation)
    predicted = validate_graph(graph, budget)
    if strategy == "greedy":
        order = sorted(predicted, key=lambda n: -graph.nodes[n]["score"])
    elif strategy == "random":
        order = list(predicted)
        random.Random(seed).shuffle(order)
    elif strategy == "best_of_n":
        order = [n for n in predicted if any(graph.nodes[p].get("existing") for p in graph.predecessors(n))]
    else:
        raise InputError(f"Unknown selection strategy '{strategy}': use one of {', '.join(STRATEGIES)}.")
    result = _fill(graph, budget, order)
    result.solver = strategy
    return result
