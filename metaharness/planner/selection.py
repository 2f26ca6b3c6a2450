"""The selection solvers: which predicted programs to implement and evaluate so that every budget entry holds.

The problem (``docs/plan-graph.md``, "Program graphs and selection"), on a program graph
(:mod:`metaharness.planner.program`): choose a set E of predicted or implemented, non-dead-end nodes to evaluate.
Each predicted node on the way is implemented once, through one in-edge whose source is evaluated, implemented, or
implemented in this plan; a plan's cost is the sum of the evaluated nodes' ``cost`` and the used edges' ``cost``, and
it must stay within the budget in every entry. At least one node is evaluated. The objective is the expected best
score after the iteration, E[max(incumbent, max over v in E of true_v)], as a sample average over scenarios of the
true scores (``score + std * noise``, a child's noise ``correlation`` times its parent's plus fresh noise, so one
revision chain shares its errors; clipped to [0, 1]), plus :data:`FILL_BONUS` * (1 + score) per evaluation (use the
budget, on the better candidates). With every ``std`` 0 it is "evaluate the best predicted candidate".

Solvers: ``exact`` (branch and bound over the evaluated set and each candidate's ways to be implemented; proves
optimality of the sample-average objective; up to :data:`EXACT_CANDIDATE_LIMIT` candidates and
:data:`CHAIN_OPTION_LIMIT` ways per candidate), ``ilp`` (SCIP MILP), ``auto`` (exact while its search stays small,
else ilp) and the baselines ``greedy`` (best predicted first while it fits),
``random`` (seeded order) and ``best_of_n`` (children of evaluated programs in insertion order), all returning a
:class:`~metaharness.planner.result.PlanResult` whose ``evaluate`` lists the nodes to evaluate.

    >>> from metaharness.planner.program import add_evaluated, add_predicted, program_graph
    >>> g = program_graph("seed")
    >>> _ = add_evaluated(g, "seed", 0.30)
    >>> _ = add_predicted(g, "a", "seed", 0.40, summary="add label list")
    >>> _ = add_predicted(g, "b", "a", 0.55, summary="vote over neighbours")
    >>> r = select(g, {"evals": 1})
    >>> r.status, r.evaluate, r.nodes, r.path, round(r.value, 2)
    ('optimal', ['b'], ['a', 'b'], ['seed->a', 'a->b'], 0.55)
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import networkx as nx
import numpy as np

from metaharness.errors import InputError
from metaharness.planner.graph import BUDGET_TOLERANCE, NodeId, PlanGraph, limit_names
from metaharness.planner.program import EVALUATED, IMPLEMENTED, PREDICTED
from metaharness.planner.result import PlanResult, Status

SelectionSolver = Literal["auto", "exact", "ilp", "greedy", "random", "best_of_n"]
SELECTION_SOLVERS: tuple[SelectionSolver, ...] = get_args(SelectionSolver)
FILL_BONUS = 1e-4  # per evaluated candidate, times (1 + predicted score)
# ``exact`` refuses graphs with more candidates (predicted + implemented nodes) than this; ``auto`` uses it up to
# this size and while its search stays under AUTO_EXPANSION_LIMIT branch-and-bound nodes, then hands over to SCIP.
EXACT_CANDIDATE_LIMIT = 2_000
AUTO_EXPANSION_LIMIT = 20_000
CHAIN_OPTION_LIMIT = 64  # ways to implement one candidate (merges multiply them); more: exact is not used
SCORE_BOUNDS = (0.0, 1.0)  # validation scores are means of 0/1 example scores


@dataclass
class Selection:
    """A validated selection problem in indexed form: candidates ``0..n-1`` in topological order.

    ``ins[i]`` lists the usable revisions into candidate i as ``(edge id, source candidate or -1 for an evaluated
    or implemented program, cost)`` (none for an implemented candidate); ``samples[s, i]`` is candidate i's true score
    in scenario s.
    """

    graph: PlanGraph
    budget: tuple[float, ...]
    ids: list[NodeId]
    implemented: list[bool]
    evaluable: list[bool]
    score: list[float]
    eval_cost: list[tuple[float, ...]]
    ins: list[list[tuple[NodeId, int, tuple[float, ...]]]]
    incumbent: float
    samples: np.ndarray
    fill: list[float] = field(init=False)

    def __post_init__(self) -> None:
        self.fill = [FILL_BONUS * (1.0 + s) for s in self.score]

    @property
    def size(self) -> int:
        return len(self.ids)

    def expected_best(self, chosen: Iterable[int]) -> float:
        """Sample-average expected best score when the candidates ``chosen`` are evaluated."""
        best = np.full(self.samples.shape[0], self.incumbent)
        for i in chosen:
            np.maximum(best, self.samples[:, i], out=best)
        return float(best.mean())

    def objective(self, chosen: Sequence[int]) -> float:
        """What the solvers maximise: :meth:`expected_best` plus the fill bonus."""
        return self.expected_best(chosen) + sum(self.fill[i] for i in chosen)

    def fits(self, total: Sequence[float]) -> bool:
        return all(c <= b + BUDGET_TOLERANCE * max(1.0, abs(b)) for c, b in zip(total, self.budget, strict=True))

    def plan_cost(self, chosen: Iterable[int], via: Mapping[int, int]) -> list[float]:
        """Evaluation costs of ``chosen`` plus the revisions ``via`` (candidate -> index into ``ins``) used."""
        total = [0.0] * len(self.budget)
        for i in chosen:
            total = [t + c for t, c in zip(total, self.eval_cost[i], strict=True)]
        for i, k in via.items():
            total = [t + c for t, c in zip(total, self.ins[i][k][2], strict=True)]
        return total


def prepare(
    graph: PlanGraph,
    budget: Sequence[float] | Mapping[str, float] | None = None,
    *,
    scenarios: int = 64,
    correlation: float = 0.5,
    seed: int = 0,
) -> Selection:
    """Validate ``graph`` and ``budget`` (default: the graph's; a mapping names limits, absent ones are unlimited)
    and sample the scenarios; raise :class:`InputError` naming the problem."""
    if graph.problem != "selection":
        raise InputError(
            f'select() chooses programs to evaluate in a program graph (problem "selection"); this graph\'s problem is '
            f'"{graph.problem}": use solve() for a walk.'
        )
    vector = _budget_vector(graph, budget)
    graph.validate([b if math.isfinite(b) else 0.0 for b in vector])  # lengths and node conditions
    if isinstance(scenarios, bool) or not isinstance(scenarios, int) or scenarios < 1:
        raise InputError(f"scenarios must be an integer >= 1; got {scenarios!r}.")
    if not 0.0 <= correlation <= 1.0:
        raise InputError(f"correlation must be between 0 and 1; got {correlation!r}.")
    predicted = list(nx.topological_sort(graph.nx.subgraph(n.id for n in graph.nodes if n.status == PREDICTED)))
    implemented = [n.id for n in graph.nodes if n.status == IMPLEMENTED]
    ids: list[NodeId] = []
    index: dict[NodeId, int] = {}
    ins: list[list[tuple[NodeId, int, tuple[float, ...]]]] = []
    for id in implemented + predicted:
        usable = []
        if graph.node(id).status == PREDICTED:
            for edge in graph.in_edges(id):
                source = graph.node(edge.source).status
                if source in (EVALUATED, IMPLEMENTED):
                    usable.append((edge.id, -1, edge.cost))
                elif edge.source in index:  # a reachable predicted node (earlier in topological order)
                    usable.append((edge.id, index[edge.source], edge.cost))
            if not usable:
                continue  # no way to implement it (its parents failed or cannot be reached)
        index[id] = len(ids)
        ids.append(id)
        ins.append(usable)
    nodes = [graph.node(i) for i in ids]
    zero = (0.0,) * len(vector)
    problem = Selection(
        graph,
        vector,
        ids,
        [n.status == IMPLEMENTED for n in nodes],
        [not (n.dead_end or n.reward < 0) for n in nodes],
        [float(n.score or 0.0) for n in nodes],
        [n.cost or zero for n in nodes],
        ins,
        max((n.score for n in graph.nodes if n.status == EVALUATED and n.score is not None), default=0.0),
        np.zeros((1, 0)),
    )
    problem.samples = _scenarios(problem, scenarios if any(n.std > 0 for n in nodes) else 1, correlation, seed)
    return problem


def select(
    graph: PlanGraph,
    budget: Sequence[float] | Mapping[str, float] | None = None,
    *,
    solver: SelectionSolver = "auto",
    scenarios: int = 64,
    correlation: float = 0.5,
    seed: int = 0,
    time_limit: float | None = None,
) -> PlanResult:
    """Choose what to implement and evaluate in program graph ``graph`` (module docstring) with ``solver``.

    ``budget``: one cap per budget entry, or a mapping from limit names to caps (absent limits unlimited); default
    the graph's own. ``seed`` seeds the scenarios (and the ``random`` baseline's order); ``time_limit`` (seconds)
    bounds the ILP, which then reports ``gap``. Status "infeasible" (``value`` None) when not one candidate fits.
    """
    if solver not in SELECTION_SOLVERS:
        raise InputError(f"Unknown selection solver {solver!r}; use one of {', '.join(SELECTION_SOLVERS)}.")
    started = time.perf_counter()
    problem = prepare(graph, budget, scenarios=scenarios, correlation=correlation, seed=seed)
    if solver == "exact":
        if problem.size > EXACT_CANDIDATE_LIMIT:
            raise InputError(
                f"The exact selection solver takes at most {EXACT_CANDIDATE_LIMIT} candidates; this graph has "
                f"{problem.size}: use solver 'ilp' or 'auto'."
            )
        try:
            result = solve_exact(problem)
        except _ExpansionLimit:
            raise InputError(
                f"A candidate has more than {CHAIN_OPTION_LIMIT} ways to be implemented (merged revisions multiply "
                f"them), too many for the exact selection solver: use solver 'ilp' or 'auto'."
            ) from None
    elif solver == "auto":
        result = _auto(problem, time_limit)
    elif solver == "ilp":
        result = solve_ilp(problem, time_limit=time_limit)
    else:
        result = baseline(problem, solver, seed=seed)
    result.seconds = time.perf_counter() - started
    return result


def _auto(problem: Selection, time_limit: float | None) -> PlanResult:
    if problem.size <= EXACT_CANDIDATE_LIMIT:
        with contextlib.suppress(_ExpansionLimit):
            return solve_exact(problem, max_expansions=AUTO_EXPANSION_LIMIT)
    return solve_ilp(problem, time_limit=time_limit)


# --- results ---------------------------------------------------------------------------------------------------
def _result(
    problem: Selection,
    status: Status,
    solver: str,
    chosen: Iterable[int],
    via: Mapping[int, int],
    gap: float | None = None,
) -> PlanResult:
    """The PlanResult of evaluating ``chosen``, implementing each predicted one through the revisions ``via``
    (candidate -> index into its ``ins``); revisions no evaluated node needs are dropped."""
    chosen = sorted(set(chosen), key=lambda i: (-problem.score[i], i))
    if not chosen:
        return PlanResult("infeasible", solver, note="No candidate fits the budget.")
    needed: dict[int, int] = {}
    for i in chosen:
        node = i
        while not problem.implemented[node] and node not in needed:
            needed[node] = via[node]
            node = problem.ins[node][via[node]][1]
            if node < 0:
                break
    touched = sorted(set(chosen) | set(needed))
    return PlanResult(
        status,
        solver,
        path=[problem.ins[i][needed[i]][0] for i in sorted(needed)],
        nodes=[problem.ids[i] for i in touched],
        value=problem.expected_best(chosen),
        cost=dict(zip(limit_names(problem.graph, len(problem.budget)), problem.plan_cost(chosen, needed), strict=True)),
        evaluate=[problem.ids[i] for i in chosen],
        gap=gap,
    )


# --- exact: branch and bound -----------------------------------------------------------------------------------
class _ExpansionLimit(Exception):
    """The exact search took more than ``max_expansions`` nodes (``auto`` then hands over to the ILP)."""


def solve_exact(problem: Selection, *, max_expansions: int | None = None) -> PlanResult:
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
    start = baseline(problem, "greedy")
    if start.has_plan:
        first = _indices(problem, start.evaluate)
        best = _Best(problem.objective(first), first, _via_of(problem, start.path))
    expansions = 0
    chosen: list[int] = []

    def search(allowed: np.ndarray, cur: np.ndarray, value: float, spent: np.ndarray, via: dict[int, int]) -> None:
        nonlocal expansions
        expansions += 1
        if max_expansions is not None and expansions > max_expansions:
            raise _ExpansionLimit
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
    return _result(problem, "optimal", "exact", best.chosen, best.via)


def _chain_options(problem: Selection) -> list[list[dict[int, int]]]:
    """Per candidate, every way to implement it: the revision (index into ``ins``) used by each predicted node on
    its chain from an evaluated or implemented program. Raises :class:`_ExpansionLimit` when a candidate has more
    than :data:`CHAIN_OPTION_LIMIT` chains."""
    options: list[list[dict[int, int]]] = []
    for i in range(problem.size):
        if problem.implemented[i]:
            options.append([{}])
            continue
        ways = []
        for k, (_, source, _) in enumerate(problem.ins[i]):
            ways += [{i: k}] if source < 0 else [{**way, i: k} for way in options[source]]
        if len(ways) > CHAIN_OPTION_LIMIT:
            raise _ExpansionLimit
        options.append(ways)
    return options


@dataclass
class _Best:
    objective: float
    chosen: list[int]
    via: dict[int, int]


def _indices(problem: Selection, ids: Iterable[NodeId]) -> list[int]:
    position = {id: i for i, id in enumerate(problem.ids)}
    return [position[v] for v in ids]


def _via_of(problem: Selection, path: Iterable[NodeId]) -> dict[int, int]:
    """Candidate -> index of its used revision, from a result's edge ids."""
    used = set(path)
    return {i: k for i, revisions in enumerate(problem.ins) for k, r in enumerate(revisions) if r[0] in used}


