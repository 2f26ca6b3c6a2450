"""The four TPS subagents, each a separate stage with its own prompt, JSON schema and protocol.

1. ``PlanSampler`` — M candidate plans, each a list of subplans (``ModelPlanSampler``).
2. ``StateSimulator`` — predicted state and non-negative cost vector after each subplan
   (``ModelStateSimulator``).
3. ``StateMerger`` — which predicted states are the same node (``KeyJudgeMerger``: canonical keys, then a
   conservative model judge).
4. ``RewardLabeler`` — +1 goal, -1 dead end, 0 otherwise (``ModelRewardLabeler``; for program graphs
   ``ScoreLabeler``, which labels by predicted score).

With the harness's tools (``ToolSpec``, ``.tool_calls``), every subplan is one tool call and stage 1 is
``ToolCallPlanSampler`` (``.sampler``).

Each stage can be called alone, and each protocol can be implemented by something other than a model (a benchmark
may plug in an oracle simulator or labeler that uses the true environment). Model-backed stages never raise for a
malformed answer: they re-ask with the problem named and fall back to an empty or neutral result.
"""

from metaharness.planner.subagents.labeler import (
    DEAD_END,
    GOAL,
    NEUTRAL,
    ModelRewardLabeler,
    RewardLabeler,
    ScoreLabeler,
)
from metaharness.planner.subagents.merger import KeyJudgeMerger, StateMerger
from metaharness.planner.subagents.sampler import DEFAULT_PLANS, ModelPlanSampler, PlanSampler, ToolCallPlanSampler
from metaharness.planner.subagents.simulator import ModelStateSimulator, StateSimulator
from metaharness.planner.subagents.stage_io import CandidatePlan, PlanningTask, PredictedState, SimulatedStep
from metaharness.planner.subagents.tool_calls import ToolSpec, check_call, tool_specs

__all__ = [
    "DEAD_END",
    "DEFAULT_PLANS",
    "GOAL",
    "NEUTRAL",
    "CandidatePlan",
    "KeyJudgeMerger",
    "ModelPlanSampler",
    "ModelRewardLabeler",
    "ModelStateSimulator",
    "PlanSampler",
    "PlanningTask",
    "PredictedState",
    "RewardLabeler",
    "ScoreLabeler",
    "SimulatedStep",
    "StateMerger",
    "StateSimulator",
    "ToolCallPlanSampler",
    "ToolSpec",
    "check_call",
    "tool_specs",
]
