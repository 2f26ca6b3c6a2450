"""Model-free baselines for the puzzle benchmarks: uniform random actions, and greedy one-step lookahead.

Neither sees the oracle. The greedy agent minimises the environment's cheap heuristic after one action, prefers
actions that change the state and states it has not visited, and breaks ties at random (seeded), so it walks into
the dead ends a heuristic cannot see (a box pushed into a corner) and wastes moves on plateaus.
"""

from __future__ import annotations

import random
from collections.abc import Hashable

from metaharness.agents.environments.puzzle import PuzzleEnv
from metaharness.agents.puzzle_episode import Decision


class RandomAgent:
    name = "random"
    env: PuzzleEnv  # the episode's, from reset()

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def reset(self, env: PuzzleEnv, budget: int) -> None:
        self.env = env

    def act(self, state: Hashable, remaining: int) -> Decision:
        action = self.rng.choice(self.env.actions(state))
        return Decision(action, intended=action)


class GreedyAgent:
    name = "greedy"
    env: PuzzleEnv  # the episode's, from reset()

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)
        self.visited: set[Hashable] = set()

    def reset(self, env: PuzzleEnv, budget: int) -> None:
        self.env = env
        self.visited = {env.start}

    def act(self, state: Hashable, remaining: int) -> Decision:
        env = self.env

        def score(action: str) -> tuple[float, bool, bool]:
            nxt = env.step(state, action)
            return (env.heuristic(nxt), nxt == state, nxt in self.visited)

        scored = [(score(a), a) for a in env.actions(state)]
        best = min(s for s, _ in scored)
        action = self.rng.choice([a for s, a in scored if s == best])
        self.visited.add(env.step(state, action))
        return Decision(action, intended=action)
