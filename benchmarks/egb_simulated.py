"""EGB vs majority vote and random re-tries at equal model-call budget, with a simulated tool chooser.

The tasks are real ToolWorld tasks (1,000+ tools, BM25 candidates, deterministic simulator, exact-match success);
only the model is simulated. Every step has a hidden difficulty d ~ Beta(a, b). The chooser's distribution over
the step's candidates puts mass 1 - 0.8 d on the accepted tools (split 3:1 between the canonical tool and its
alias when both are listed), 60% of the rest on one confusable distractor and the remainder evenly on the others.
Harder steps are therefore both flatter (higher vote entropy) and more often decided wrongly by the majority:
the setting in which EGB's ordering should pay off. Arguments are filled correctly (the benchmark isolates the
tool choice); each argument fill that needs the model costs one sample like a vote does.

Strategies (m = 5 votes per step, n plan steps):

- majority-m:     plain majority vote with m votes per step (spends about n*m; no retries), for reference;
- majority-wide:  majority vote with floor(C / n) - 1 votes per step: the whole budget spent on bigger votes (one
                  sample per step kept for argument fills);
- resample:       whole-plan re-runs with one sampled choice per step until the result verifies;
- random-branch:  EGB's phase 1 and branch points, taken in random order, until the result verifies;
- egb:            EGB, highest-entropy branch points first, until the result verifies;
- .../reuse:      the same two with ``downstream="reuse"`` (downstream steps keep their parent's votes).

Two tables: (1) equal sample budget, every strategy capped at C = f * n * m samples per task (retries and
branches until the cap); (2) equal tries, at most b branches or b re-runs and no sample cap, which shows what the
branch order is worth per verifier call.

The hidden difficulties depend only on (task, seed), so all strategies face the same steps. Run:

    python benchmarks/egb_simulated.py                 # 5 seeds x 60 tasks, budget factors 1.5, 2, 3
    python benchmarks/egb_simulated.py --seeds 2 --tasks 20
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass

from metaharness.agents.branching import Meter, StepView, Vote, run_egb, vote_from_samples
from metaharness.agents.environments.toolworld import ToolTask, ToolWorld
from metaharness.agents.tool_baselines import run_retries

VOTES = 5


class SimulatedChooser:
    """Votes drawn from a hidden per-step distribution whose error rate grows with its entropy."""

    def __init__(self, task: ToolTask, *, seed: int, sampling_seed: int, beta: tuple[float, float], cap: int | None):
        self.task = task
        self.meter = Meter(cap=cap)
        hidden = random.Random(f"{task.id}:{seed}:hidden")
        self.rng = random.Random(f"{task.id}:{seed}:{sampling_seed}")
        self.dists: list[dict[str, float]] = []
        for index, step in enumerate(task.steps):
            names = [t.name for t in task.candidates(index)]
            right = sorted(
                (n for n in names if n in step.accepted), key=lambda n: n.endswith("_lookup") or n.startswith("calc_")
            )  # the canonical tool first, its alias second
            wrong = [n for n in names if n not in step.accepted]
            difficulty = hidden.betavariate(*beta)
            confuser = hidden.choice(wrong)
            q = 1 - 0.8 * difficulty
            dist = dict.fromkeys(names, 0.0)
            for n, share in zip(right, (0.75, 0.25) if len(right) > 1 else (1.0,), strict=False):
                dist[n] = q * share
            dist[confuser] = 0.6 * (1 - q)
            for n in wrong:
                if n != confuser:
                    dist[n] = 0.4 * (1 - q) / (len(wrong) - 1)
            self.dists.append(dist)

    def vote(self, view: StepView, samples: int) -> Vote:
        dist = self.dists[view.index]
        names = list(dist)
        self.meter.add(samples)
        return vote_from_samples(self.rng.choices(names, weights=list(dist.values()), k=samples), names)

    def fill(self, view: StepView, tool, options):
        step = self.task.steps[view.index]
        chosen = {}
        for name, values in options.items():
            source = step.sources.get(name, "absent")
            wanted = (
                step.arguments.get(name)
                if source is None
                else self.task.start
                if source == -1
                else view.history[source].observation
                if isinstance(source, int)
                else None
            )
            chosen[name] = wanted if wanted in values else values[0]
        self.meter.add(1)
        return chosen


def _branching(order: str, downstream: str):
    def run(task, chooser, cap, tries, seed):
        return run_egb(task, chooser, samples=VOTES, branch_budget=tries, order=order, downstream=downstream, seed=seed)

    return run


# name -> run(task, chooser, cap, tries, seed): ``tries`` bounds the extra trajectories (branches or re-runs)
# beyond the first; the majority-wide vote keeps one sample per step in reserve for argument fills.
STRATEGIES = {
    "majority-m": lambda task, chooser, cap, tries, seed: run_egb(task, chooser, samples=VOTES, branch_budget=0),
    "majority-wide": lambda task, chooser, cap, tries, seed: run_egb(
        task, chooser, samples=max(VOTES, cap // len(task.steps) - 1), branch_budget=0
    ),
    "resample": lambda task, chooser, cap, tries, seed: run_retries(task, chooser, attempts=tries + 1, samples=1),
    "random-branch": _branching("random", "revote"),
    "egb": _branching("entropy", "revote"),
    "random-branch/reuse": _branching("random", "reuse"),
    "egb/reuse": _branching("entropy", "reuse"),
}


@dataclass
class Outcome:
    success: float
    samples: float
    trajectories: float


def evaluate(name: str, tasks: dict[int, list[ToolTask]], beta, *, factor: float | None, tries: int | None):
    """Per seed, the success rate and mean samples and trajectories per task; returns (mean, sd of success)."""
    per_seed = []
    for seed, seed_tasks in tasks.items():
        results = []
        for task in seed_tasks:
            cap = None if factor is None else int(factor * len(task.steps) * VOTES)
            chooser = SimulatedChooser(
                task, seed=seed, sampling_seed=list(STRATEGIES).index(name) + 1, beta=beta, cap=cap
            )
            result = STRATEGIES[name](task, chooser, cap, tries if tries is not None else cap, seed)
            results.append(Outcome(task.verify(result.answer.final), chooser.meter.samples, len(result.trajectories)))
        per_seed.append(
            Outcome(*(statistics.fmean(getattr(r, f) for r in results) for f in ("success", "samples", "trajectories")))
        )
    mean = Outcome(*(statistics.fmean(getattr(o, f) for o in per_seed) for f in ("success", "samples", "trajectories")))
    sd = statistics.stdev(o.success for o in per_seed) if len(per_seed) > 1 else 0.0
    return mean, sd


def entropy_diagnostics(tasks: list[ToolTask], seed: int, beta) -> tuple[float, float]:
    """Over phase-1 runs: the majority's step error rate, and how often the highest-entropy step of a failed run
    is a wrong step (ties count fractionally)."""
    errors = steps = 0
    top_hits: list[float] = []
    for task in tasks:
        chooser = SimulatedChooser(task, seed=seed, sampling_seed=0, beta=beta, cap=None)
        records = run_egb(task, chooser, samples=VOTES, branch_budget=0).answer.steps
        wrong = [r.tool not in task.steps[r.index].accepted for r in records]
        errors += sum(wrong)
        steps += len(records)
        if any(wrong):
            top = max(r.vote.entropy for r in records)
            tied = [w for r, w in zip(records, wrong, strict=False) if r.vote.entropy == top]
            top_hits.append(sum(tied) / len(tied))
    return errors / steps, statistics.fmean(top_hits) if top_hits else float("nan")


def print_table(title: str, columns: list[str], rows: dict[str, list[tuple[Outcome, float]]]) -> None:
    print(title)
    header = f"{'strategy':<20}" + "".join(f"| {c:<30}" for c in columns)
    print(header)
    print("-" * len(header))
    for name, cells in rows.items():
        print(
            f"{name:<20}"
            + "".join(
                f"| {o.success:.3f} ({sd:.3f}) {o.samples:6.1f} {o.trajectories:5.1f}".ljust(32) for o, sd in cells
            )
        )
    print("cells: success rate (sd across seeds), samples per task, trajectories verified per task\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=60, help="tasks per seed")
    parser.add_argument(
        "--factors", type=float, nargs="+", default=[1.5, 2.0, 3.0], help="sample budgets C = factor * n * m"
    )
    parser.add_argument(
        "--tries", type=int, nargs="+", default=[1, 3, 10], help="branch / re-run budgets for the equal-tries table"
    )
    parser.add_argument("--beta", type=float, nargs=2, default=[0.6, 3.0], help="difficulty ~ Beta(a, b)")
    args = parser.parse_args()
    beta = tuple(args.beta)
    started = time.perf_counter()
    tasks = {seed: ToolWorld(seed=seed).generate_tasks(args.tasks, seed=seed) for seed in range(args.seeds)}
    some = tasks[0][0]
    n_steps = statistics.fmean(len(t.steps) for ts in tasks.values() for t in ts)
    print(
        f"ToolWorld: {args.seeds} seeds x {args.tasks} tasks, {n_steps:.1f} steps on average, "
        f"{len(some.world.library)} tools, {some.candidates_k} candidates per step; m = {VOTES} votes per step; "
        f"step difficulty ~ Beta{beta}"
    )
    step_error, top_hit = zip(*(entropy_diagnostics(tasks[s], s, beta) for s in range(args.seeds)), strict=False)
    print(
        f"phase-1 majority: step error rate {statistics.fmean(step_error):.3f}; in failed runs the "
        f"highest-entropy step is a wrong one {statistics.fmean(top_hit):.1%} of the time\n"
    )
    print_table(
        "Equal sample budget: each strategy may spend C = factor x n x m samples per task",
        [f"C = {f:g} n m" for f in args.factors],
        {name: [evaluate(name, tasks, beta, factor=f, tries=None) for f in args.factors] for name in STRATEGIES},
    )
    print_table(
        "Equal tries: at most b branches (EGB, random-branch) or b re-runs (resample), no sample cap",
        [f"b = {b}" for b in args.tries],
        {
            name: [evaluate(name, tasks, beta, factor=None, tries=b) for b in args.tries]
            for name in STRATEGIES
            if name not in ("majority-m", "majority-wide")
        },
    )
    print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
