"""What every solver returns: ``PlanResult``, whose ``to_json()`` is the output object of
``docs/plan-graph.md``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from metaharness.planner.graph import NodeId

if TYPE_CHECKING:  # the path half imports this module
    from metaharness.planner.path.problem import Walk

# The one status vocabulary of every solver of both halves. "optimal"/"infeasible" are proofs; the lm baseline
# returns "feasible" (a valid plan, optimality unknown) or "invalid" (its answer is not a feasible plan; ``note`` says
# why); an ILP stopped by a time limit, and the selection baselines, return "feasible" (or "unknown": no plan).
Status = Literal["optimal", "infeasible", "feasible", "invalid", "unknown"]


class _ResultKeys(TypedDict):
    status: Status
    path: list[NodeId]
    nodes: list[NodeId]
    value: float | None
    cost: list[float]
    solver: str
    seconds: float


class PlanResultJSON(_ResultKeys, total=False):
    """The output object of ``docs/plan-graph.md`` (``PlanResult.to_json``): the rest when set."""

    objective: float
    note: str
    evaluate: list[NodeId]
    gap: float
    reason: str
    closest: dict[str, Any]


@dataclass
class PlanResult:
    """A solver's answer. ``nodes`` lists v0..vk (start included); ``value`` is None when there is no plan.

    A selection (``metaharness.planner.selection``) sets ``evaluate`` (the nodes to evaluate, best predicted
    first); its ``nodes`` are every node to implement or evaluate that is not evaluated yet (topological order),
    ``path`` the revision edges to carry out and ``value`` the expected best score; ``gap`` is the relative
    optimality gap when optimality is not proven.
    """

    status: Status
    solver: str
    seconds: float = 0.0
    path: list[NodeId] = field(default_factory=list)
    nodes: list[NodeId] = field(default_factory=list)
    value: float | None = None
    # By limit name (the graph's ``limits``, else "limit 1", "limit 2", ...), as every planner result gives costs in
    # Python; ``to_json`` writes the list in the graph's order.
    cost: dict[str, float] = field(default_factory=dict)
    # Set only with soft targets: value minus the penalty for exceeding the preferred cost levels.
    objective: float | None = None
    note: str = ""
    evaluate: list[NodeId] = field(default_factory=list)
    gap: float | None = None
    # Set on "infeasible" plan-graph results: why (one sentence), and the closest miss ({"path", "nodes", "cost",
    # "over"}: the walk that breaks the budget least, its cost and by how much it exceeds each limit, both by limit
    # name) when the budget is what fails.
    reason: str = ""
    closest: dict[str, Any] | None = None

    @classmethod
    def from_walk(cls, status: Status, solver: str, walk: Walk, *, soft: bool, seconds: float = 0.0) -> PlanResult:
        return cls(
            status, solver, seconds, walk.path, walk.nodes, walk.value, walk.cost, walk.objective if soft else None
        )

    @property
    def has_plan(self) -> bool:
        return self.status in ("optimal", "feasible")

    def to_json(self) -> PlanResultJSON:
        """The output object of ``docs/plan-graph.md``. Its costs are lists in the graph's order (the JSON graph
        declares the order, as its budget and edge costs do); ``over`` names only the limits it exceeds."""
        out = PlanResultJSON(
            status=self.status,
            path=self.path,
            nodes=self.nodes,
            value=self.value,
            cost=list(self.cost.values()),
            solver=self.solver,
            seconds=round(self.seconds, 6),
        )
        if self.objective is not None:
            out["objective"] = self.objective
        if self.note:
            out["note"] = self.note
        if self.evaluate:
            out["evaluate"] = self.evaluate
        if self.gap is not None:
            out["gap"] = self.gap
        if self.reason:
            out["reason"] = self.reason
        if self.closest is not None:
            out["closest"] = {**self.closest, "cost": list(self.closest["cost"].values())}
        return out
