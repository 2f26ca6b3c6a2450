"""How long the staged-evaluation allocation takes on a large iteration: 200 candidates, 5 stages each.

    python benchmarks/allocation_speed.py [--instances 10] [--arms 200] [--seed 0] [--exact-limit 60] [--deep 3000]

Each instance is random (fixed seed): every arm unscored on a share of 50 examples (stages 4, 8, 16, 32, 50), its
prior gain over the reference Normal(-0.03, 0.05) with an sd of 0.03-0.15, per-example noise 0.15-0.25, tokens per
example 200-3,000; the budget is 3 full evaluations (150 example-evaluations) and, on every other instance, also
100,000 tokens. ``auto`` runs in this process; ``exact`` runs in a child process stopped after ``--exact-limit``
seconds (it proves optimality by branch and bound, which a problem this size may not allow in reasonable time).
Wall-clock and CPU seconds are both printed: on a shared machine the wall clock also counts other jobs' turns.

The gap ``auto`` reports is to a bound that may be loose; how far its plan is from the best plan there is is
unknown where ``exact`` cannot finish. ``--deep N`` (after the timings) searches each instance again with a node
limit of N and prints how much better a plan that deeper search found: a lower bound of ``auto``'s shortfall.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import time

from metaharness.budget import Budget, Spend
from metaharness.search.staging import Allocation, Arm, allocate
from metaharness.search.staging.arms import stage_options

SHARE = 50


def instance(seed: int, arms: int) -> tuple[list[Arm], Budget]:
    rng = random.Random(seed)
    out = []
    for i in range(arms):
        per = Spend(1.0, rng.uniform(200, 3000), 0.0)
        sd = rng.choice([0.03, 0.05, 0.1, 0.15])
        mean = rng.gauss(-0.03, 0.05)
        out.append(Arm(f"a{i:03d}", mean, sd**2, rng.uniform(0.15, 0.25), 0, SHARE, stage_options(0, SHARE, per), mean))
    budget = Budget(evals=3.0 * SHARE, tokens=100_000.0 if seed % 2 else float("inf"))
    return out, budget


def _exact(seed: int, arms: int, queue: multiprocessing.Queue) -> None:
    problem, budget = instance(seed, arms)
    plan = allocate(problem, budget, solver="exact")
    queue.put((plan.seconds, plan.net, plan.nodes))


def exact_within(seed: int, arms: int, limit: float) -> tuple[float, float, int] | None:
    """``exact``'s (seconds, net value, nodes) on the instance, None when it did not finish within ``limit`` seconds."""
    queue: multiprocessing.Queue = multiprocessing.Queue()
    child = multiprocessing.Process(target=_exact, args=(seed, arms, queue))
    child.start()
    child.join(limit)
    if child.is_alive():
        child.terminate()
        child.join()
        return None
    return queue.get()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=10)
    parser.add_argument("--arms", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--exact-limit", type=float, default=60.0, help="seconds before exact is stopped")
    parser.add_argument("--exact-instances", type=int, default=2, help="instances exact is tried on")
    parser.add_argument("--deep", type=int, default=0, help="also search each instance with this node limit")
    args = parser.parse_args()
    print(f"{args.instances} instances of {args.arms} arms x 5 stages (share {SHARE}), seed {args.seed}")
    seconds, cpu, plans = [], [], []
    for k in range(args.instances):
        arms, budget = instance(args.seed + k, args.arms)
        started, started_cpu = time.perf_counter(), time.process_time()
        plan: Allocation = allocate(arms, budget, solver="auto")
        seconds.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
        plans.append(plan)
        gap = "none" if plan.gap is None else f"{plan.gap:.5f}"
        print(
            f"  instance {k}: auto {seconds[-1]:.3f} s ({cpu[-1]:.3f} s CPU), {plan.status}"
            f"{' (search cut at its node limit)' if plan.truncated else ''}, value {plan.value:.5f}, net "
            f"{plan.net:.5f}, gap to the bound {gap}, {plan.nodes} nodes, {len(plan.targets)} arms chosen, "
            f"{plan.cost.evals:g} evals, budget {budget}"
        )
    print(f"auto: median {statistics.median(seconds):.3f} s, worst {max(seconds):.3f} s (wall clock)")
    print(f"auto: median {statistics.median(cpu):.3f} s, worst {max(cpu):.3f} s (CPU time of this process)")
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.deep:
        better = []
        for k, plan in enumerate(plans):
            arms, budget = instance(args.seed + k, args.arms)
            started_cpu = time.process_time()
            deep = allocate(arms, budget, solver="auto", node_limit=args.deep)
            better.append(deep.net - plan.net)
            print(
                f"  instance {k}: {args.deep} nodes, {time.process_time() - started_cpu:.2f} s CPU, net "
                f"{deep.net:.5f} ({better[-1]:+.5f} over auto, {better[-1] / max(plan.net, 1e-12):+.1%}), gap "
                f"to the bound {deep.gap:.5f}"
            )
        print(
            f"a {args.deep}-node search beat auto on {sum(b > 1e-9 for b in better)} of {len(better)} instances, "
            f"by {statistics.mean(better):.5f} on average and {max(better):.5f} at most"
        )
    for k in range(min(args.exact_instances, args.instances)):
        result = exact_within(args.seed + k, args.arms, args.exact_limit)
        if result is None:
            print(f"exact, instance {k}: did not finish within {args.exact_limit:g} s")
        else:
            gap = result[1] - plans[k].net
            print(f"exact, instance {k}: {result[0]:.3f} s, {result[2]} nodes, net value above auto's by {gap:.2e}")


if __name__ == "__main__":
    main()
