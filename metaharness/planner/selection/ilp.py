"""The selection MILP in SCIP (through pyscipopt), warm-started from greedy; reports its gap at a time limit."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from metaharness.planner.result import PlanResult
from metaharness.planner.scip import Job, optimize, run_until, watch
from metaharness.planner.selection.baselines import baseline_selection
from metaharness.planner.selection.problem import SelectionProblem, selection_result

if TYPE_CHECKING:  # pyscipopt is imported on first use
    from pyscipopt import Model
    from pyscipopt.scip import Solution, Variable

SCIP_INFINITY = 1e20  # SCIP's default infinity, which getGap gives without a dual bound


def ilp_selection(
    problem: SelectionProblem, *, time_limit: float | None = None, started: float | None = None
) -> PlanResult:
    """The MILP: binaries implement y_i, use x_ik (revision k into i), evaluate z_i; sum_k x_ik = y_i, x_ik <= y_src,
    z_i <= y_i, the budget rows, sum z >= 1; per scenario s weights w_si <= z_i with sum_i w_si <= 1 pick the best
    evaluated candidate, created only where a sample beats the incumbent. Warm-started from greedy.

    ``time_limit`` counts wall-clock seconds from ``started`` (a ``time.perf_counter()`` value; default now) and holds
    whatever SCIP is doing (``metaharness.planner.scip``): the call then returns SCIP's best selection so far, or
    greedy's, as "feasible" with its ``gap`` (SCIP's, or against the bound of evaluating every candidate when SCIP
    had none yet)."""
    started = time.perf_counter() if started is None else started
    deadline = math.inf if time_limit is None else started + time_limit
    if not any(problem.evaluable):
        return PlanResult("infeasible", "ilp", note="No candidate fits the budget.")
    greedy = baseline_selection(problem, "greedy")  # the warm start, and the answer if SCIP has none in time
    start = (problem.indices(greedy.evaluate), problem.via_of(greedy.path)) if greedy.has_plan else None
    if time.perf_counter() > deadline:
        job, finished = None, False
    else:
        job, finished = run_until(deadline, time.perf_counter, lambda job: _work(problem, start, job))
    record = {} if job is None else job.snapshot()
    if record.get("infeasible"):
        return PlanResult("infeasible", "ilp")
    found = record.get("incumbent") or start
    if found is None:
        return PlanResult("unknown", "ilp", note="The time limit passed before a selection.")
    chosen, via = found
    if finished and record.get("status") == "optimal" and record.get("incumbent"):
        return selection_result(problem, "optimal", "ilp", chosen, via)
    gap = record.get("gap")
    if gap is None or gap >= SCIP_INFINITY:  # SCIP had no dual bound yet
        gap = _gap(problem.objective(chosen), _bound(problem))
    result = selection_result(problem, "feasible", "ilp", chosen, via, gap=gap)
    if not finished:
        result.note = "The time limit passed before SCIP proved the selection optimal."
    return result


def _work(problem: SelectionProblem, start: tuple[list[int], dict[int, int]] | None, job: Job) -> None:
    """Build and solve the MILP; SCIP's incumbents, its gap and its final status go to the job's record."""
    from pyscipopt import Model, quicksum

    n = problem.size
    model = Model("program-selection")
    job.own(model)
    model.hideOutput()
    model.setParam("limits/gap", 0.0)
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
    weights: list[dict[int, Variable]] = []
    objective = []
    for s in range(count):
        if job.late():
            return
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
    if start is not None:
        _warm_start(model, problem, start, y, x, z, weights)

    def selection_of(solution: Solution | None) -> tuple[list[int], dict[int, int]]:
        chosen = [i for i, var in z.items() if model.getSolVal(solution, var) > 0.5]
        return chosen, {i: k for (i, k), var in x.items() if model.getSolVal(solution, var) > 0.5}

    watch(model, job, lambda _, solution: job.record(incumbent=selection_of(solution)), progress=_record_gap(job))
    if job.late():
        return
    status = optimize(model, job)
    if model.getNSols() == 0:
        job.record(status=status, infeasible=status == "infeasible")
        return
    job.record(incumbent=selection_of(model.getBestSol()), gap=float(model.getGap()), status=status)


def _record_gap(job: Job) -> Callable[[Model], None]:
    def progress(model: Model) -> None:
        with contextlib.suppress(Exception):  # no gap before SCIP has solved a relaxation
            job.record(gap=float(model.getGap()))

    return progress


def _bound(problem: SelectionProblem) -> float:
    """An upper bound on the objective: every evaluable candidate evaluated at once, whatever the budget."""
    everyone = [i for i in range(problem.size) if problem.evaluable[i]]
    return problem.objective(everyone)


def _gap(value: float, bound: float) -> float:
    """SCIP's relative gap: |bound - value| / min(|bound|, |value|)."""
    low = min(abs(bound), abs(value))
    return math.inf if low == 0 else abs(bound - value) / low


def _warm_start(
    model: Model,
    problem: SelectionProblem,
    start: tuple[list[int], dict[int, int]],
    y: Mapping[int, Variable],
    x: Mapping[tuple[int, int], Variable],
    z: Mapping[int, Variable],
    weights: Sequence[Mapping[int, Variable]],
) -> None:
    """Hand SCIP the greedy plan (chosen candidates, the revision into each) as its first solution."""
    chosen, via = set(start[0]), start[1]
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
