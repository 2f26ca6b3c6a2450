"""What the four TPS stages pass along: the planning task, candidate plans, simulated steps, predicted states.

The same types serve plan graphs (agent states; ``metaharness.planner.tps``) and program graphs (candidate
harnesses; ``metaharness.planner.expand``). The program-graph fields are optional and say so where they are
declared: a plan's ``start`` node, a step's predicted ``score``, ``std``, ``node_cost`` and ``data``, a state's
``score``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from metaharness.errors import InputError
from metaharness.planner.subagents.tool_calls import CALL_FORMAT, ToolSpec, ToolSpecJSON, tool_specs


class StageRecord(TypedDict, total=False):
    """One stage's entry in a planning record (``RouteResult.stages``, ``Growth.stages``): what went in, what came
    out, the model exchanges (``calls``), and what was set aside (``dropped``) or ignored (``ignored``)."""

    stage: str
    input: Mapping[str, object]
    output: list[object]
    dropped: str | list[str]
    ignored: str
    calls: Sequence[Mapping[str, object]]


def stage_record(
    name: str,
    stage: object,
    inputs: Mapping[str, object],
    output: Sequence[object],
    *,
    dropped: str | list[str] | None = None,
    ignored: str | None = None,
) -> StageRecord:
    """The record of stage ``name`` (an object that may keep a log of model calls: its ``take_calls``)."""
    take = getattr(stage, "take_calls", None)
    entry = StageRecord(stage=name, input=inputs, output=list(output))
    if dropped:
        entry["dropped"] = dropped
    if ignored:
        entry["ignored"] = ignored
    entry["calls"] = take() if take else []
    return entry


class TaskJSON(TypedDict, total=False):
    history: list[str]
    goal: str
    budget: dict[str, float]
    tools: list[ToolSpecJSON]


class StepJSON(TypedDict, total=False):
    state: str
    cost: list[float]
    key: str | None
    score: float | None
    std: float
    node_cost: list[float]
    data: dict[str, Any]


class StateJSON(TypedDict, total=False):
    state: str
    key: str | None
    score: float


@dataclass(frozen=True)
class PlanningTask:
    """The planning call's input: history h (oldest first, the last entry describes the current state), goal g
    and remaining budget b, one entry per named limit (e.g. ``steps``, ``usd``). With ``tools`` (the harness's
    tools), every subplan is one tool call, written as ``CALL_FORMAT``
    says."""

    history: tuple[str, ...]
    goal: str
    budget: tuple[float, ...]
    limits: tuple[str, ...]
    tools: tuple[ToolSpec, ...] = ()

    @classmethod
    def create(
        cls,
        history: str | Sequence[str],
        goal: str,
        budget: Mapping[str, float],
        tools: Sequence[object] | None = None,
    ) -> PlanningTask:
        """Normalise user input: a history string or list; a budget mapping ``{name: amount}`` (names, not a list:
        every cost is reported by them); tools in any form
        ``tool_specs`` takes."""
        turns = (history,) if isinstance(history, str) else tuple(str(h) for h in history)
        if not isinstance(goal, str) or not goal.strip():
            raise InputError("The goal must be a non-empty description of what counts as done.")
        if not isinstance(budget, Mapping):
            raise InputError(f'The budget must map limit names to amounts, e.g. {{"steps": 8}}; got {budget!r}.')
        names, amounts = tuple(str(k) for k in budget), tuple(budget.values())
        values = []
        for name, amount in zip(names, amounts, strict=False):
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
                raise InputError(f"The remaining budget for {name!r} must be a number >= 0; got {amount!r}.")
            values.append(float(amount))
        return cls(turns, goal, tuple(values), names, tool_specs(tools or ()))

    @property
    def current_state(self) -> str:
        return self.history[-1] if self.history else ""

    def describe(self) -> str:
        """The shared context every stage prompt starts with."""
        history = "\n".join(f"{i + 1}. {h}" for i, h in enumerate(self.history)) or "(empty)"
        budget = ", ".join(f"{n} = {b:g}" for n, b in zip(self.limits, self.budget, strict=False)) or "no limits"
        text = (
            f"History (oldest first; the last entry is the current state):\n{history}\n\n"
            f"Goal: {self.goal}\n\nRemaining budget: {budget}"
        )
        if self.tools:
            listing = "\n".join(
                f"- {t.name}: {t.description} Arguments (JSON schema): {json.dumps(t.parameters, sort_keys=True)}"
                for t in self.tools
            )
            text += f"\n\nTools (every step is one call of one of them, {CALL_FORMAT}):\n{listing}"
        return text

    def to_json(self) -> TaskJSON:
        out = TaskJSON(
            history=list(self.history), goal=self.goal, budget=dict(zip(self.limits, self.budget, strict=False))
        )
        if self.tools:
            out["tools"] = [t.to_json() for t in self.tools]
        return out


@dataclass(frozen=True)
class CandidatePlan:
    """One sampled plan: a sequence of subplans (actions or short action groups), in order. ``start`` is the node
    the plan sets out from when that is not the current state (program graphs: the candidate it revises)."""

    subplans: tuple[str, ...]
    start: str | int | None = None

    def to_json(self) -> list[str]:
        return list(self.subplans)


@dataclass(frozen=True)
class SimulatedStep:
    """The predicted state after one subplan and what that subplan costs (one entry per limit, >= 0).

    ``key`` is the state's canonical form when the domain has one: equal keys are merged without a judge.

    In a program graph the state is a revised harness: ``cost`` is what implementing the revision costs,
    ``node_cost`` what evaluating the revised harness costs, ``score`` / ``std`` its predicted validation score and
    uncertainty (``score`` None: predicted to break the harness), ``data`` the simulator's evidence (JSON-able).
    """

    state: str
    cost: tuple[float, ...]
    key: str | None = None
    score: float | None = None
    std: float = 0.0
    node_cost: tuple[float, ...] = ()
    data: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def to_json(self) -> StepJSON:
        out = StepJSON(state=self.state, cost=list(self.cost), key=self.key)
        if self.score is not None or self.node_cost:
            out.update({"score": self.score, "std": self.std, "node_cost": list(self.node_cost)})
        if self.data:
            out["data"] = self.data
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SimulatedStep:
        return cls(
            data["state"],
            tuple(data["cost"]),
            data.get("key"),
            data.get("score"),
            float(data.get("std", 0.0)),
            tuple(data.get("node_cost", ())),
            dict(data.get("data", {})),
        )


@dataclass(frozen=True)
class PredictedState:
    """A state to be merged or labelled: its text, optional canonical key and (program graphs) predicted score."""

    state: str
    key: str | None = None
    score: float | None = None

    def to_json(self) -> StateJSON:
        out = StateJSON(state=self.state, key=self.key)
        if self.score is not None:
            out["score"] = self.score
        return out
