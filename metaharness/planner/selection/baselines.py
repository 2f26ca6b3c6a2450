"""The selection baselines: ``greedy`` (best predicted first while it fits), ``random`` (a seeded order) and
``best_of_n`` (children of evaluated programs in insertion order), all status "feasible"."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from metaharness.errors import InputError
from metaharness.planner.result import PlanResult
from metaharness.planner.selection.problem import SelectionProblem, selection_result


def baseline_selection(problem: SelectionProblem, solver: str, *, seed: int = 0) -> PlanResult:
    """``greedy`` / ``random`` / ``best_of_n``: take candidates in that order while each one's missing revision
    chain plus its evaluation fits the budget (status "feasible")."""
    everyone = list(range(problem.size))
    via: dict[int, int] = {}
    if solver == "greedy":
        order = sorted(everyone, key=lambda i: (-problem.score[i], i))
    elif solver == "random":
        order = list(everyone)
        random.Random(seed).shuffle(order)
    elif solver == "best_of_n":
        # One revision of an evaluated program, in the order they were written.
        position = {id: k for k, id in enumerate(n.id for n in problem.graph.nodes)}
        order = []
        for i in everyone:
            direct = [k for k, r in enumerate(problem.ins[i]) if r[1] < 0]
            if problem.implemented[i] or direct:
                order.append(i)
                if direct:
                    via[i] = direct[0]
        order.sort(key=lambda i: position[problem.ids[i]])
    else:
        raise InputError(f"Unknown selection baseline {solver!r}.")
    return _fill(problem, order, via, solver)


def _fill(problem: SelectionProblem, order: Sequence[int], prefer: Mapping[int, int], solver: str) -> PlanResult:
    spent = [0.0] * len(problem.budget)
    built: dict[int, int] = {}
    chosen: list[int] = []
    for i in order:
        if not problem.evaluable[i]:
            continue
        new: dict[int, int] = {}
        node = i
        while node >= 0 and not problem.implemented[node] and node not in built:
            new[node] = prefer.get(node, 0)  # the first usable revision, as program.chain takes
            node = problem.ins[node][new[node]][1]
        extra = problem.plan_cost([i], new)
        total = [s + e for s, e in zip(spent, extra, strict=True)]
        if problem.fits(total):
            chosen.append(i)
            built.update(new)
            spent = total
    return selection_result(problem, "feasible", solver, chosen, built)
