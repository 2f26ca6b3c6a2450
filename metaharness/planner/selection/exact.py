"""The exact selection solver: branch and bound over the evaluated set and each candidate's ways to be implemented;
proves optimality of the sample-average objective."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from metaharness.planner.graph import BUDGET_TOLERANCE
from metaharness.planner.result import PlanResult
from metaharness.planner.selection.baselines import baseline_selection
from metaharness.planner.selection.problem import SelectionProblem, selection_result

CHAIN_OPTION_LIMIT = 64  # ways to implement one candidate (merges multiply them); more: exact is not used


class SelectionLimitReached(Exception):
    """The exact search took more than ``max_expansions`` nodes (``auto`` then hands over to the ILP)."""


def exact_selection(problem: SelectionProblem, *, max_expansions: int | None = None) -> PlanResult:
    """Branch and bound over the evaluated set E. A node of the search holds E, the revisions implemented for it
    (one in-edge per implemented node) and the spent budget; its children add one more allowed candidate through
    each of its revision chains that agrees with the revisions already chosen and fits, most promising first, and
    each later sibling excludes the earlier ones, so every set is met once. The objective is submodular in E, so
    f(E) plus the k largest single-candidate gains bounds every extension (k: the most further evaluations any
    budget entry allows by evaluation costs alone), as does f(E) with every allowed candidate evaluated; branches
    whose bound does not beat the best plan are cut. A chain that is a detour is never needed: a plan that reaches a
    node twice is dominated by one that reuses the first route, which is also enumerated."""
    n = problem.size
    options = _chain_options(problem)
    samples = problem.samples.T  # [candidate, scenario]
    fill = np.asarray(problem.fill)
    eval_cost = np.asarray(problem.eval_cost, dtype=float).reshape(n, len(problem.budget))
    budget = np.asarray(problem.budget, dtype=float)
    limit = budget + np.asarray([BUDGET_TOLERANCE * max(1.0, abs(b)) for b in problem.budget])
    best = _Best(-math.inf, [], {})
    start = baseline_selection(problem, "greedy")
    if start.has_plan:
        first = problem.indices(start.evaluate)
        best = _Best(problem.objective(first), first, problem.via_of(start.path))
    expansions = 0
    chosen: list[int] = []

    def search(allowed: np.ndarray, cur: np.ndarray, value: float, spent: np.ndarray, via: dict[int, int]) -> None:
        nonlocal expansions
        expansions += 1
        if max_expansions is not None and expansions > max_expansions:
            raise SelectionLimitReached
        if chosen and value > best.objective + 1e-12:
            best.objective, best.chosen, best.via = value, list(chosen), dict(via)
        left = limit - spent
        allowed = allowed & np.all(eval_cost <= left, axis=1)
        order = np.flatnonzero(allowed)
        if not len(order):
            return
        gains = np.maximum(samples[order] - cur, 0.0).mean(axis=1) + fill[order]
        k = len(order)
        for j in range(len(budget)):
            if math.isfinite(left[j]):
                k = min(k, int(np.searchsorted(np.cumsum(np.sort(eval_cost[order, j])), left[j], side="right")))
        if k == 0:
            return
        rank = np.argsort(-gains, kind="stable")
        order, gains = order[rank], gains[rank]
        at_once = float(np.maximum(samples[order].max(axis=0) - cur, 0.0).mean()) + float(
            np.sort(fill[order])[-k:].sum()
        )
        if value + min(float(gains[:k].sum()), at_once) <= best.objective + 1e-12:
            return
        prefix = np.concatenate(([0.0], np.cumsum(gains)))
        allowed = allowed.copy()
        for r, i in enumerate(order.tolist()):
            if value + prefix[min(r + k, len(gains))] - prefix[r] <= best.objective + 1e-12:
                break  # siblings from here on are bounded by their k best gains, which only fall
            allowed[i] = False
            grown = np.maximum(cur, samples[i])
            for assign in options[i]:
                extra = [(node, e) for node, e in assign.items() if node not in via]
                if any(via.get(node, e) != e for node, e in assign.items()):
                    continue  # reaches a node through another revision than the plan's
                after = (
                    spent
                    + eval_cost[i]
                    + sum((problem.ins[node][e][2] for node, e in extra), start=np.zeros_like(spent))
                )
                if np.any(after > limit):
                    continue
                chosen.append(i)
                via.update(extra)
                search(allowed, grown, float(grown.mean()) + sum(problem.fill[c] for c in chosen), after, via)
                for node, _ in extra:
                    del via[node]
                chosen.pop()

    base = np.full(samples.shape[1], problem.incumbent)
    evaluable = np.asarray(problem.evaluable, dtype=bool) & np.asarray([bool(o) for o in options], dtype=bool)
    search(evaluable, base, float(base.mean()), np.zeros(len(budget)), {})
    return selection_result(problem, "optimal", "exact", best.chosen, best.via)


def _chain_options(problem: SelectionProblem) -> list[list[dict[int, int]]]:
    """Per candidate, every way to implement it: the revision (index into ``ins``) used by each predicted node on
    its chain from an evaluated or implemented program. Raises ``SelectionLimitReached`` when a candidate has more
    than ``CHAIN_OPTION_LIMIT`` chains."""
    options: list[list[dict[int, int]]] = []
    for i in range(problem.size):
        if problem.implemented[i]:
            options.append([{}])
            continue
        ways = []
        for k, (_, source, _) in enumerate(problem.ins[i]):
            ways += [{i: k}] if source < 0 else [{**way, i: k} for way in options[source]]
        if len(ways) > CHAIN_OPTION_LIMIT:
            raise SelectionLimitReached
        options.append(ways)
    return options


@dataclass
class _Best:
    objective: float
    chosen: list[int]
    via: dict[int, int]
