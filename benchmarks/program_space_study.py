"""When does planning over program space pay? A simulated study of candidate selection at equal evaluation budget.

The landscape: a harness is a set of revisions (operators) applied to a seed. Each of ``L`` operators has a hidden
effect on the true score (most help a little, some hurt), pairs of operators interact, and the true score of every
one of the ``2**L`` programs is known to the study, so the true optimum is exact.

Each iteration, as in the optimisation loop: ``M`` revision plans of up to two steps are sampled from the frontier
(the best measured candidates); the nodes they reach form the program graph (plans that reach the same set of
operators merge, as TPS's merging stage does); a predicted score for each node is its parent's measured score plus
the true effect of each step plus a prediction error of standard deviation ``noise`` per step (so a two-step guess
is noisier than a one-step one). Then a strategy chooses ``K`` candidates to evaluate; their true scores become
measured and the next iteration starts from the new frontier.

Strategies, all with the same ``K`` evaluations per iteration:
- ``tps``: the expected-best-score ILP (:func:`metaharness.proposers.program_ilp.select`) told the per-step noise;
- ``greedy``: the top-K predicted;
- ``best_of_n``: K one-step revisions of the frontier, evaluated as sampled (no prediction used);
- ``random``: K random nodes of the graph.

Printed: mean of best-found / true optimum (and of the improvement over the seed as a share of the possible
improvement) per strategy and noise level. Run: ``python benchmarks/program_space_study.py --seeds 60``.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time

from metaharness.proposers.program_ilp import ProgramGraph
from metaharness.proposers.selection import choose

STRATEGIES = {"tps": "ilp", "greedy": "greedy", "best_of_n": "best_of_n", "random": "random"}


class Landscape:
    """Hidden true scores of every program (a frozenset of operator indices)."""

    def __init__(self, rng: random.Random, n_ops: int = 10, base: float = 0.3) -> None:
        self.n_ops = n_ops
        self.base = base
        self.effect = [rng.gauss(0.0, 0.06) for _ in range(n_ops)]
        self.interaction = {
            pair: rng.gauss(0.0, 0.03) for pair in itertools.combinations(range(n_ops), 2) if rng.random() < 0.3
        }
        # Evaluation cost of a program, in units of the seed's: revisions that help tend to add context.
        self.cost_delta = [max(0.0, rng.gauss(0.2, 0.3)) + 4.0 * max(0.0, e) for e in self.effect]
        self.cache: dict[frozenset[int], float] = {}

    def cost(self, program: frozenset[int]) -> float:
        return 1.0 + sum(self.cost_delta[i] for i in program)

    def score(self, program: frozenset[int]) -> float:
        if program not in self.cache:
            value = self.base + sum(self.effect[i] for i in program)
            value += sum(w for (i, j), w in self.interaction.items() if i in program and j in program)
            self.cache[program] = min(1.0, max(0.0, value))
        return self.cache[program]

    def optimum(self) -> float:
        return max(
            self.score(frozenset(c))
            for r in range(self.n_ops + 1)
            for c in itertools.combinations(range(self.n_ops), r)
        )


def _name(program: frozenset[int]) -> str:
    return "p" + "-".join(map(str, sorted(program))) if program else "seed"


def effect_spread(measured: dict[frozenset[int], float]) -> float:
    """The spread of one revision's effect, estimated from measured (parent, child) pairs, with a weak prior."""
    squares = [
        (score - measured[program - {op}]) ** 2
        for program, score in measured.items()
        for op in program
        if program - {op} in measured
    ]
    return ((sum(squares) + 2 * 0.05**2) / (len(squares) + 2)) ** 0.5