# --- ilp: SCIP ---------------------------------------------------------------------------------------------------
def solve_ilp(problem: Selection, *, time_limit: float | None = None) -> PlanResult:
    """The MILP: binaries implement y_i, use x_ik (revision k into i), evaluate z_i; sum_k x_ik = y_i, x_ik <= y_src,
    z_i <= y_i, the budget rows, sum z >= 1; per scenario s weights w_si <= z_i with sum_i w_si <= 1 pick the best
    evaluated candidate, created only where a sample beats the incumbent. Warm-started from greedy."""
    from pyscipopt import Model, quicksum

    n = problem.size
    if not any(problem.evaluable):
        return PlanResult("infeasible", "ilp", note="No candidate fits the budget.")
    model = Model("program-selection")
    model.hideOutput()
    model.setParam("limits/gap", 0.0)
    if time_limit is not None:
        model.setParam("limits/time", float(time_limit))
    y = {i: model.addVar(f"y_{i}", vtype="B") for i in range(n) if not problem.implemented[i]}
    x = {(i, k): model.addVar(f"x_{i}_{k}", vtype="B") for i in y for k in range(len(problem.ins[i]))}
    z = {i: model.addVar(f"z_{i}", vtype="B") for i in range(n) if problem.evaluable[i]}
    for i in y:
        model.addCons(quicksum(x[i, k] for k in range(len(problem.ins[i]))) == y[i])
        for k, (_, source, _) in enumerate(problem.ins[i]):
            if source >= 0 and source in y:
                model.addCons(x[i, k] <= y[source])
        if i in z:
            model.addCons(z[i] <= y[i])
    model.addCons(quicksum(z.values()) >= 1)
    for j, cap in enumerate(problem.budget):
        terms = [(problem.ins[i][k][2][j], var) for (i, k), var in x.items()]
        terms += [(problem.eval_cost[i][j], var) for i, var in z.items()]
        terms = [(c, v) for c, v in terms if c]
        if math.isfinite(cap) and terms and sum(c for c, _ in terms) > cap:
            model.addCons(quicksum(c * v for c, v in terms) <= cap)
    count = problem.samples.shape[0]
    weights: list[dict[int, Any]] = []
    objective = []
    for s in range(count):
        beats = {i: problem.samples[s, i] - problem.incumbent for i in z if problem.samples[s, i] > problem.incumbent}
        w = {i: model.addVar(f"w_{s}_{i}", lb=0.0, ub=1.0) for i in beats}
        if w:
            model.addCons(quicksum(w.values()) <= 1)
            for i, var in w.items():
                model.addCons(var <= z[i])
            objective.append(quicksum(beats[i] * var for i, var in w.items()))
        weights.append(w)
    fill = quicksum(problem.fill[i] * var for i, var in z.items())
    model.setObjective(problem.incumbent + quicksum(objective) * (1.0 / count) + fill, "maximize")
    start = baseline(problem, "greedy")
    if start.has_plan:
        _warm_start(model, problem, start, y, x, z, weights)
    model.optimize()
    status = model.getStatus()
    if model.getNSols() == 0:
        return PlanResult("infeasible" if status == "infeasible" else "unknown", "ilp")
    chosen = [i for i, var in z.items() if model.getVal(var) > 0.5]
    via = {i: k for (i, k), var in x.items() if model.getVal(var) > 0.5}
    if status == "optimal":
        return _result(problem, "optimal", "ilp", chosen, via)
    return _result(problem, "feasible", "ilp", chosen, via, gap=float(model.getGap()))


