"""ILP solver: the time-expanded integer programme (TAPE's model) solved with SCIP through pyscipopt.

Binary ``x[e, t]`` says edge e is step t. One unit of flow leaves the start at step 1; at every non-goal node the
flow in at step t equals the flow out at step t + 1; goal nodes absorb it (a plan ends at its first goal), and no
flow may remain at a non-goal node after the last layer. Unlike TAPE's CP-SAT model the coefficients are the exact
real costs and rewards (no x1000 rounding) and the layers end where the budget does: a variable ``x[e, t]`` exists
only when the cheapest t-1 steps to e's source plus e plus the cheapest way on to a goal fit the budget in every
entry and a goal is reachable within the horizon, so no horizon is stretched past the budget. With discount 1 and
no cycle of positive reward, an optimal plan of fewest steps repeats no node, so the layers stop at the number of
nodes (a cheap cycle no longer multiplies them).

The documented tie rule (among plans of equal value the one with fewest steps) is a second solve: with the value
held at its optimum, minimise the steps. ``time_limit`` is wall-clock time for everything (layers, model, both
solves, and freeing the model, which SCIP's own clock does not see: :data:`RESERVE_PER_BUILD_SECOND`); SCIP starts
from the exact solver's beam plan, so a solve stopped by the limit still returns a plan when one exists (status
"feasible").

Richer objectives live here too: :class:`~metaharness.planner.path.problem.SoftTargets` keep the hard budget and
subtract a weighted penalty for exceeding a preferred cost level.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any

import networkx as nx

from metaharness.errors import MetaharnessError
from metaharness.planner.path.bounds import reach
from metaharness.planner.path.exact import FoundPlan, beam_plan
from metaharness.planner.path.problem import VALUE_TOLERANCE, PathProblem
from metaharness.planner.result import PlanResult

# SCIP's default feasibility tolerance (1e-6) would let a plan exceed the budget by that much.
FEASIBILITY_TOLERANCE = 1e-9


class _OutOfTime(Exception):
    """The time limit passed before SCIP could start."""


def time_expanded_layers(problem: PathProblem, deadline: float = math.inf) -> list[list[int]]:
    """``layers[t]`` lists the edges that may be step t + 1 of a feasible plan (budget-, horizon-pruned)."""
    p = problem
    rch = reach(p)
    cheapest = {p.start: tuple(0.0 for _ in p.budget)}  # least cost per entry to stand at a node after t steps
    layers: list[list[int]] = []
    steps = _useful_steps(p)
    for t in range(p.horizon if steps is None else min(p.horizon, steps)):
        if time.perf_counter() > deadline:
            raise _OutOfTime()
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


def _useful_steps(p: PathProblem) -> int | None:
    """How many steps an optimal plan of fewest steps may take: the number of nodes when the discount is 1 and no
    cycle through non-goal nodes has positive reward (cutting such a cycle out of a plan keeps its value, saves
    cost and steps); None (unbounded) otherwise."""
    if p.discount < 1.0:
        return None
    loss = nx.DiGraph()
    for u, w in zip(p.src, p.dst, strict=True):
        if not p.goal[u] and not p.goal[w]:
            loss.add_edge(u, w, weight=min(-p.reward[w], loss.get_edge_data(u, w, {"weight": math.inf})["weight"]))
    if loss.number_of_edges() and nx.negative_edge_cycle(loss):
        return None
    return len(p.node_ids)


def ilp_path(problem: PathProblem, *, time_limit: float | None = None, started: float | None = None) -> PlanResult:
    """Solve with SCIP; "optimal"/"infeasible" are proofs, a time limit may leave "feasible" or "unknown".

    ``time_limit`` counts wall-clock seconds from ``started`` (a ``time.perf_counter()`` value; default now), so a
    caller that validated the graph first can include that time.
    """
    started = time.perf_counter() if started is None else started
    deadline = math.inf if time_limit is None else started + time_limit
    p = problem
    if time.perf_counter() > deadline:
        return _out_of_time(p, None, started, "the graph was checked")
    # First the beam plan (a small part of the layers' time): SCIP's start, and the answer if the limit passes before
    # SCIP has one, while the layers are built included.
    beam = beam_plan(p)
    try:
        layers = time_expanded_layers(p, deadline)
    except _OutOfTime:
        return _out_of_time(p, beam, started, "building the layers")
    if not layers:
        return PlanResult("infeasible", "ilp", time.perf_counter() - started)
    # The model is built, solved and freed inside _scip (freeing a large one takes a good part of a second, and
    # counts against the limit); what is left here is reading the plan.
    outcome = _scip(p, layers, beam, deadline)
    if isinstance(outcome, str):
        if outcome == "infeasible":
            return PlanResult("infeasible", "ilp", time.perf_counter() - started)
        return _out_of_time(p, beam, started, outcome)
    status, values = outcome
    walk = p.check_walk(_walk(p, layers, values))
    result = PlanResult.from_walk(
        "optimal" if status == "optimal" else "feasible",
        "ilp",
        walk,
        soft=p.soft is not None,
        seconds=time.perf_counter() - started,
    )
    if status != "optimal":
        result.note = f"SCIP stopped at its time limit ({status}); the plan may not be optimal."
    return result


# SCIP's work that its own time limit does not see is in proportion to the model's size: creating the transformed
# problem before its clock starts, and freeing both problems afterwards. The time spent building the model is the
# measure of that size on this machine under its current load, so this many times it is kept back from SCIP's time
# limit (and a model whose building would leave less than that is not finished: the beam plan is returned).
RESERVE_PER_BUILD_SECOND = 0.6


def _scip(
    p: PathProblem, layers: list[list[int]], beam: FoundPlan | None, deadline: float
) -> tuple[str, dict[tuple[int, int], float]] | str:
    """Build the model, solve it (twice for the tie rule when the first solve is optimal) and free it. Returns
    (SCIP status, the x values) for a solution, "infeasible" for a proof, or the stage the limit stopped (the
    caller then returns the beam plan)."""
    from pyscipopt import Model, quicksum

    building = time.perf_counter()

    def late() -> bool:
        now = time.perf_counter()
        return now + RESERVE_PER_BUILD_SECOND * (now - building) > deadline

    model = Model("plan")
    model.hideOutput()
    model.setParam("numerics/feastol", FEASIBILITY_TOLERANCE)
    model.setParam("limits/gap", 0.0)
    model.setParam("timing/clocktype", 2)  # wall clock, as the time limit is
    model.setMaximize()
    # Rows are created empty and filled coefficient by coefficient: building a product expression per term costs
    # several times more (seconds on a 2,000-node graph).
    x: dict[tuple[int, int], Any] = {}
    value: dict[tuple[int, int], float] = {}
    inflow: dict[tuple[int, int], list] = defaultdict(list)  # (node, t) -> vars of edges arriving at step t
    outflow: dict[tuple[int, int], list] = defaultdict(list)  # (node, t) -> vars of edges leaving as step t + 1
    for t, layer in enumerate(layers):
        if late():
            return "building the model"
        weight = p.discount**t
        for e in layer:
            gain = weight * p.reward[p.dst[e]]
            var = model.addVar(vtype="B", name=f"x_{e}_{t + 1}", obj=gain)
            x[e, t] = var
            if gain:
                value[e, t] = gain
            outflow[p.src[e], t].append(var)
            if not p.goal[p.dst[e]]:
                inflow[p.dst[e], t + 1].append(var)

    model.addCons(quicksum(outflow[p.start, 0]) == 1, name="leave_start")
    for count, (v, t) in enumerate(sorted(set(inflow) | {key for key in outflow if key[1] > 0})):
        if count % 1000 == 0 and late():
            return "building the model"
        row = model.addCons(quicksum([]) == 0, name=f"flow_{v}_{t}")
        for var in inflow.get((v, t), ()):
            model.addCoefLinear(row, var, 1.0)
        for var in outflow.get((v, t), ()):
            model.addCoefLinear(row, var, -1.0)

    excess: dict[int, Any] = {}
    for j, limit in enumerate(p.budget):
        if late():
            return "building the model"
        terms = [(p.cost[e][j], var) for (e, _), var in x.items() if p.cost[e][j]]
        if not terms:
            continue
        row = model.addCons(quicksum([]) <= limit, name=f"budget_{j}")
        for c, var in terms:
            model.addCoefLinear(row, var, c)
        if p.soft and p.soft.weight[j]:
            excess[j] = model.addVar(vtype="C", lb=0.0, name=f"excess_{j}", obj=-p.soft.weight[j])
            soft = model.addCons(quicksum([]) <= p.soft.target[j], name=f"soft_{j}")  # spent - excess <= target
            for c, var in terms:
                model.addCoefLinear(soft, var, c)
            model.addCoefLinear(soft, excess[j], -1.0)
    start_plan = _start_plan(p, beam, x, excess)
    if start_plan:
        _add_start(model, start_plan)
    if late():
        return "building the model"
    reserve = RESERVE_PER_BUILD_SECOND * (time.perf_counter() - building)
    status = _optimize(model, deadline - reserve)
    if status == "infeasible":
        return "infeasible"
    if model.getNSols() == 0:
        if status == "optimal":
            raise MetaharnessError("SCIP reported an optimum without a solution; please report this graph.")
        return f"SCIP ran (it stopped: {status})"
    values = {key: model.getVal(var) for key, var in x.items()}
    if status == "optimal":
        values = _fewest_steps(model, x, excess, value, values, deadline - reserve)
    return status, values


# Of the time left when SCIP starts, this much is kept for reading the solution and checking the plan.
READ_MARGIN = 0.05


def _optimize(model: Any, deadline: float) -> str:
    if math.isfinite(deadline):
        model.setParam("limits/time", max(0.0, (deadline - time.perf_counter()) * (1 - READ_MARGIN)))
    model.optimize()
    return str(model.getStatus())


def _fewest_steps(
    model: Any,
    x: dict[tuple[int, int], Any],
    excess: dict[int, Any],
    value: dict[tuple[int, int], float],
    values: dict[tuple[int, int], float],
    deadline: float,
) -> dict[tuple[int, int], float]:
    """The second solve: the optimum's value held (up to the value tolerance), the fewest steps. Returns the new
    solution, or ``values`` when the time limit stops it without a better one."""
    from pyscipopt import quicksum

    best = model.getObjVal()
    steps = sum(v > 0.5 for v in values.values())
    start = [(var, float(values[key] > 0.5)) for key, var in x.items()]
    start += [(var, model.getVal(var)) for var in excess.values()]
    model.freeTransform()
    keep = model.addCons(quicksum([]) >= best - VALUE_TOLERANCE * max(1.0, abs(best)), name="keep_value")
    for key, gain in value.items():
        model.addCoefLinear(keep, x[key], gain)
    for var in excess.values():
        model.addCoefLinear(keep, var, var.getObj())  # minus the soft-target weight
    model.setObjective(quicksum(x.values()), "minimize")
    _add_start(model, start)
    status = _optimize(model, deadline)
    if model.getNSols() == 0 or status not in ("optimal", "timelimit", "gaplimit", "sollimit"):
        return values
    fewer = {key: model.getVal(var) for key, var in x.items()}
    return fewer if sum(v > 0.5 for v in fewer.values()) <= steps else values


def _start_plan(
    p: PathProblem, plan: FoundPlan | None, x: dict[tuple[int, int], Any], excess: dict[int, Any]
) -> list[tuple[Any, float]]:
    """The exact solver's beam plan as a SCIP start ((variable, value) pairs), or [] when it found none."""
    if plan is None or any((e, t) not in x for t, e in enumerate(plan.edges)):
        return []
    start = [(x[e, t], 1.0) for t, e in enumerate(plan.edges)]
    for j, var in excess.items():
        assert p.soft is not None
        start.append((var, max(0.0, float(plan.cost[j]) - p.soft.target[j])))
    return start