def run_search(
    strategy: str,
    land: Landscape,
    noise: float,
    seed: int,
    *,
    iters: int,
    k: int,
    plans: int,
    depth: int,
    token_cap: float | None = None,
    posterior: bool = False,
) -> float:
    """One search; with ``posterior`` every strategy sees Bayesian beliefs (the predicted gain shrunk by the
    measured spread of revision effects against the prediction noise) instead of the raw predictions."""
    rng = random.Random(seed)
    measured: dict[frozenset[int], float] = {frozenset(): land.score(frozenset())}
    for it in range(iters):
        graph = ProgramGraph()
        for program, score in measured.items():
            graph.add_existing(_name(program), score)
        frontier = sorted(measured, key=lambda p: -measured[p])[:2]
        tau = effect_spread(measured)
        predicted: dict[frozenset[int], float] = {}
        for _ in range(plans):
            program = rng.choice(frontier)
            guess = base = measured[program]
            unused = [i for i in range(land.n_ops) if i not in program]
            for step in range(min(depth, len(unused))):
                op = unused.pop(rng.randrange(len(unused)))
                child = program | {op}
                if child in measured:
                    break
                true_step = land.score(child) - land.score(program)
                guess = predicted.get(child, guess + true_step + rng.gauss(0.0, noise))
                predicted[child] = guess
                mean, std = guess, noise * (step + 1) ** 0.5
                if posterior:
                    prior = tau**2 * (step + 1)
                    weight = prior / (prior + std**2) if prior + std**2 > 0 else 1.0
                    mean, std = base + weight * (guess - base), (weight**0.5) * std
                graph.add_predicted(
                    _name(child),
                    _name(program),
                    mean,
                    std=std,
                    summary=f"op {op}",
                    eval_cost={"tokens": land.cost(child)},
                )
                program = child
        if not predicted:
            break
        budget = {"evals": k} if token_cap is None else {"evals": k, "tokens": token_cap * k}
        result = choose(STRATEGIES[strategy], graph.graph, budget, seed=seed * 1000 + it, correlation=0.7)
        by_name = {_name(p): p for p in predicted}
        for node in result.evaluate:
            measured[by_name[node]] = land.score(by_name[node])
    return max(measured.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=60)
    parser.add_argument("--iters", type=int, default=6)
    parser.add_argument("--k", type=int, default=3, help="evaluations per iteration")
    parser.add_argument("--plans", type=int, default=6, help="revision plans sampled per iteration (M)")
    parser.add_argument("--depth", type=int, default=2, help="revisions per plan")
    parser.add_argument("--noise", type=float, nargs="+", default=[0.0, 0.02, 0.05, 0.1, 0.2])
    parser.add_argument(
        "--token-cap",
        type=float,
        nargs="+",
        default=[0.0, 1.5],
        help="evaluation-token cap per iteration, in seed evaluations per allowed evaluation (0 = evaluations only)",
    )
    parser.add_argument(
        "--beliefs",
        choices=["raw", "posterior"],
        nargs="+",
        default=["raw", "posterior"],
        help="what strategies see: the raw predictions, or Bayesian posteriors (gains shrunk by the measured spread "
        "of revision effects against the prediction noise)",
    )
    args = parser.parse_args()

    started = time.perf_counter()
    print(
        f"program-space study: {args.seeds} seeds x {args.iters} iterations, K={args.k} evaluations/iteration, "
        f"M={args.plans} plans of depth {args.depth}, 10 operators (1024 programs)"
    )
    print("cells: mean best-found / true optimum  (mean share of the possible improvement over the seed)")
    for beliefs, cap in itertools.product(args.beliefs, args.token_cap):
        token_cap = cap or None
        what = "evaluations only" if token_cap is None else f"and a token cap of {cap} seed evaluations per slot"
        print(f"\nbeliefs: {beliefs}; budget: K={args.k} {what}")
        header = f"{'noise':>6} | " + " | ".join(f"{s:>20}" for s in STRATEGIES)
        print(header)
        print("-" * len(header))
        for noise in args.noise:
            ratio: dict[str, list[float]] = {s: [] for s in STRATEGIES}
            gain: dict[str, list[float]] = {s: [] for s in STRATEGIES}
            for seed in range(args.seeds):
                land = Landscape(random.Random(seed))
                best = land.optimum()
                base = land.score(frozenset())
                for strategy in STRATEGIES:
                    found = run_search(
                        strategy,
                        land,
                        noise,
                        seed,
                        iters=args.iters,
                        k=args.k,
                        plans=args.plans,
                        depth=args.depth,
                        token_cap=token_cap,
                        posterior=beliefs == "posterior",
                    )
                    ratio[strategy].append(found / best)
                    gain[strategy].append((found - base) / (best - base) if best > base else 1.0)
            cells = [f"{statistics.mean(ratio[s]):.3f} ({statistics.mean(gain[s]):.2f})" for s in STRATEGIES]
            print(f"{noise:>6.2f} | " + " | ".join(f"{c:>20}" for c in cells))
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
