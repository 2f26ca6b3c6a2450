"""ILP solver: the time-expanded integer programme (TAPE's model) solved with SCIP through pyscipopt.

Binary ``x[e, t]`` says edge e is step t. One unit of flow leaves the start at step 1; at every non-goal node the
flow in at step t equals the flow out at step t + 1; goal nodes absorb it (a plan ends at its first goal), and no
flow may remain at a non-goal node after the last layer. Unlike TAPE's CP-SAT model the coefficients are the exact
real costs and rewards (no x1000 rounding) and the layers end where the budget does: a variable ``x[e, t]`` exists
only when the cheapest t-1 steps to e's source plus e plus the cheapest way on to a goal fit the budget in every
entry and a goal is reachable within the horizon, so no horizon is stretched past the budget.

Richer objectives live here too: :class:`~metaharness.planner.problem.SoftTargets` keep the hard budget and
subtract a weighted penalty for exceeding a preferred cost level.
"""

from __future__ import annotations

import time
from collections import defaultdict

from metaharness.errors import MetaharnessError
from metaharness.planner.bounds import reach
from metaharness.planner.problem import Problem
from metaharness.planner.result import PlanResult, Status

# SCIP's default feasibility tolerance (1e-6) would let a plan exceed the budget by that much.
FEASIBILITY_TOLERANCE = 1e-9


def time_expanded_layers(problem: Problem) -> list[list[int]]:
    """``layers[t]`` lists the edges that may be step t + 1 of a feasible plan (budget-, horizon-pruned)."""
    p = problem
    rch = reach(p)
    cheapest = {p.start: tuple(0.0 for _ in p.budget)}  # least cost per entry to stand at a node after t steps
    layers: list[list[int]] = []
    for t in range(p.horizon):
        layer: list[int] = []
        reached: dict[int, tuple[float, ...]] = {}
        for v, base in cheapest.items():
            for e in p.out[v]:
                w = p.dst[e]
                if t + 1 + rch.steps[w] > p.horizon:
                    continue
                total = tuple(a + b for a, b in zip(base, p.cost[e], strict=False))
                need = rch.cost[rch.row(p.horizon - t - 1), w]
                if any(x + y > s for x, y, s in zip(total, need, p.slack, strict=False)):
                    continue
                layer.append(e)
                if not p.goal[w]:
                    old = reached.get(w)
                    reached[w] = total if old is None else tuple(map(min, old, total))
        if not layer:
            break
        layers.append(layer)
        cheapest = reached
    return layers


def solve_ilp(problem: Problem, *, time_limit: float | None = None) -> PlanResult:
    """Solve with SCIP; "optimal"/"infeasible" are proofs, a time limit may leave "feasible" or "unknown"."""
    from pyscipopt import Model, quicksum

    started = time.perf_counter()
    p = problem
    layers = time_expanded_layers(p)
    if not layers:
        return PlanResult("infeasible", "ilp", time.perf_counter() - started)

    model = Model("plan")
    model.hideOutput()
    model.setParam("numerics/feastol", FEASIBILITY_TOLERANCE)
    model.setParam("limits/gap", 0.0)
    if time_limit is not None:
        model.setParam("limits/time", float(time_limit))

    x = {}
    inflow: dict[tuple[int, int], list] = defaultdict(list)  # (node, t) -> vars of edges arriving at step t
    outflow: dict[tuple[int, int], list] = defaultdict(list)  # (node, t) -> vars of edges leaving as step t + 1
    for t, layer in enumerate(layers):
        weight = p.discount**t
        for e in layer:
            var = model.addVar(vtype="B", name=f"x_{e}_{t + 1}", obj=weight * p.reward[p.dst[e]])
            x[e, t] = var
            outflow[p.src[e], t].append(var)
            if not p.goal[p.dst[e]]:
                inflow[p.dst[e], t + 1].append(var)

    model.addCons(quicksum(outflow[p.start, 0]) == 1, name="leave_start")
    for v, t in set(inflow) | {key for key in outflow if key[1] > 0}:
        model.addCons(quicksum(inflow.get((v, t), [])) == quicksum(outflow.get((v, t), [])), name=f"flow_{v}_{t}")

    for j, limit in enumerate(p.budget):
        terms = [p.cost[e][j] * var for (e, _), var in x.items() if p.cost[e][j]]
        if terms:
            spent = quicksum(terms)
            model.addCons(spent <= limit, name=f"budget_{j}")
            if p.soft and p.soft.weight[j]:
                excess = model.addVar(vtype="C", lb=0.0, name=f"excess_{j}", obj=-p.soft.weight[j])
                model.addCons(excess >= spent - p.soft.target[j], name=f"soft_{j}")
    model.setMaximize()
    model.optimize()

    status = model.getStatus()
    seconds = time.perf_counter() - started
    if status == "infeasible":
        return PlanResult("infeasible", "ilp", seconds)
    if model.getNSols() == 0:
        if status == "optimal":
            raise MetaharnessError("SCIP reported an optimum without a solution; please report this graph.")
        return PlanResult("unknown", "ilp", seconds, note=f"SCIP stopped with status {status!r} before a plan.")

    chosen = {(p.src[e], t): e for (e, t), var in x.items() if model.getVal(var) > 0.5}
    path, at = [], p.start
    for t in range(len(layers)):
        step = chosen.get((at, t))
        if step is None:
            break
        path.append(p.edge_ids[step])
        at = p.dst[step]
        if p.goal[at]:
            break
    walk = p.check_walk(path)
    result_status: Status = "optimal" if status == "optimal" else "feasible"
    return PlanResult.from_walk(
        result_status, "ilp", walk, soft=p.soft is not None, seconds=time.perf_counter() - started
    )
