"""When does planning over program space pay? A simulated study of the TPS loop's selection step.

The hidden landscape: a harness is a seed plus a set of revisions (operators). Each of ``OPS`` operators has a hidden
effect on the true validation score and some pairs interact. Two operators add context (few-shot examples,
retrieved examples): they tend to help more and multiply the cost of an evaluation (x3.5 and x4, so evaluating a
program with both costs 14x the seed's, as context size differs 15x between this project's seeds); the others
cost 0-15% more each (the dearest program, all ten, about 25x).

The loop, 12 iterations, as in ``metaharness optimize`` with a per-iteration budget (``evals`` 3, task-model
``tokens`` T seed evaluations, dollars unbounded):
- the proposer writes ``M`` revisions, each of a node of the lasting program graph: an evaluated candidate or a
  predicted one up to depth 3 from its evaluated ancestor (parents drawn with weight 1/rank by believed score), with
  an operator drawn at random; a revision reaching a program already in the graph merges into it (one more in-edge);
- the prediction of a revision's effect is the true effect plus an error of sd ``noise`` drawn once per revision,
  so a node's predicted score is its evaluated ancestor's measured score plus the predicted effects along its chain
  (re-predicted when an ancestor is evaluated) and errors grow with depth (sd noise * sqrt(depth));
- the std given to the selection is the calibrated one: sqrt(depth) times the noise estimated from the prediction
  errors seen so far (prior 0.05 over 2 pseudo-observations);
- a strategy chooses which nodes to evaluate within the budget; their true scores become measured, every other
  predicted node stays in the graph for later iterations.

Strategies: ``solver`` (``metaharness.planner.selection.select``, solver "auto": expected best score after the
iteration), ``greedy`` (best predicted first while it fits), ``best_of_n`` (children of evaluated nodes in
insertion order while they fit), ``random``, ``base`` (no prediction and no lasting graph: the proposer writes
``M`` revisions of evaluated candidates and the first ones that fit the budget are evaluated, as written), and
``oracle``: greedy told the true scores, the best any choice within one iteration can do with these proposals.
``--extra`` adds two prototype objectives that value an evaluation for later iterations (``explore``: the solver
with every std widened by ``1 + EXPLORE * iterations left / iterations``; ``subtree``: evaluating a node is also
credited with ``SUBTREE`` times its best predicted descendant's excess over it in each scenario), Bayesian beliefs
(``solver/posterior``, ``greedy/posterior``: a chain's predicted gain shrunk toward the prior of revision effects
measured so far) and an ablation (``solver/forget``, ``greedy/forget``: unchosen predictions are dropped every
iteration).

Printed per setting: final best true score (mean and sd over the seeds) per strategy, the ``optimum`` (the best
program whose evaluation fits the token budget: no strategy can beat it), and paired differences with their
standard errors. Run: ``python benchmarks/program_space_study.py --extra`` (8.5 CPU-minutes: 504 s on 2 shared cores;
results and findings in ``reports/program-space-study/README.md``).
"""

from __future__ import annotations

import argparse
import itertools
import math
import multiprocessing
import random
import statistics
import time
from dataclasses import dataclass

import networkx as nx
import numpy as np

from metaharness.planner.graph import PlanGraph
from metaharness.planner.program import EVALUATED, PREDICTED, add_evaluated, add_predicted, chain, mark, program_graph
from metaharness.planner.result import PlanResult
from metaharness.planner.selection import select
from metaharness.planner.selection.ilp import ilp_selection
from metaharness.planner.selection.problem import selection_problem


@dataclass(frozen=True)
class Strategy:
    """How one strategy selects: the selection solver, what it is told, and what the loop keeps."""

    solver: str  # a selection solver of metaharness.planner.selection
    # "prediction" | "truth" (an oracle) | "explore" (std widened early in the run) | "posterior" (gains shrunk)
    told: str = "prediction"
    objective: str = "expected-best"  # "expected-best" (select's) | "subtree" (credit for a node's descendants)
    lasting: bool = True  # unchosen predictions stay in the graph
    deep: bool = True  # the proposer revises predicted nodes too (to MAX_DEPTH)


