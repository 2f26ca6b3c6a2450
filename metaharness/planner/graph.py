"""The plan graph: predicted states as nodes, actions (subplans) as edges with a cost vector, on networkx.

A ``PlanGraph`` is what the TPS subagents build and what every solver reads. Its JSON form (fields, defaults,
feasible plans, the solver output and the errors) is specified once, in ``docs/plan-graph.md``;
``PlanGraph.from_json`` enforces it and ``PlanGraph.to_json`` writes it.

    >>> g = PlanGraph.from_json({"start": "s", "budget": [2],
    ...                          "nodes": [{"id": "s"}, {"id": "g", "reward": 1, "goal": True}],
    ...                          "edges": [{"id": "e", "source": "s", "target": "g", "action": "go", "cost": [1]}]})
    >>> [e.id for e in g.out_edges("s")]
    ['e']
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypedDict

import networkx as nx

from metaharness.errors import InputError

NodeId = str | int

# Sums of real costs are compared with the budget up to this relative slack (0.1 + 0.2 fits a budget of 0.3).
BUDGET_TOLERANCE = 1e-9

# The fields of the JSON format (docs/plan-graphs.md); anything else is refused.
GRAPH_FIELDS = ("start", "budget", "nodes", "edges", "horizon", "discount", "limits", "problem")
# The largest plan graph file ``PlanGraph.load`` reads (a graph this size already needs gigabytes to solve).
MAX_FILE_BYTES = 256 << 20
NODE_FIELDS = ("id", "reward", "goal", "dead_end", "state", "key", "score", "std", "cost", "status", "data")
EDGE_FIELDS = ("id", "source", "target", "action", "cost", "data")

# What a graph asks for: "path" (a walk to a goal, the TPS plan graphs) or "selection" (which program nodes to
# implement and evaluate, ``metaharness.planner.selection``).
PROBLEMS = ("path", "selection")
# Node status in program graphs (named in ``metaharness.planner.program``); plan-graph states have status "".
PROGRAM_STATUSES = ("evaluated", "implemented", "predicted", "failed")


class _NodeKeys(TypedDict):
    id: NodeId
    reward: float


class NodeJSON(_NodeKeys, total=False):
    """A node in the JSON format (``docs/plan-graph.md``): ``id`` and ``reward`` always, the rest when set."""

    goal: bool
    dead_end: bool
    state: str
    key: str
    score: float
    std: float
    cost: list[float]
    status: str
    data: dict[str, Any]


class _EdgeKeys(TypedDict):
    id: NodeId
    source: NodeId
    target: NodeId
    action: str
    cost: list[float]


class EdgeJSON(_EdgeKeys, total=False):
    """An edge in the JSON format (``data`` when set)."""

    data: dict[str, Any]


class _GraphKeys(TypedDict):
    start: NodeId


class GraphJSON(_GraphKeys, total=False):
    """A plan graph in the JSON format (``docs/plan-graph.md``) as ``PlanGraph.to_json`` writes it: ``budget``,
    ``limits``, ``horizon`` and ``problem`` when set, the rest always."""

    budget: list[float]
    limits: list[str]
    horizon: int
    discount: float
    problem: str
    nodes: list[NodeJSON]
    edges: list[EdgeJSON]


def limit_names(graph: PlanGraph, entries: int) -> tuple[str, ...]:
    """The names of ``entries`` budget entries: the graph's ``limits``, or "limit 1", "limit 2", ... when it names
    none. Every cost a solver reports is a mapping by these names."""
    if graph.limits is not None and len(graph.limits) == entries:
        return graph.limits
    return tuple(f"limit {j + 1}" for j in range(entries))


def fits(total: Sequence[float], budget: Sequence[float]) -> bool:
    """Whether a cost vector stays within the budget in every entry (up to ``BUDGET_TOLERANCE``)."""
    return all(c <= b + BUDGET_TOLERANCE * max(1.0, abs(b)) for c, b in zip(total, budget, strict=False))


@dataclass(frozen=True)
class Node:
    """A (predicted) state. ``reward`` is +1 for a goal, -1 for a dead end and 0 otherwise in TPS graphs.

    Program graphs (``problem == "selection"``) also use ``score`` (measured or predicted validation score),
    ``std`` (uncertainty of a predicted score), ``cost`` (what evaluating the node costs, one entry per budget
    entry), ``status`` (one of ``PROGRAM_STATUSES``) and ``data`` (a free JSON payload solvers ignore).
    """

    id: NodeId
    reward: float = 0.0
    goal: bool = False
    dead_end: bool = False
    state: str = ""
    # Canonical form of the state when the domain has one (equal keys mean the same state).
    key: str | None = None
    score: float | None = None
    std: float = 0.0
    cost: tuple[float, ...] = ()
    status: str = ""
    data: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, hash=False)

    def to_json(self) -> NodeJSON:
        out = NodeJSON(id=self.id, reward=self.reward)
        if self.goal:
            out["goal"] = True
        if self.dead_end:
            out["dead_end"] = True
        if self.state:
            out["state"] = self.state
        if self.key is not None:
            out["key"] = self.key
        if self.score is not None:
            out["score"] = self.score
        if self.std:
            out["std"] = self.std
        if self.cost:
            out["cost"] = list(self.cost)
        if self.status:
            out["status"] = self.status
        if self.data:
            out["data"] = self.data
        return out


@dataclass(frozen=True)
class Edge:
    """An action (or subplan) leading from one state to another, with one non-negative cost per limit.

    In program graphs an edge is a revision and ``cost`` what implementing it costs; ``data`` is a free JSON
    payload solvers ignore.
    """

    id: NodeId
    source: NodeId
    target: NodeId
    action: str = ""
    cost: tuple[float, ...] = ()
    data: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, hash=False)

    def to_json(self) -> EdgeJSON:
        out = EdgeJSON(id=self.id, source=self.source, target=self.target, action=self.action, cost=list(self.cost))
        if self.data:
            out["data"] = self.data
        return out


class PlanGraph:
    """A directed multigraph of states and actions with a start node, a budget, a horizon and a discount.

    ``budget`` may be left ``None`` here and given to ``metaharness.planner.solve.solve`` instead. The graph is
    stored in ``nx`` (a ``networkx.MultiDiGraph`` whose node attribute ``"node"`` holds the ``Node`` and
    whose edge keys are edge ids with attribute ``"edge"``), so any networkx algorithm can read it.
    """

    def __init__(
        self,
        start: NodeId,
        budget: Sequence[float] | None = None,
        *,
        horizon: int | None = None,
        discount: float = 1.0,
        limits: Sequence[str] | None = None,
        problem: str = "path",
    ) -> None:
        if problem not in PROBLEMS:
            raise InputError(f'"problem" must be one of {", ".join(PROBLEMS)}; got {problem!r}.')
        self.start = start
        self.budget = None if budget is None else tuple(_number(b, "budget entry") for b in budget)
        self.horizon = horizon
        self.discount = discount
        self.limits = None if limits is None else tuple(limits)
        self.problem = problem
        self.nx = nx.MultiDiGraph()
        self._edges: dict[NodeId, Edge] = {}

    # --- building -------------------------------------------------------------------------------------------
    def add_node(
        self,
        id: NodeId,
        reward: float = 0.0,
        *,
        goal: bool = False,
        dead_end: bool = False,
        state: str = "",
        key: str | None = None,
        score: float | None = None,
        std: float = 0.0,
        cost: Iterable[float] = (),
        status: str = "",
        data: Mapping[str, Any] | None = None,
    ) -> Node:
        _check_id(id, "node id")
        if id in self.nx:
            raise InputError(f"Node id {id!r} appears twice; node ids must be unique.")
        node = _checked_node(
            Node(id, reward, goal, dead_end, state, key, score, std, tuple(cost), status, data or {})  # type: ignore[arg-type]
        )
        self.nx.add_node(id, node=node)
        return node

    def replace_node(self, node: Node) -> None:
        """Swap in new attributes (e.g. reward labels) for an existing node id."""
        if node.id not in self.nx:
            raise InputError(f"Unknown node id {node.id!r}.")
        self.nx.nodes[node.id]["node"] = _checked_node(node)

    def update_node(self, id: NodeId, /, **changes: Any) -> Node:
        """Change some fields of node ``id`` (e.g. ``score=0.4, status="evaluated"``); the id stays (see
        ``relabel``). Returns the new node."""
        if "id" in changes:
            raise InputError("update_node keeps the node id; use relabel(old, new) to rename a node.")
        try:
            node = replace(self.node(id), **changes)
        except TypeError as exc:
            raise InputError(f"Cannot update node {id!r}: {exc}.") from None
        self.replace_node(node)
        return self.node(id)

    def remove_node(self, id: NodeId) -> None:
        """Remove node ``id`` and every edge into or out of it."""
        self.node(id)
        for _, _, key in [*self.nx.in_edges(id, keys=True), *self.nx.out_edges(id, keys=True)]:
            self._edges.pop(key, None)
        self.nx.remove_node(id)

    def relabel(self, old: NodeId, new: NodeId) -> Node:
        """Rename node ``old`` to ``new``: its edges (and the start, if it was the start) follow; edge ids and the
        order of nodes and edges stay. Returns the renamed node."""
        node = self.node(old)
        _check_id(new, "node id")
        if new == old:
            return node
        if new in self.nx:
            raise InputError(f"Cannot rename {old!r} to {new!r}: node {new!r} exists already.")
        moved = replace(node, id=new)
        rebuilt = nx.MultiDiGraph()
        for id, data in self.nx.nodes(data=True):
            rebuilt.add_node(new if id == old else id, node=moved if id == old else data["node"])
        for key, edge in self._edges.items():
            if old in (edge.source, edge.target):
                source = new if edge.source == old else edge.source
                target = new if edge.target == old else edge.target
                self._edges[key] = edge = replace(edge, source=source, target=target)
            rebuilt.add_edge(edge.source, edge.target, key=key, edge=edge)
        self.nx = rebuilt
        if self.start == old:
            self.start = new
        return moved

    def add_edge(
        self,
        id: NodeId,
        source: NodeId,
        target: NodeId,
        action: str = "",
        cost: Iterable[float] = (),
        data: Mapping[str, Any] | None = None,
    ) -> Edge:
        _check_id(id, "edge id")
        if id in self._edges:
            raise InputError(f"Edge id {id!r} appears twice; edge ids must be unique.")
        for end, name in ((source, "source"), (target, "target")):
            if end not in self.nx:
                raise InputError(f'Edge {id!r} names unknown {name} node {end!r}; add the node to "nodes" first.')
        vector = tuple(_number(c, f"cost entry of edge {id!r}") for c in cost)
        if any(c < 0 for c in vector):
            raise InputError(f"Edge {id!r} has a negative cost {list(vector)}; every cost entry must be >= 0.")
        edge = Edge(id, source, target, str(action), vector, _payload(data, f"edge {id!r}"))
        self.nx.add_edge(source, target, key=id, edge=edge)
        self._edges[id] = edge
        return edge

    # --- reading --------------------------------------------------------------------------------------------
    @property
    def nodes(self) -> list[Node]:
        return [data["node"] for _, data in self.nx.nodes(data=True)]

    @property
    def edges(self) -> list[Edge]:
        return list(self._edges.values())

    def node(self, id: NodeId) -> Node:
        try:
            return self.nx.nodes[id]["node"]
        except KeyError:
            raise InputError(f"Unknown node id {id!r}.") from None

    def edge(self, id: NodeId) -> Edge:
        try:
            return self._edges[id]
        except KeyError:
            raise InputError(f"Unknown edge id {id!r}.") from None

    def has_edge(self, id: NodeId) -> bool:
        return id in self._edges

    def out_edges(self, id: NodeId) -> list[Edge]:
        return [data["edge"] for _, _, data in self.nx.out_edges(id, data=True)]

    def in_edges(self, id: NodeId) -> list[Edge]:
        return [data["edge"] for _, _, data in self.nx.in_edges(id, data=True)]

    def goals(self) -> list[Node]:
        return [n for n in self.nodes if n.goal]

    def __repr__(self) -> str:
        return (
            f"PlanGraph(start={self.start!r}, nodes={self.nx.number_of_nodes()}, edges={len(self._edges)}, "
            f"budget={list(self.budget) if self.budget is not None else None}, horizon={self.horizon}"
            + (f", problem={self.problem!r})" if self.problem != "path" else ")")
        )

    # --- checks ---------------------------------------------------------------------------------------------
    def validate(self, budget: Sequence[float] | None = None, horizon: int | None = None) -> tuple[float, ...]:
        """Check the graph against a budget (default: its own) and horizon; return the budget as a tuple.

        Raises ``InputError`` naming the problem: unknown start, cost vectors of the wrong length, a missing
        or negative budget, a bad horizon or discount, or a zero-cost cycle when no horizon bounds the walk. A
        program graph (``problem == "selection"``) is checked as ``validate_program`` says instead of the walk
        conditions (start, horizon, cycles).
        """
        chosen = self.budget if budget is None else tuple(_number(b, "budget entry") for b in budget)
        if self.problem != "selection" and self.start not in self.nx:
            raise InputError(f'The start node {self.start!r} is not among the nodes; add it to "nodes".')
        if chosen is None:
            raise InputError('No budget given: add "budget" (one number per limit, [] for none) to the plan graph.')
        if any(b < 0 for b in chosen):
            raise InputError(f"The budget {list(chosen)} has a negative entry; every entry must be >= 0.")
        if self.limits is not None and len(self.limits) != len(chosen):
            raise InputError(f'"limits" names {len(self.limits)} limits but the budget has {len(chosen)} entries.')
        for edge in self._edges.values():
            if len(edge.cost) != len(chosen):
                raise InputError(
                    f"Edge {edge.id!r} has {len(edge.cost)} cost entries but the budget has {len(chosen)}; give every "
                    f"edge one cost per budget entry."
                )
        if self.problem == "selection":
            self.validate_program(len(chosen))
            return chosen
        _check_horizon(horizon if horizon is not None else self.horizon)
        _check_discount(self.discount)
        if (horizon if horizon is not None else self.horizon) is None:
            cycle = self.zero_cost_cycle()
            if cycle:
                walk = " -> ".join(repr(n) for n in [*cycle, cycle[0]])
                raise InputError(
                    f"The graph has a cycle of zero-cost edges ({walk}) and no horizon, so walks are unbounded: add "
                    f'"horizon" (the maximum number of steps) or give some edge of the cycle a positive cost.'
                )
        return chosen

    def validate_program(self, entries: int) -> None:
        """The program-graph conditions: every node has a status of ``PROGRAM_STATUSES``, evaluated, implemented
        and predicted nodes have a score, node costs (when given) have ``entries`` entries, every predicted node has
        an in-edge and the predicted nodes form no cycle of revisions."""
        predicted = []
        for node in self.nodes:
            if node.status not in PROGRAM_STATUSES:
                raise InputError(
                    f"Program node {node.id!r} has status {node.status!r}; use one of {', '.join(PROGRAM_STATUSES)}."
                )
            if node.score is None and node.status != "failed":
                raise InputError(f"Program node {node.id!r} ({node.status}) needs a score.")
            if node.cost and len(node.cost) != entries:
                raise InputError(
                    f"Node {node.id!r} has {len(node.cost)} cost entries but the budget has {entries}; give its "
                    f"evaluation cost one entry per budget entry."
                )
            if node.status == "predicted":
                if not self.nx.in_degree(node.id):
                    raise InputError(
                        f"Predicted node {node.id!r} has no revision leading to it; add an edge from the candidate it "
                        f"revises."
                    )
                predicted.append(node.id)
        try:
            cycle = [u for u, _, _ in nx.find_cycle(self.nx.subgraph(predicted))]
        except nx.NetworkXNoCycle:
            return
        walk = " -> ".join(repr(n) for n in [*cycle, cycle[0]])
        raise InputError(
            f"Predicted nodes form a cycle of revisions ({walk}); every revision chain must start at an evaluated or "
            f"implemented candidate."
        )

    def zero_cost_cycle(self) -> list[NodeId]:
        """Nodes of a cycle whose edges all cost nothing (empty list when there is none)."""
        free = nx.DiGraph()
        free.add_edges_from((e.source, e.target) for e in self._edges.values() if not any(e.cost))
        try:
            return [u for u, _ in nx.find_cycle(free)]
        except nx.NetworkXNoCycle:
            return []

    # --- JSON -----------------------------------------------------------------------------------------------
    @classmethod
    def from_json(cls, data: object) -> PlanGraph:
        """Build and validate a graph from its JSON object (``docs/plan-graph.md``); raise ``InputError`` when
        malformed."""
        if not isinstance(data, Mapping):
            raise InputError(
                f"A plan graph is a JSON object with start, budget, nodes and edges; got {type(data).__name__}."
            )
        _known_fields(data, GRAPH_FIELDS, "the plan graph")
        for field in ("start", "budget", "nodes", "edges"):
            if field not in data:
                raise InputError(f'The plan graph is missing the required field "{field}".')
        if not isinstance(data["budget"], list):
            raise InputError(f'"budget" must be a list of numbers (one per limit); got {data["budget"]!r}.')
        for field in ("nodes", "edges"):
            if not isinstance(data[field], list):
                raise InputError(f'"{field}" must be a list of objects; got {type(data[field]).__name__}.')
        horizon = data.get("horizon")
        if isinstance(horizon, float) and horizon.is_integer():
            horizon = int(horizon)  # JSON writers may print 20 as 20.0
        _check_horizon(horizon)
        limits = data.get("limits")
        if limits is not None and not (isinstance(limits, list) and all(isinstance(x, str) for x in limits)):
            raise InputError(f'"limits" must be a list of names, one per budget entry; got {limits!r}.')
        graph = cls(
            data["start"],
            data["budget"],
            horizon=horizon,
            discount=_number(data.get("discount", 1.0), "discount"),
            limits=limits,
            problem=data.get("problem", "path"),
        )
        _check_id(graph.start, "start")
        for i, raw in enumerate(data["nodes"]):
            item = _record(raw, f"node #{i}", required=("id",), known=NODE_FIELDS)
            key = item.get("key")
            cost = item.get("cost", [])
            if not isinstance(cost, list):
                raise InputError(f"The cost of node {item['id']!r} must be a list of numbers; got {cost!r}.")
            graph.add_node(
                item["id"],
                item.get("reward", 0.0),
                goal=_flag(item, "goal", i),
                dead_end=_flag(item, "dead_end", i),
                state=str(item.get("state", "")),
                key=None if key is None else str(key),
                score=item.get("score"),
                std=item.get("std", 0.0),
                cost=cost,
                status=item.get("status", ""),
                data=item.get("data"),
            )
        for i, raw in enumerate(data["edges"]):
            item = _record(raw, f"edge #{i}", required=("id", "source", "target", "cost"), known=EDGE_FIELDS)
            if not isinstance(item["cost"], list):
                raise InputError(f"The cost of edge {item['id']!r} must be a list of numbers; got {item['cost']!r}.")
            graph.add_edge(
                item["id"], item["source"], item["target"], str(item.get("action", "")), item["cost"], item.get("data")
            )
        graph.validate()
        return graph

    def to_json(self) -> GraphJSON:
        out = GraphJSON(start=self.start)
        if self.budget is not None:
            out["budget"] = list(self.budget)
        if self.limits is not None:
            out["limits"] = list(self.limits)
        if self.horizon is not None:
            out["horizon"] = self.horizon
        out["discount"] = self.discount
        if self.problem != "path":
            out["problem"] = self.problem
        out["nodes"] = [n.to_json() for n in self.nodes]
        out["edges"] = [e.to_json() for e in self.edges]
        return out

    @classmethod
    def load(cls, path: str | Path) -> PlanGraph:
        """Read a plan graph JSON file; unreadable, malformed or oversized files (more than ``MAX_FILE_BYTES``)
        raise ``InputError``."""
        path = Path(path)
        try:
            size = path.stat().st_size
            if size > MAX_FILE_BYTES:
                raise InputError(
                    f"{path} holds {size:,} bytes, more than the {MAX_FILE_BYTES:,} a plan graph file may: split the "
                    "problem, or drop the nodes and edges no walk within the budget can reach."
                )
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"Cannot read plan graph file {path}: {exc.strerror or exc}.") from None
        except UnicodeDecodeError as exc:
            raise InputError(f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}).") from None
        return cls.from_json(parse_json(text, str(path)))


def parse_json(text: str, where: str) -> object:
    """The JSON value of ``text`` (read from ``where``); ``InputError`` (one line) when it is not JSON or nests
    deeper than Python's parser can follow."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}).") from None
    except RecursionError:
        raise InputError(f"{where} nests JSON arrays or objects too deeply to be a plan graph.") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise InputError(f"{where} holds a value that cannot be read as a number ({exc}).") from None


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"The {what} must be a finite number; got {value!r}.")
    return float(value)


