"""The contract between step-budgeted puzzle environments, their exact oracle and the agents that play them.

A ``PuzzleEnv`` is deterministic and fully observable. Contract:

- ``start`` is the initial state; states are hashable and ``key(state)`` is canonical (equal keys iff equal
  states), so predicted states can be merged exactly and looked up again with ``state_of(key)``.
- ``step(state, action)`` always spends one step: an action that cannot be carried out (a wall, a blocked push,
  a block that is not clear, a malformed action) leaves the state unchanged.
- ``actions(state)`` lists every well-formed action in ``state``, including ones that would be blocked.
- ``distance(state)`` is the oracle: the exact minimum number of actions from ``state`` to a goal state
  (T* at the start), or ``None`` when no goal state is reachable at all.
- ``goal`` says in words what counts as solved; ``parse_state(text)`` reads a state back from a description in
  the ``render`` format (e.g. a model's prediction), or ``None`` when it is not a state of this problem.
- ``heuristic(state)`` is a cheap goal-distance estimate (not the oracle) for the greedy baseline.
- ``render(state)`` is the observation shown to a model; ``rules`` explains the mechanics, the observation format
  and the action syntax; ``parse_action(text)`` finds the last action written in free text (or ``None``).

The helpers below derive everything the benchmark measures from ``distance`` alone, so a new environment only
has to implement the protocol.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol, TypeVar, runtime_checkable

S = TypeVar("S", bound=Hashable)


@runtime_checkable
class PuzzleEnv(Protocol[S]):
    name: str
    rules: str
    goal: str
    start: S

    def actions(self, state: S) -> list[str]: ...

    def step(self, state: S, action: str) -> S: ...

    def is_goal(self, state: S) -> bool: ...

    def key(self, state: S) -> str: ...

    def state_of(self, key: str) -> S: ...

    def render(self, state: S) -> str: ...

    def parse_action(self, text: str) -> str | None: ...

    def parse_state(self, text: str) -> S | None: ...

    def distance(self, state: S) -> int | None: ...

    def heuristic(self, state: S) -> float: ...


def viable(env: PuzzleEnv[S], state: S, remaining: int) -> bool:
    """Whether a goal can still be reached from ``state`` with at most ``remaining`` actions."""
    d = env.distance(state)
    return d is not None and d <= remaining


def optimal_actions(env: PuzzleEnv[S], state: S) -> list[str]:
    """Actions that lower the oracle distance by one (empty at a goal or in a dead end)."""
    d = env.distance(state)
    if not d:
        return []
    return [a for a in env.actions(state) if env.distance(env.step(state, a)) == d - 1]
