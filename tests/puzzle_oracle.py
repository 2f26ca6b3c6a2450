"""Oracle plans over a puzzle environment, for the environment tests: they check the exact distance against
the plans it implies."""

from __future__ import annotations

from typing import TypeVar

from metaharness.agents.environments.puzzle import PuzzleEnv, optimal_actions, viable

S = TypeVar("S")


def viable_actions(env: PuzzleEnv[S], state: S, remaining: int) -> list[str]:
    """Actions after which the goal is still reachable within the remaining ``remaining - 1`` actions."""
    return [a for a in env.actions(state) if viable(env, env.step(state, a), remaining - 1)]


def optimal_plan(env: PuzzleEnv[S], state: S) -> list[str] | None:
    """One shortest action sequence from ``state`` to a goal, or ``None`` when the goal is unreachable."""
    if env.distance(state) is None:
        return None
    plan: list[str] = []
    while not env.is_goal(state):
        action = optimal_actions(env, state)[0]
        plan.append(action)
        state = env.step(state, action)
    return plan
