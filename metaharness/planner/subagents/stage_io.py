"""What the four TPS stages pass along: the planning task, candidate plans, simulated steps, predicted states."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from metaharness.errors import InputError


@dataclass(frozen=True)
class PlanningTask:
    """The planning call's input: history h (oldest first, the last entry describes the current state), goal g
    and remaining budget b, one entry per named limit (e.g. ``steps``, ``usd``)."""

    history: tuple[str, ...]
    goal: str
    budget: tuple[float, ...]
    limits: tuple[str, ...]

    @classmethod
    def create(
        cls, history: str | Sequence[str], goal: str, budget: Mapping[str, float] | Sequence[float]
    ) -> PlanningTask:
        """Normalise user input: a history string or list; a budget mapping ``{name: amount}`` or list."""
        turns = (history,) if isinstance(history, str) else tuple(str(h) for h in history)
        if not isinstance(goal, str) or not goal.strip():
            raise InputError("The goal must be a non-empty description of what counts as done.")
        if isinstance(budget, Mapping):
            names, amounts = tuple(str(k) for k in budget), tuple(budget.values())
        else:
            amounts = tuple(budget)
            names = tuple(f"limit{i + 1}" for i in range(len(amounts)))
        values = []
        for name, amount in zip(names, amounts, strict=False):
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
                raise InputError(f"The remaining budget for {name!r} must be a number >= 0; got {amount!r}.")
            values.append(float(amount))
        return cls(turns, goal, tuple(values), names)

    @property
    def current_state(self) -> str:
        return self.history[-1] if self.history else ""

    def describe(self) -> str:
        """The shared context every stage prompt starts with."""
        history = "\n".join(f"{i + 1}. {h}" for i, h in enumerate(self.history)) or "(empty)"
        budget = ", ".join(f"{n} = {b:g}" for n, b in zip(self.limits, self.budget, strict=False)) or "no limits"
        return (
            f"History (oldest first; the last entry is the current state):\n{history}\n\n"
            f"Goal: {self.goal}\n\nRemaining budget: {budget}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "history": list(self.history),
            "goal": self.goal,
            "budget": dict(zip(self.limits, self.budget, strict=False)),
        }


@dataclass(frozen=True)
class CandidatePlan:
    """One sampled plan: a sequence of subplans (actions or short action groups), in order."""

    subplans: tuple[str, ...]

    def to_json(self) -> list[str]:
        return list(self.subplans)


@dataclass(frozen=True)
class SimulatedStep:
    """The predicted state after one subplan and what that subplan costs (one entry per limit, >= 0).

    ``key`` is the state's canonical form when the domain has one: equal keys are merged without a judge.
    """

    state: str
    cost: tuple[float, ...]
    key: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "cost": list(self.cost), "key": self.key}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SimulatedStep:
        return cls(data["state"], tuple(data["cost"]), data.get("key"))


@dataclass(frozen=True)
class PredictedState:
    """A state to be merged or labelled: its text and optional canonical key."""

    state: str
    key: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "key": self.key}