STRATEGIES = {
    "solver": Strategy("auto"),
    "greedy": Strategy("greedy"),
    "best_of_n": Strategy("best_of_n"),
    "random": Strategy("random"),
    "base": Strategy("best_of_n", lasting=False, deep=False),
    "oracle": Strategy("greedy", told="truth"),
}
# Prototypes of other objectives and the ablation that explains the finding (--extra).
EXTRA = {
    "explore": Strategy("auto", told="explore"),
    "subtree": Strategy("ilp", objective="subtree"),
    "solver/posterior": Strategy("auto", told="posterior"),
    "greedy/posterior": Strategy("greedy", told="posterior"),
    "solver/forget": Strategy("auto", lasting=False),
    "greedy/forget": Strategy("greedy", lasting=False),
}
OPS = 10
CONTEXT_OPS = {0: 3.5, 1: 4.0}  # operator -> evaluation-cost factor (few-shot, retrieval)
MAX_DEPTH = 3
EVALS = 3
NOISE_PRIOR = 0.05
EXPLORE = 1.0  # "explore": std times 1 + EXPLORE * (iterations left after this one) / iterations
SUBTREE = 0.5  # "subtree": a node's sample gains SUBTREE * its best descendant's excess over it
CORRELATION = 0.7  # of prediction errors along a chain (depth d to d + 1: sqrt(d / (d + 1)))


@dataclass(frozen=True)
class Setting:
    """One row of the study: prediction noise per revision and the per-iteration task-token budget."""

    name: str
    noise: float
    tokens: float  # task-model tokens per iteration, in seed evaluations


SETTINGS = {
    s.name: s
    for s in (
        Setting("loose-0.03", 0.03, 15.0),
        Setting("loose-0.06", 0.06, 15.0),
        Setting("tight-0.03", 0.03, 6.0),
        Setting("tight-0.06", 0.06, 6.0),
    )
}


class Landscape:
    """Hidden true scores and evaluation costs of every program (a frozenset of operator indices)."""

    def __init__(self, rng: random.Random, base: float = 0.3) -> None:
        self.base = base
        self.effect = [rng.gauss(0.05, 0.04) if op in CONTEXT_OPS else rng.gauss(0.0, 0.04) for op in range(OPS)]
        self.interaction = {
            pair: rng.gauss(0.0, 0.03) for pair in itertools.combinations(range(OPS), 2) if rng.random() < 0.3
        }
        self.factor = [CONTEXT_OPS.get(op, 1.0 + rng.uniform(0.0, 0.15)) for op in range(OPS)]
        self._scores: dict[frozenset[int], float] = {}

    def score(self, program: frozenset[int]) -> float:
        if program not in self._scores:
            value = self.base + sum(self.effect[op] for op in program)
            value += sum(w for (i, j), w in self.interaction.items() if i in program and j in program)
            self._scores[program] = min(1.0, max(0.0, value))
        return self._scores[program]

    def cost(self, program: frozenset[int]) -> float:
        """Task-model tokens of one evaluation, in seed evaluations."""
        return math.prod(self.factor[op] for op in program)

    def optimum(self, tokens: float) -> float:
        """The best true score of a program whose evaluation fits a budget of ``tokens``: no strategy can beat it."""
        programs = (frozenset(c) for r in range(OPS + 1) for c in itertools.combinations(range(OPS), r))
        return max(self.score(p) for p in programs if self.cost(p) <= tokens)


def name(program: frozenset[int]) -> str:
    return "p" + "-".join(map(str, sorted(program))) if program else "seed"


