"""Program graphs: candidate harnesses (evaluated, implemented or predicted) as nodes of a ``PlanGraph``.

A program graph is a ``PlanGraph`` with ``problem == "selection"`` and the budget entries ``LIMITS``. A node is a
program: ``status`` says whether it was evaluated (``score`` is its measured validation score), implemented but not
evaluated, predicted (``score`` and ``std`` are a prediction) or failed; ``cost`` is what evaluating it costs (one
entry per limit: 1 evaluation, task-model tokens, dollars). An edge is a revision parent -> child whose ``cost`` is
what implementing it costs (0 evaluations). Labels follow the TPS labeler: ``reward`` +1 (``goal``) predicted to beat
the best, -1 (``dead_end``) never worth evaluating, 0 otherwise. ``metaharness.planner.selection.select``
chooses what to implement and evaluate. These helpers are plain functions so that the graph stays one type.

    >>> g = program_graph("seed")
    >>> _ = add_evaluated(g, "seed", 0.30)
    >>> _ = add_predicted(g, "a", "seed", 0.40, cost={"tokens": 900}, summary="add label list")
    >>> _ = add_predicted(g, "b", "a", 0.55, std=0.1, summary="vote over neighbours")
    >>> [e.id for e in chain(g, "b")], depth(g, "b"), incumbent(g)
    (['seed->a', 'a->b'], 2, 0.3)
    >>> mark(g, "a", IMPLEMENTED, new_id="c7").id, [e.source for e in chain(g, "b")]
    ('c7', ['c7'])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metaharness.budget import ENTRIES as LIMITS  # evaluations, task-model tokens, dollars (task model + proposer)
from metaharness.errors import InputError
from metaharness.planner.graph import PROGRAM_STATUSES, Edge, Node, NodeId, PlanGraph

EVALUATED, IMPLEMENTED, PREDICTED, FAILED = PROGRAM_STATUSES
# A chain starts at a program whose code exists and works.
ROOTS = (EVALUATED, IMPLEMENTED)


def program_graph(start: NodeId, budget: Sequence[float] | Mapping[str, float] | None = None) -> PlanGraph:
    """An empty program graph; ``start`` names its root program (usually the first seed; it need not be a node
    yet). ``budget``: one cap per limit of ``LIMITS``, as a list or a mapping naming every limit."""
    if isinstance(budget, Mapping):
        missing = [k for k in LIMITS if k not in budget]
        unknown = [k for k in budget if k not in LIMITS]
        if missing or unknown:
            raise InputError(
                f"A program graph budget names every limit ({', '.join(LIMITS)}); missing {missing}, unknown {unknown}."
            )
        budget = [budget[k] for k in LIMITS]
    return PlanGraph(start, budget, limits=LIMITS, problem="selection")


def cost_vector(costs: Mapping[str, float] | None, *, evals: float) -> tuple[float, float, float]:
    """``(evals, tokens, usd)`` from a cost mapping: ``tokens`` is ``costs["tokens"]``, or when absent
    ``input_tokens + output_tokens`` (a measured evaluation cost); ``usd`` is ``costs["usd"]``; other keys (e.g.
    ``context_tokens``) are ignored."""
    costs = costs or {}
    tokens = costs.get("tokens")
    if tokens is None:
        tokens = costs.get("input_tokens", 0.0) + costs.get("output_tokens", 0.0)
    return (float(evals), float(tokens), float(costs.get("usd", 0.0)))


def add_evaluated(
    graph: PlanGraph,
    id: NodeId,
    score: float,
    parent: NodeId | None = None,
    *,
    cost: Mapping[str, float] | None = None,
    data: Mapping[str, Any] | None = None,
) -> Node:
    """Add an evaluated program (measured ``score`` and, when known, measured ``cost``) and its revision edge from
    ``parent`` (free: it is done)."""
    node = graph.add_node(
        id,
        score=score,
        cost=() if cost is None else cost_vector(cost, evals=1),
        status=EVALUATED,
        data=data,
    )
    if parent is not None:
        add_revision(graph, parent, id)
    return node


def add_predicted(
    graph: PlanGraph,
    id: NodeId,
    parent: NodeId,
    score: float,
    *,
    std: float = 0.0,
    cost: Mapping[str, float] | None = None,
    edit_cost: Mapping[str, float] | None = None,
    label: int = 0,
    summary: str = "",
    data: Mapping[str, Any] | None = None,
) -> Node:
    """Add predicted program ``id`` reached from ``parent`` by one revision (``summary``, implementation cost
    ``edit_cost``); ``cost`` is its predicted evaluation cost and ``label`` its TPS label. If ``id`` exists already
    (a merged node) only the revision from ``parent`` is added, so the node keeps every way to reach it."""
    if id not in graph.nx:
        graph.add_node(
            id,
            label,
            goal=label == 1,
            dead_end=label == -1,
            score=score,
            std=std,
            cost=cost_vector(cost, evals=1),
            status=PREDICTED,
            data=data,
        )
    add_revision(graph, parent, id, edit_cost=edit_cost, summary=summary)
    return graph.node(id)


def add_revision(
    graph: PlanGraph, parent: NodeId, child: NodeId, *, edit_cost: Mapping[str, float] | None = None, summary: str = ""
) -> Edge:
    """Add the revision ``parent -> child`` (edge id ``"parent->child"``, then ``"parent->child#2"``... when the
    same parent reaches the child by several revisions)."""
    base = f"{parent}->{child}"
    id, k = base, 1
    while graph.has_edge(id):
        k += 1
        id = f"{base}#{k}"
    return graph.add_edge(id, parent, child, summary, cost_vector(edit_cost, evals=0))


def nodes_with(graph: PlanGraph, *statuses: str) -> list[Node]:
    """The nodes whose status is one of ``statuses``, in insertion order."""
    return [n for n in graph.nodes if n.status in statuses]


def incumbent(graph: PlanGraph) -> float:
    """The best measured score (0.0 when nothing is evaluated)."""
    return max((n.score for n in nodes_with(graph, EVALUATED) if n.score is not None), default=0.0)


def chain(graph: PlanGraph, node: NodeId, via: Mapping[NodeId, NodeId] | None = None) -> list[Edge]:
    """The revisions from the nearest evaluated or implemented ancestor to ``node``, in order ([] for a program
    that exists). At a merge the edge ``via[node]`` (an edge id) is followed, else the first in-edge whose source
    can be reached. ``InputError`` when no chain exists (e.g. the only parent failed)."""
    edges: list[Edge] = []
    current = graph.node(node)
    seen = set()
    while current.status not in ROOTS:
        if current.status != PREDICTED or current.id in seen:
            raise InputError(f"Program node {node!r} cannot be reached from an evaluated or implemented candidate.")
        seen.add(current.id)
        chosen = (via or {}).get(current.id)
        if chosen is not None:
            edge = graph.edge(chosen)
            if edge.target != current.id:
                raise InputError(f"Edge {chosen!r} does not lead to {current.id!r}.")
        else:
            edge = _first_usable(graph, current.id)
        edges.append(edge)
        current = graph.node(edge.source)
    return edges[::-1]


def depth(graph: PlanGraph, node: NodeId) -> int:
    """How many revisions separate ``node`` from the nearest evaluated or implemented ancestor."""
    return len(chain(graph, node))


def mark(
    graph: PlanGraph,
    node: NodeId,
    status: str,
    *,
    new_id: NodeId | None = None,
    score: float | None = None,
    cost: Mapping[str, float] | Sequence[float] | None = None,
) -> Node:
    """Record that a predicted node was realised: set ``status`` and the measured ``score`` / ``cost`` (a mapping
    as for ``cost_vector``, or a vector), keep the prediction in ``data["prediction"]``, and rename the node to
    ``new_id`` (the candidate id) when given; its edges follow."""
    if status not in PROGRAM_STATUSES:
        raise InputError(f"Unknown program status {status!r}; use one of {', '.join(PROGRAM_STATUSES)}.")
    old = graph.node(node)
    data = dict(old.data)
    if old.status == PREDICTED:
        data.setdefault("prediction", {"score": old.score, "std": old.std, "cost": list(old.cost)})
    changes: dict[str, Any] = {"status": status, "data": data}
    if score is not None:
        changes["score"] = score
    if status in (EVALUATED, FAILED):
        changes["std"] = 0.0
    if cost is not None:
        changes["cost"] = cost_vector(cost, evals=1) if isinstance(cost, Mapping) else tuple(cost)
    graph.update_node(node, **changes)
    return graph.relabel(node, new_id) if new_id is not None else graph.node(node)


def _first_usable(graph: PlanGraph, node: NodeId) -> Edge:
    for edge in graph.in_edges(node):
        if _reachable(graph, edge.source, set()):
            return edge
    raise InputError(f"Program node {node!r} cannot be reached from an evaluated or implemented candidate.")


def _reachable(graph: PlanGraph, node: NodeId, seen: set[NodeId]) -> bool:
    current = graph.node(node)
    if current.status in ROOTS:
        return True
    if current.status != PREDICTED or node in seen:
        return False
    seen.add(node)
    return any(_reachable(graph, e.source, seen) for e in graph.in_edges(node))