def _warm_start(
    model: Any,
    problem: Selection,
    start: PlanResult,
    y: Mapping[int, Any],
    x: Mapping[tuple[int, int], Any],
    z: Mapping[int, Any],
    weights: Sequence[Mapping[int, Any]],
) -> None:
    """Hand SCIP the greedy plan as its first solution."""
    chosen = set(_indices(problem, start.evaluate))
    via = _via_of(problem, start.path)
    sol = model.createSol()
    for i, var in y.items():
        model.setSolVal(sol, var, 1.0 if i in via else 0.0)
    for (i, k), var in x.items():
        model.setSolVal(sol, var, 1.0 if via.get(i) == k else 0.0)
    for i, var in z.items():
        model.setSolVal(sol, var, 1.0 if i in chosen else 0.0)
    for s, w in enumerate(weights):
        picked = [i for i in w if i in chosen]
        top = max(picked, key=lambda i: problem.samples[s, i], default=None)
        for i, var in w.items():
            model.setSolVal(sol, var, 1.0 if i == top else 0.0)
    model.addSol(sol, free=True)


# --- baselines ----------------------------------------------------------------------------------------------------
def baseline(problem: Selection, solver: str, *, seed: int = 0) -> PlanResult:
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


def _fill(problem: Selection, order: Sequence[int], prefer: Mapping[int, int], solver: str) -> PlanResult:
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
    return _result(problem, "feasible", solver, chosen, built)


