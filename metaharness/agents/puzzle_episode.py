"""One budgeted episode of a puzzle agent, scored step by step against the exact oracle.

The agent contract (``PuzzleAgent``): ``reset(env, budget)`` starts an episode; ``act(state, remaining)``
returns a ``Decision`` naming the action to execute (``None`` when no action could be read from the model,
which spends a step and changes nothing, like a blocked move) and, when it can tell, the action its own reasoning
intended. An agent handles its model's unusable answers itself (an unreadable action is ``None``) and raises only
for systemic failures (a missing key, an unreachable server), which stop the run.

Per step the runner records the oracle distance before and after and derives the TAPE appendix metrics:

- *sampling error*: the executed action differs from the intended one (the action the agent's thought points at,
  or the planned action for plan-executing agents); an unreadable intention counts as a mismatch when an action
  was executed, and an unreadable action as a mismatch when an intention was read. Constrained executors have
  none by construction.
- *planning error*: judged on the intended action, only at steps where the goal was still reachable within the
  remaining budget (so errors are attributable): the intended action leaves no way to the goal within the
  remaining budget minus one, or no intention could be read.
- *first irrecoverable action*: the first step after which the goal needs more actions than remain, although it
  did not before.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from metaharness.agents.environments.puzzle import PuzzleEnv, viable
from metaharness.json_types import JSONObject


@dataclass
class Decision:
    """What an agent chose this step, and why (for the trace and the error metrics)."""

    action: str | None
    intended: str | None = None
    thought: str = ""
    # Canonical key of the state the agent's plan predicts after this action (plan-based agents).
    predicted: str | None = None
    # Planning-tool calls made before this decision, and whether one of them replaced an existing plan.
    plans: int = 0
    replanned: bool = False
    calls: list[dict[str, Any]] = field(default_factory=list)


@runtime_checkable
class PuzzleAgent(Protocol):
    name: str

    def reset(self, env: PuzzleEnv, budget: int) -> None: ...

    def act(self, state: Hashable, remaining: int) -> Decision: ...


@dataclass
class StepRecord:
    t: int
    remaining: int
    action: str | None
    intended: str | None
    distance_before: int | None
    distance_after: int | None
    viable_after: bool
    planning_error: bool | None  # None when not judged (the goal was already out of reach)
    sampling_error: bool
    predicted: str | None
    observed: str
    plans: int
    replanned: bool
    thought: str
    calls: list[dict[str, Any]]


@dataclass
class EpisodeRecord:
    instance: str
    env: str
    bin: str
    agent: str
    model: str | None
    slack: int
    t_star: int
    budget: int
    success: bool
    actions_used: int
    first_irrecoverable: int | None
    planning_errors: int
    planning_judged: int
    sampling_errors: int
    plan_calls: int
    replans: int
    mismatches: int
    seconds: float
    # Model tokens of the episode (all roles, planning stages included), filled in by the benchmark runner.
    input_tokens: int = 0
    output_tokens: int = 0
    steps: list[StepRecord] = field(default_factory=list)

    @property
    def budget_used(self) -> float:
        return self.actions_used / self.budget if self.budget else 0.0

    def to_json(self) -> JSONObject:
        out = asdict(self)
        out["budget_used"] = round(self.budget_used, 4)
        return out


def _planning_error(env: PuzzleEnv, state: Hashable, intended: str | None, remaining: int) -> bool | None:
    if not viable(env, state, remaining):
        return None
    if intended is None:
        return True
    return not viable(env, env.step(state, intended), remaining - 1)


def run_episode(
    env: PuzzleEnv,
    agent: PuzzleAgent,
    *,
    slack: int,
    instance: str = "",
    bin: str = "",
    model: str | None = None,
) -> EpisodeRecord:
    """Play one episode with budget B = T* + ``slack`` and score every step with the oracle."""
    t_star = env.distance(env.start)
    if t_star is None:
        raise ValueError(f"instance {instance or env.key(env.start)} has no solution")
    budget = t_star + slack
    started = time.perf_counter()
    state = env.start
    steps: list[StepRecord] = []
    first_irrecoverable = None
    agent.reset(env, budget)
    for t in range(budget):
        if env.is_goal(state):
            break
        remaining = budget - t
        before = env.distance(state)
        decision = agent.act(state, remaining)
        nxt = env.step(state, decision.action) if decision.action is not None else state
        after = env.distance(nxt)
        ok_after = after is not None and after <= remaining - 1
        if first_irrecoverable is None and viable(env, state, remaining) and not ok_after:
            first_irrecoverable = t
        steps.append(
            StepRecord(
                t=t,
                remaining=remaining,
                action=decision.action,
                intended=decision.intended,
                distance_before=before,
                distance_after=after,
                viable_after=ok_after,
                planning_error=_planning_error(env, state, decision.intended, remaining),
                sampling_error=decision.intended != decision.action,
                predicted=decision.predicted,
                observed=env.key(nxt),
                plans=decision.plans,
                replanned=decision.replanned,
                thought=decision.thought,
                calls=decision.calls,
            )
        )
        state = nxt
    return EpisodeRecord(
        instance=instance,
        env=env.name,
        bin=bin,
        agent=agent.name,
        model=model,
        slack=slack,
        t_star=t_star,
        budget=budget,
        success=env.is_goal(state),
        actions_used=len(steps),
        first_irrecoverable=first_irrecoverable,
        planning_errors=sum(1 for s in steps if s.planning_error),
        planning_judged=sum(1 for s in steps if s.planning_error is not None),
        sampling_errors=sum(1 for s in steps if s.sampling_error),
        plan_calls=sum(s.plans for s in steps),
        replans=sum(1 for s in steps if s.replanned),
        mismatches=sum(1 for s in steps if s.predicted is not None and s.predicted != s.observed),
        seconds=round(time.perf_counter() - started, 3),
        steps=steps,
    )