class Search:
    """One run of one strategy on one landscape: the lasting program graph and the loop around the selection."""

    def __init__(
        self, land: Landscape, strategy: Strategy, setting: Setting, seed: int, proposals: int, iterations: int = 12
    ) -> None:
        self.land = land
        self.iterations = iterations
        self.remaining = iterations
        self.strategy = strategy
        self.setting = setting
        self.rng = random.Random(seed)
        self.seed = seed
        self.proposals = proposals
        self.graph: PlanGraph = program_graph("seed")
        add_evaluated(self.graph, "seed", land.score(frozenset()), cost={"tokens": 1.0})
        self.program: dict[str, frozenset[int]] = {"seed": frozenset()}
        self.error: dict[str, float] = {}  # revision (edge id) -> error of its predicted effect
        self.errors: list[float] = []  # squared prediction errors per unit of depth, seen at evaluation

    def predicted(self, node: str) -> float:
        """Measured score of the chain's evaluated root plus the predicted effect of every revision on the chain."""
        edges = chain(self.graph, node)
        value = self.graph.node(edges[0].source if edges else node).score or 0.0
        for e in edges:
            step = self.land.score(self.program[e.target]) - self.land.score(self.program[e.source])
            value += step + self.error[e.id]
        return value

    def noise_estimate(self) -> float:
        """Prediction noise per revision, calibrated on the errors seen so far (weak prior)."""
        return math.sqrt((sum(self.errors) + 2 * NOISE_PRIOR**2) / (len(self.errors) + 2))

    def effect_estimate(self) -> tuple[float, float]:
        """Mean and spread of one revision's true effect, from measured (parent, child) pairs (weak prior)."""
        measured = {self.program[n.id]: n.score or 0.0 for n in self.graph.nodes if n.status == EVALUATED}
        steps = [v - measured[p - {op}] for p, v in measured.items() for op in p if p - {op} in measured]
        mean = sum(steps) / (len(steps) + 2)
        return mean, math.sqrt((sum((x - mean) ** 2 for x in steps) + 2 * NOISE_PRIOR**2) / (len(steps) + 2))

    def believed(self, node: str) -> float:
        n = self.graph.node(node)
        return n.score if n.score is not None else 0.0

    def propose(self) -> None:
        """The proposer writes this iteration's revisions into the graph, each of a node it believes good."""
        deep = self.strategy.deep
        for _ in range(self.proposals):
            pool = [
                n.id
                for n in self.graph.nodes
                if (
                    n.status == EVALUATED
                    or (deep and n.status == PREDICTED and len(chain(self.graph, n.id)) < MAX_DEPTH)
                )
                and len(self.program[n.id]) < OPS
            ]
            pool.sort(key=lambda n: -self.believed(n))
            for _attempt in range(5):
                parent = self.rng.choices(pool, weights=[1 / (i + 1) for i in range(len(pool))])[0]
                program = self.program[parent] | {
                    self.rng.choice([o for o in range(OPS) if o not in self.program[parent]])
                }
                child = name(program)
                if child in self.graph.nx and (
                    self.graph.node(child).status != PREDICTED
                    or any(e.source == parent for e in self.graph.in_edges(child))
                ):
                    continue  # already evaluated, or the very same revision: the proposer tries again
                self.program[child] = program
                node = add_predicted(self.graph, child, parent, 0.0, cost={"tokens": self.land.cost(program)})
                self.error[f"{parent}->{child}"] = self.rng.gauss(0.0, self.setting.noise)
                self.graph.update_node(node.id, score=self.predicted(child))
                break

    def repredict(self) -> None:
        """Every predicted node's score and std as the selection sees them (after this iteration's evaluations)."""
        sigma = self.noise_estimate()
        for n in [n for n in self.graph.nodes if n.status == PREDICTED]:
            if self.strategy.told == "truth":
                score, std = self.land.score(self.program[n.id]), 0.0
            else:
                score, std = self.predicted(n.id), sigma * math.sqrt(len(chain(self.graph, n.id)))
                if self.strategy.told == "explore":
                    std *= 1.0 + EXPLORE * self.remaining / self.iterations
                elif self.strategy.told == "posterior":  # Bayes: the chain's gain against a prior of d revisions
                    edges = chain(self.graph, n.id)
                    root, d = self.graph.node(edges[0].source).score or 0.0, len(edges)
                    mean, tau = self.effect_estimate()
                    weight = tau**2 / (tau**2 + sigma**2)
                    score = root + d * mean + weight * (score - root - d * mean)
                    std *= math.sqrt(weight)
            self.graph.update_node(n.id, score=score, std=std)

    def step(self, iteration: int) -> None:
        self.remaining = self.iterations - 1 - iteration
        self.propose()
        self.repredict()
        budget = {"evals": EVALS, "tokens": self.setting.tokens, "usd": 1e9}
        seed = self.seed * 1000 + iteration
        if self.strategy.objective == "subtree" and self.remaining > 0:
            result = subtree_select(self.graph, budget, seed)
        else:
            result = select(
                self.graph,
                budget,
                solver=self.strategy.solver,  # type: ignore[arg-type]
                correlation=CORRELATION,
                seed=seed,
            )
        for n in result.evaluate:
            truth = self.land.score(self.program[n])
            self.errors.append((self.predicted(n) - truth) ** 2 / len(chain(self.graph, n)))
            mark(self.graph, n, EVALUATED, score=truth, cost={"tokens": self.land.cost(self.program[n])})
        if not self.strategy.lasting:  # what was not evaluated is gone
            for n in [n.id for n in self.graph.nodes if n.status == PREDICTED]:
                self.graph.remove_node(n)

    def best(self) -> float:
        return max(n.score or 0.0 for n in self.graph.nodes if n.status == EVALUATED)