def _add_start(model: Any, values: list[tuple[Any, float]]) -> None:
    sol = model.createSol()
    for var, value in values:
        model.setSolVal(sol, var, value)
    model.addSol(sol, free=True)


def _walk(p: PathProblem, layers: list[list[int]], values: dict[tuple[int, int], float]) -> list:
    """The edge ids of the plan a solution's ``x`` values describe."""
    chosen = {(p.src[e], t): e for (e, t), value in values.items() if value > 0.5}
    path, at = [], p.start
    for t in range(len(layers)):
        step = chosen.get((at, t))
        if step is None:
            break
        path.append(p.edge_ids[step])
        at = p.dst[step]
        if p.goal[at]:
            break
    return path


def _out_of_time(p: PathProblem, beam: FoundPlan | None, started: float, stage: str) -> PlanResult:
    """What the ILP returns when its time limit passes before SCIP has a plan: the beam plan (feasible, not proved
    optimal) when there is one, else "unknown"."""
    if beam is None:
        return PlanResult(
            "unknown", "ilp", time.perf_counter() - started, note=f"The time limit passed while {stage}, before a plan."
        )
    walk = p.check_walk([p.edge_ids[e] for e in beam.edges])
    result = PlanResult.from_walk(
        "feasible", "ilp", walk, soft=p.soft is not None, seconds=time.perf_counter() - started
    )
    result.note = f"The time limit passed while {stage}: the plan is the beam search's, not proved optimal."
    return result
