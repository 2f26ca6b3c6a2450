"""Stage 2, state simulation: the predicted state after every subplan and a non-negative cost vector per step.

A limit named ``steps`` (``STEP_LIMIT``) counts subplans: the model simulator does not guess it, every step costs
exactly 1 there (a small model predicts 1.06 steps for a step, and a route of two such steps then breaks a budget of
2 steps).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from metaharness.json_types import JSONObject, JSONValue
from metaharness.models.protocol import ModelClient
from metaharness.planner.asking import members, numbers, text_at
from metaharness.planner.subagents.model_stage import ModelStage, StageOptions
from metaharness.planner.subagents.stage_io import CandidatePlan, PlanningTask, SimulatedStep

if TYPE_CHECKING:
    from typing_extensions import Unpack

SIMULATOR_SYSTEM = (
    "You are the state simulator of a planning system. Given the current state and a plan, predict, step by step, "
    "the state right after each subplan is carried out, and what that subplan costs in each limit ({limits}), in the "
    "same units as the remaining budget (non-negative numbers). Describe each state completely and concretely, in "
    "the same format as the current state, so equal states get equal descriptions. Reply with JSON only: "
    '{{"steps": [{{"state": "...", "cost": [{example}]}}, ...]}} with exactly one entry per subplan.'
)


@runtime_checkable
class StateSimulator(Protocol):
    """Returns one ``SimulatedStep`` per subplan of ``plan``, or an empty list when it cannot simulate it.

    Costs have one non-negative entry per limit of ``task``. A simulator that knows the domain (an oracle in a
    benchmark) may fill ``key`` with the canonical state; the merger then merges equal keys without a judge.
    """

    def simulate(self, task: PlanningTask, plan: CandidatePlan) -> list[SimulatedStep]: ...


# The limit that counts steps: each subplan costs exactly 1 in it.
STEP_LIMIT = "steps"

# A predicted state is one description; bounded in the schema (hence in a model's grammar) so a rambling model
# stops within its answer's token cap.
MAX_STATE_CHARS = 600


def simulator_schema(steps: int, limits: int) -> JSONObject:
    cost: JSONObject = {
        "type": "array",
        "minItems": limits,
        "maxItems": limits,
        "items": {"type": "number", "minimum": 0},
    }
    state: JSONObject = {"type": "string", "minLength": 1, "maxLength": MAX_STATE_CHARS}
    step: JSONObject = {
        "type": "object",
        "properties": {"state": state, "cost": cost},
        "required": ["state", "cost"],
    }
    return {
        "type": "object",
        "properties": {"steps": {"type": "array", "minItems": steps, "maxItems": steps, "items": step}},
        "required": ["steps"],
    }


class ModelStateSimulator(ModelStage):
    """Simulates each plan with one model call (a ``steps`` limit is counted, not asked: 1 per step).
    ``canonical_key`` maps a state text to its canonical form (or None) when the domain has one, e.g. parsing
    positions out of a Sokoban observation."""

    def __init__(
        self,
        model: ModelClient,
        *,
        canonical_key: Callable[[str], str | None] | None = None,
        **options: Unpack[StageOptions],
    ) -> None:
        super().__init__(model, **options)
        self.canonical_key = canonical_key

    def simulate(self, task: PlanningTask, plan: CandidatePlan) -> list[SimulatedStep]:
        limits = len(task.limits)
        system = SIMULATOR_SYSTEM.format(limits=", ".join(task.limits) or "none", example=", ".join(["1"] * limits))
        listing = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(plan.subplans))
        check = _step_checker(len(plan.subplans), limits)
        answer = self.ask(
            system, f"{task.describe()}\n\nPlan:\n{listing}", simulator_schema(len(plan.subplans), limits), check=check
        )
        if answer is None:
            return []
        counted = [name == STEP_LIMIT for name in task.limits]
        return [
            SimulatedStep(
                text_at(s, "state").strip(),
                tuple(1.0 if step else c for step, c in zip(counted, numbers(members(s, "cost")), strict=True)),
                self.canonical_key(text_at(s, "state")) if self.canonical_key else None,
            )
            for s in members(answer, "steps")
        ]


def _step_checker(steps: int, limits: int) -> Callable[[JSONValue], str | None]:
    def check(answer: JSONValue) -> str | None:
        given = members(answer, "steps")
        if len(given) != steps:
            return f"give exactly {steps} steps, one per subplan (got {len(given)})"
        for i, step in enumerate(given):
            cost = numbers(members(step, "cost"))
            if len(cost) != limits:
                return f"step {i + 1} needs exactly {limits} cost numbers, one per limit"
            if any(not 0 <= c < math.inf for c in cost):
                return f"step {i + 1} has a negative or infinite cost; costs are finite numbers >= 0"
            if not text_at(step, "state").strip():
                return f"step {i + 1} has an empty state"
        return None

    return check