def subtree_select(graph: PlanGraph, budget: dict[str, float], seed: int) -> PlanResult:
    """The "subtree" prototype: select's problem, where evaluating a node is also credited with part of its best
    predicted descendant's excess in each scenario (a later iteration can evaluate that descendant, now predicted
    from a measured base), solved exactly by the MILP."""
    problem = selection_problem(graph, budget, correlation=CORRELATION, seed=seed)
    index = {id: i for i, id in enumerate(problem.ids)}
    samples = problem.samples.copy()
    for i, id in enumerate(problem.ids):
        below = [index[d] for d in nx.descendants(graph.nx, id) if d in index]
        if below:
            samples[:, i] += SUBTREE * np.maximum(0.0, problem.samples[:, below].max(axis=1) - problem.samples[:, i])
    problem.samples = samples
    return ilp_selection(problem)


def run_seed(task: tuple[str, int, int, int, tuple[str, ...]]) -> dict[str, float]:
    """Final best true score of each named strategy on landscape ``seed`` under one setting."""
    setting_name, seed, iterations, proposals, names = task
    out = {"optimum": Landscape(random.Random(seed)).optimum(SETTINGS[setting_name].tokens)}
    for strategy in names:
        land = Landscape(random.Random(seed))
        search = Search(land, {**STRATEGIES, **EXTRA}[strategy], SETTINGS[setting_name], seed, proposals, iterations)
        for it in range(iterations):
            search.step(it)
        out[strategy] = search.best()
    return out


def study(
    settings: list[str],
    seeds: int,
    iterations: int = 12,
    proposals: int = 12,
    workers: int = 2,
    names: tuple[str, ...] = tuple(STRATEGIES),
) -> dict[str, dict[str, list[float]]]:
    """Final best per setting and strategy, one entry per seed (seed order), and the landscapes' "optimum" (the
    best program whose evaluation fits the token budget)."""
    tasks = [(s, seed, iterations, proposals, names) for s in settings for seed in range(seeds)]
    if workers > 1:
        with multiprocessing.Pool(workers) as pool:
            rows = pool.map(run_seed, tasks)
    else:
        rows = [run_seed(t) for t in tasks]
    out: dict[str, dict[str, list[float]]] = {s: {k: [] for k in ("optimum", *names)} for s in settings}
    for (s, *_), row in zip(tasks, rows, strict=True):
        for strategy, value in row.items():
            out[s][strategy].append(value)
    return out


def table(results: dict[str, dict[str, list[float]]], names: list[str], pairs: list[tuple[str, str]]) -> str:
    """Markdown table: mean (sd) final best per strategy in ``names``, then for each pair (a, b) the paired
    difference a - b over the seeds (standard error of its mean)."""
    lines = [
        "| setting | " + " | ".join(names) + " | " + " | ".join(f"{a} - {b}" for a, b in pairs) + " |",
        "|---" * (1 + len(names) + len(pairs)) + "|",
    ]
    for s, by in results.items():
        cells = [f"{statistics.mean(by[k]):.3f} ({statistics.stdev(by[k]):.3f})" for k in names]
        for a, b in pairs:
            diff = [x - y for x, y in zip(by[a], by[b], strict=True)]
            cells.append(f"{statistics.mean(diff):+.4f} ({statistics.stdev(diff) / math.sqrt(len(diff)):.4f})")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


MAIN_PAIRS = [("solver", b) for b in STRATEGIES if b != "solver"] + [("optimum", "solver")]
EXTRA_PAIRS = [
    ("explore", "greedy"),
    ("subtree", "greedy"),
    ("solver/posterior", "greedy/posterior"),
    ("solver/posterior", "greedy"),
    ("solver/forget", "greedy/forget"),
    ("greedy", "greedy/forget"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=60)
    parser.add_argument("--iters", type=int, default=12)
    parser.add_argument("--proposals", type=int, default=12, help="revisions the proposer writes per iteration (M)")
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--extra", action="store_true", help="also the prototype objectives and the ablation")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    started = time.perf_counter()
    names = tuple(STRATEGIES) + (tuple(EXTRA) if args.extra else ())
    results = study(args.settings, args.seeds, args.iters, args.proposals, args.workers, names)
    print(
        f"program-space study: {args.seeds} seeds x {args.iters} iterations, {args.proposals} proposals per "
        f"iteration, budget per iteration evals={EVALS} and tokens=T seed evaluations; {OPS} operators"
    )
    for s in args.settings:
        print(f"  {s}: prediction noise {SETTINGS[s].noise} per revision, T = {SETTINGS[s].tokens}")
    print(
        "cells: final best true score, mean (sd) over the seeds; optimum: the best program whose evaluation fits T;"
        " a - b: paired mean difference (standard error)\n"
    )
    print(table(results, [*STRATEGIES, "optimum"], MAIN_PAIRS))
    if args.extra:
        print()
        print(table(results, ["greedy", *EXTRA], EXTRA_PAIRS))
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
