"""What the plan graph, the solver and exact execution contribute when simulation and rewards are exact.

    python benchmarks/sokoban_oracle.py [--env sokoban|blocksworld] [--slack 2] [--per-bin N] [--seed 0]

Plays the fixed instance set with budget B = T* + slack. TAPE runs with oracle subagents (true next states with
canonical keys, +1/-1/0 rewards from the oracle) and, since no model is involved, the model-free sampler: each
sampled action is optimal with probability 1 - epsilon and uniformly random otherwise (epsilon = 1 is a purely
random sampler). For comparison: uniform random actions, greedy one-step lookahead on the heuristic, and
"open loop": one plan from the same sampler, executed blindly with no solver and no replanning (the shape of
Plan-and-Act). Prints success per bin; nothing here calls a model.
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from metaharness.agents.environments.puzzle_instances import load_instance_set, make_env
from metaharness.agents.puzzle_baselines import GreedyAgent, RandomAgent
from metaharness.agents.puzzle_episode import Decision, run_episode
from metaharness.agents.puzzle_planning import NoisyOracleSampler, PuzzlePlanner
from metaharness.agents.puzzle_tape import TapeAgent
from metaharness.planner.subagents import PlanningTask


class OpenLoopAgent:
    """One sampled plan executed blindly; the steps after it ends are wasted."""

    name = "open loop"

    def __init__(self, epsilon: float, seed: int) -> None:
        self.epsilon, self.seed = epsilon, seed

    def reset(self, env, budget: int) -> None:
        sampler = NoisyOracleSampler(env, epsilon=self.epsilon, seed=self.seed)
        plans = sampler.sample(PlanningTask.create([env.render(env.start)], env.goal, {"steps": budget}), 1)
        self.plan = list(plans[0].subplans) if plans else []

    def act(self, state, remaining: int) -> Decision:
        action = self.plan.pop(0) if self.plan else None
        return Decision(action, intended=action)


def configurations(seed: int):
    yield "random actions", "-", lambda env: RandomAgent(seed)
    yield "greedy lookahead", "-", lambda env: GreedyAgent(seed)
    for epsilon in (0.3, 0.6):
        yield "open loop, 1 plan", f"{epsilon}", lambda env, e=epsilon: OpenLoopAgent(e, seed)
        for m in (1, 4):
            yield (
                f"TAPE oracle subagents, M={m}",
                f"{epsilon}",
                lambda env, e=epsilon, m=m: TapeAgent(PuzzlePlanner(env, oracle=True, m=m, epsilon=e, seed=seed)),
            )
    yield (
        "TAPE oracle subagents, M=4",
        "1.0 (random)",
        lambda env: TapeAgent(PuzzlePlanner(env, oracle=True, m=4, epsilon=1.0, seed=seed)),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", choices=["sokoban", "blocksworld"], default="sokoban")
    parser.add_argument("--slack", type=int, default=2)
    parser.add_argument("--per-bin", type=int, default=None, help="instances per bin (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    instance_set = load_instance_set(f"{args.env}_v1")
    instances = instance_set.select(None, args.per_bin)
    bins = list(instance_set.bins)
    table = Table(title=f"{instance_set.name}: success within B = T* + {args.slack} ({len(instances)} instances)")
    for column in ("agent", "epsilon", *[f"{b} (T*≈{instance_set.bins[b]})" for b in bins], "plan calls/ep", "seconds"):
        table.add_column(column, justify="left" if column in ("agent", "epsilon") else "right")
    for name, epsilon, make in configurations(args.seed):
        started = time.perf_counter()
        solved = {b: [] for b in bins}
        plans = 0
        for instance in instances:
            env = make_env(instance)
            record = run_episode(env, make(env), slack=args.slack, instance=instance.id, bin=instance.bin)
            solved[instance.bin].append(record.success)
            plans += record.plan_calls
        cells = [f"{100 * sum(v) / len(v):.0f}% ({sum(v)}/{len(v)})" for v in solved.values()]
        table.add_row(name, epsilon, *cells, f"{plans / len(instances):.1f}", f"{time.perf_counter() - started:.1f}")
    Console(width=150).print(table)


if __name__ == "__main__":
    main()
