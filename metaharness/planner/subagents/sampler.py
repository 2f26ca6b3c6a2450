"""Stage 1, multi-plan sampling: M candidate plans, each a sequence of subplans (``ModelPlanSampler``); with the
harness's tools, each subplan one tool call (``ToolCallPlanSampler``, over ``.tool_calls``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from metaharness.errors import InputError
from metaharness.json_types import JSONObject, JSONValue
from metaharness.models.protocol import ModelClient
from metaharness.planner.asking import members, strings
from metaharness.planner.subagents.model_stage import DEFAULT_MAX_STEPS, ModelStage, StageOptions, plans_schema
from metaharness.planner.subagents.stage_io import CandidatePlan, PlanningTask
from metaharness.planner.subagents.tool_calls import call_text, calls_schema, check_call

if TYPE_CHECKING:
    from typing_extensions import Unpack

DEFAULT_PLANS = 4  # TPS/TAPE: M = 4 plans works best

SAMPLER_SYSTEM = (
    "You are the plan sampler of a planning system. Propose {plans} different plans that reach the goal from the "
    "current state within the remaining budget. Each plan is a list of subplans: short, concrete actions or small "
    "groups of actions, in the order they are executed, at most {max_steps} per plan. Make the plans genuinely "
    "different (different routes or orders), not rewordings. Reply with JSON only: "
    '{{"plans": [{{"subplans": ["...", "..."]}}, ...]}}.'
)


@runtime_checkable
class PlanSampler(Protocol):
    """Returns at most ``plans`` candidate plans (possibly fewer, possibly none); never raises for a bad answer."""

    def sample(self, task: PlanningTask, plans: int) -> list[CandidatePlan]: ...


# A subplan is a short action; the bound is in the schema (and so in a grammar-constrained model's grammar), so a
# model that starts copying the state into a subplan is cut off after a line, not at the answer's token cap.
MAX_SUBPLAN_CHARS = 160


def sampler_schema(plans: int, max_steps: int) -> JSONObject:
    text: JSONObject = {"type": "string", "minLength": 1, "maxLength": MAX_SUBPLAN_CHARS}
    return plans_schema(plans, "subplans", text, max_steps)


class ModelPlanSampler(ModelStage):
    """Asks the model for ``plans`` plans in one answer (as TAPE does); duplicates are dropped."""

    def __init__(
        self, model: ModelClient, *, max_steps: int = DEFAULT_MAX_STEPS, **options: Unpack[StageOptions]
    ) -> None:
        super().__init__(model, **options)
        self.max_steps = max_steps

    def sample(self, task: PlanningTask, plans: int) -> list[CandidatePlan]:
        answer = self.ask(
            SAMPLER_SYSTEM.format(plans=plans, max_steps=self.max_steps),
            task.describe(),
            sampler_schema(plans, self.max_steps),
            check=_has_a_plan,
        )
        found: list[CandidatePlan] = []
        for item in members(answer, "plans")[:plans]:
            subplans = tuple(s.strip() for s in strings(members(item, "subplans")) if s.strip())[: self.max_steps]
            plan = CandidatePlan(subplans)
            if subplans and plan not in found:
                found.append(plan)
        return found


def _has_a_plan(answer: JSONValue) -> str | None:
    if not any(any(s.strip() for s in strings(members(p, "subplans"))) for p in members(answer, "plans")):
        return "every plan is empty; give at least one plan with at least one non-blank subplan"
    return None


TOOL_SAMPLER_SYSTEM = (
    "You are the plan sampler of a planning system for an agent with tools. Propose {plans} different plans that reach "
    "the goal from the current state within the remaining budget. Each plan is the list of tool calls to make, in "
    "order, at most {max_steps} per plan; each call names one of the tools listed below and gives arguments that "
    "match its schema. Make the plans genuinely different (different tools, arguments or orders). Reply with JSON "
    'only: {{"plans": [{{"calls": [{{"tool": "...", "arguments": {{...}}}}, ...]}}, ...]}}.'
)


class ToolCallPlanSampler(ModelPlanSampler):
    """Stage 1 for tool plans: ``plans`` plans of tool calls in one answer; invalid calls are re-asked, duplicates
    dropped. The subplans are the calls' ``call_text``."""

    def sample(self, task: PlanningTask, plans: int) -> list[CandidatePlan]:
        tools = task.tools
        if not tools:
            raise InputError("ToolCallPlanSampler needs a planning task with tools.")

        def check(answer: JSONValue) -> str | None:
            for i, item in enumerate(members(answer, "plans"), 1):
                for j, call in enumerate(members(item, "calls"), 1):
                    problem = check_call(call, tools)
                    if problem:
                        return f"plan {i}, call {j}: {problem}"
            return None

        answer = self.ask(
            TOOL_SAMPLER_SYSTEM.format(plans=plans, max_steps=self.max_steps),
            task.describe(),
            calls_schema(tools, plans, self.max_steps),
            check=check,
        )
        found: list[CandidatePlan] = []
        for item in members(answer, "plans")[:plans]:
            plan = CandidatePlan(tuple(call_text(c) for c in members(item, "calls")[: self.max_steps]))
            if plan.subplans and plan not in found:
                found.append(plan)
        return found