# --- inputs ------------------------------------------------------------------------------------------------------
def _budget_vector(graph: PlanGraph, budget: Sequence[float] | Mapping[str, float] | None) -> tuple[float, ...]:
    if budget is None:
        if graph.budget is None:
            raise InputError("No budget given: pass budget= to select() or set the program graph's budget.")
        return graph.budget
    if isinstance(budget, Mapping):
        if graph.limits is None:
            raise InputError("A budget by name needs the graph's limits; give one number per budget entry instead.")
        unknown = [k for k in budget if k not in graph.limits]
        if unknown:
            raise InputError(f"Unknown budget entries {unknown}; the graph's limits are {', '.join(graph.limits)}.")
        vector = [budget.get(name, math.inf) for name in graph.limits]
    else:
        vector = list(budget)
    out = []
    for b in vector:
        if isinstance(b, bool) or not isinstance(b, (int, float)) or math.isnan(b) or b < 0:
            raise InputError(f"Every budget entry must be a non-negative number; got {b!r}.")
        out.append(float(b))
    return tuple(out)


def _scenarios(problem: Selection, count: int, correlation: float, seed: int) -> np.ndarray:
    """``samples[s, i]``: ``score + std * noise`` clipped to :data:`SCORE_BOUNDS`, where a candidate's noise is
    ``correlation`` times that of its first candidate parent plus fresh noise (chains share their errors)."""
    rng = random.Random(seed)
    rest = math.sqrt(max(0.0, 1.0 - correlation**2))
    parent = [next((source for _, source, _ in revisions if source >= 0), -1) for revisions in problem.ins]
    std = [problem.graph.node(i).std for i in problem.ids]
    noise = np.zeros((count, problem.size))
    for s in range(count):
        row = noise[s]
        for i in range(problem.size):
            p = parent[i]
            row[i] = correlation * row[p] + rest * rng.gauss(0.0, 1.0) if p >= 0 else rng.gauss(0.0, 1.0)
    low, high = SCORE_BOUNDS
    return np.clip(np.asarray(problem.score) + np.asarray(std) * noise, low, high)
