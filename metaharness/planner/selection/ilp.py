"""The selection MILP in SCIP (through pyscipopt), warm-started from greedy; reports its gap at a time limit."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from metaharness.planner.result import PlanResult
from metaharness.planner.selection.baselines import baseline_selection
from metaharness.planner.selection.problem import SelectionProblem, selection_result


def ilp_selection(problem: SelectionProblem, *, time_limit: float | None = None) -> PlanResult:
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
    start = baseline_selection(problem, "greedy")
    if start.has_plan:
        _warm_start(model, problem, start, y, x, z, weights)
    model.optimize()
    status = model.getStatus()
    if model.getNSols() == 0:
        return PlanResult("infeasible" if status == "infeasible" else "unknown", "ilp")
    chosen = [i for i, var in z.items() if model.getVal(var) > 0.5]
    via = {i: k for (i, k), var in x.items() if model.getVal(var) > 0.5}
    if status == "optimal":
        return selection_result(problem, "optimal", "ilp", chosen, via)
    return selection_result(problem, "feasible", "ilp", chosen, via, gap=float(model.getGap()))


def _warm_start(
    model: Any,
    problem: SelectionProblem,
    start: PlanResult,
    y: Mapping[int, Any],
    x: Mapping[tuple[int, int], Any],
    z: Mapping[int, Any],
    weights: Sequence[Mapping[int, Any]],
) -> None:
    """Hand SCIP the greedy plan as its first solution."""
    chosen = set(problem.indices(start.evaluate))
    via = problem.via_of(start.path)
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