def _checked_node(node: Node) -> Node:
    """``node`` with its numbers as floats and its cost as a tuple; ``InputError`` for bad field values."""
    where = f"node {node.id!r}"
    cost = tuple(_number(c, f"cost entry of {where}") for c in node.cost)
    if any(c < 0 for c in cost):
        raise InputError(f"The {where} has a negative cost {list(cost)}; every cost entry must be >= 0.")
    std = _number(node.std, f"std of {where}")
    if std < 0:
        raise InputError(f"The std of {where} must be >= 0; got {std!r}.")
    if node.status and node.status not in PROGRAM_STATUSES:
        raise InputError(f"The status of {where} must be one of {', '.join(PROGRAM_STATUSES)}; got {node.status!r}.")
    return replace(
        node,
        reward=_number(node.reward, f"reward of {where}"),
        goal=bool(node.goal),
        dead_end=bool(node.dead_end),
        state=str(node.state),
        score=None if node.score is None else _number(node.score, f"score of {where}"),
        std=std,
        cost=cost,
        data=_payload(node.data, where),
    )


def _payload(data: object, where: str) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise InputError(f'"data" of {where} must be a JSON object; got {data!r}.')
    return dict(data)


def _check_id(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(f"The {what} must be a string or an integer; got {value!r}.")


def _check_horizon(horizon: object) -> None:
    if horizon is not None and (isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1):
        raise InputError(f'"horizon" must be an integer >= 1 (the maximum number of steps); got {horizon!r}.')


def _check_discount(discount: float) -> None:
    if not 0.0 <= discount <= 1.0:
        raise InputError(f'"discount" must be between 0 and 1; got {discount!r}.')


def _record(raw: object, where: str, required: Sequence[str], known: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise InputError(f"The {where} must be a JSON object; got {raw!r}.")
    name = f"{where} ({raw['id']!r})" if "id" in raw else where
    _known_fields(raw, known, f"the {name}")
    for field in required:
        if field not in raw:
            raise InputError(f'The {name} is missing the required field "{field}".')
    return raw


def _known_fields(data: Mapping[str, object], known: Sequence[str], where: str) -> None:
    """Refuse a field the format does not have (a misspelling would otherwise be ignored), naming the closest."""
    for field in data:
        if field not in known:
            close = difflib.get_close_matches(str(field), known, n=1, cutoff=0.5)
            hint = f'; did you mean "{close[0]}"?' if close else f"; the fields are {', '.join(known)}."
            raise InputError(f'Unknown field "{field}" in {where}{hint}')


def _flag(item: Mapping[str, object], field: str, index: int) -> bool:
    value = item.get(field, False)
    if not isinstance(value, bool):
        raise InputError(f'"{field}" of node {item.get("id", index)!r} must be true or false; got {value!r}.')
    return value
