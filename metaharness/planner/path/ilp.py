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
held at its optimum, minimise the steps. SCIP starts from the exact solver's beam plan. ``time_limit`` is wall-clock
time for everything (layers, model, both solves) and holds whatever SCIP is doing: the work runs in a worker thread
that records the beam plan and every incumbent SCIP finds, and when the limit passes the call returns the best plan
recorded so far (status "feasible"; "unknown" when there is none) while the worker stops SCIP and frees the model in
the background (``metaharness.planner.scip``).

Richer objectives live here too: ``SoftTargets`` keep the hard budget and
subtract a weighted penalty for exceeding a preferred cost level.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import networkx as nx

from metaharness.errors import MetaharnessError
from metaharness.planner.path.bounds import reach
from metaharness.planner.path.exact import FoundPlan, beam_plan
from metaharness.planner.path.problem import VALUE_TOLERANCE, PathProblem
from metaharness.planner.result import PlanResult
from metaharness.planner.scip import Job, optimize, run_until, watch

if TYPE_CHECKING:  # pyscipopt is imported on first use
    from pyscipopt import Model
    from pyscipopt.scip import Solution, Variable

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
    caller that validated the graph first can include that time. The call returns by then whatever SCIP is doing
    (``metaharness.planner.scip``): with the best plan found so far, SCIP's or the beam search's.
    """
    started = time.perf_counter() if started is None else started
    deadline = math.inf if time_limit is None else started + time_limit
    p = problem
    if time.perf_counter() > deadline:
        return _out_of_time(started, "the graph was checked")
    job, finished = run_until(deadline, time.perf_counter, lambda job: _work(p, job))
    return _result(p, job.snapshot(), finished, started)


def _work(p: PathProblem, job: Job) -> None:
    """Everything after the graph check, in the worker when there is a time limit; it writes its progress to the
    job's record: ``stage``, ``beam`` (the beam plan's edges), ``incumbent`` (SCIP's best plan so far), ``optimum``
    (proved optimal), ``fewer`` (the same value in fewer steps), ``tie_done``, ``stopped`` (SCIP's status when a
    limit stopped it), ``infeasible``."""
    # First the beam plan (a small part of the layers' time): SCIP's start, and the answer if the limit passes before
    # SCIP has one, while the layers are built included.
    job.record(stage="finding the beam plan")
    beam = beam_plan(p)
    job.record(stage="building the layers", beam=None if beam is None else list(beam.edges))
    try:
        layers = time_expanded_layers(p, job.deadline)
    except _OutOfTime:
        return
    if not layers:
        job.record(infeasible=True)
        return
    job.record(stage="building the model")
    _scip(p, layers, beam, job)


def _scip(p: PathProblem, layers: list[list[int]], beam: FoundPlan | None, job: Job) -> None:
    """Build the model, solve it (twice for the tie rule when the first solve is optimal); SCIP's incumbents go to
    the job's record as SCIP finds them. The model is freed after the caller has read the record."""
    from pyscipopt import Model, quicksum

    model = Model("plan")
    job.own(model)
    model.hideOutput()
    model.setParam("numerics/feastol", FEASIBILITY_TOLERANCE)
    model.setParam("limits/gap", 0.0)
    model.setMaximize()
    # Rows are created empty and filled coefficient by coefficient: building a product expression per term costs
    # several times more (seconds on a 2,000-node graph).
    x: dict[tuple[int, int], Variable] = {}
    value: dict[tuple[int, int], float] = {}
    inflow: dict[tuple[int, int], list] = defaultdict(list)  # (node, t) -> vars of edges arriving at step t
    outflow: dict[tuple[int, int], list] = defaultdict(list)  # (node, t) -> vars of edges leaving as step t + 1
    leaving: dict[tuple[int, int], list[tuple[int, Variable]]] = defaultdict(list)  # the same with their edges
    for t, layer in enumerate(layers):
        if job.late():
            return
        weight = p.discount**t
        for e in layer:
            gain = weight * p.reward[p.dst[e]]
            var = model.addVar(vtype="B", name=f"x_{e}_{t + 1}", obj=gain)
            x[e, t] = var
            if gain:
                value[e, t] = gain
            outflow[p.src[e], t].append(var)
            leaving[p.src[e], t].append((e, var))
            if not p.goal[p.dst[e]]:
                inflow[p.dst[e], t + 1].append(var)

    model.addCons(quicksum(outflow[p.start, 0]) == 1, name="leave_start")
    for count, (v, t) in enumerate(sorted(set(inflow) | {key for key in outflow if key[1] > 0})):
        if count % 1000 == 0 and job.late():
            return
        row = model.addCons(quicksum([]) == 0, name=f"flow_{v}_{t}")
        for var in inflow.get((v, t), ()):
            model.addCoefLinear(row, var, 1.0)
        for var in outflow.get((v, t), ()):
            model.addCoefLinear(row, var, -1.0)

    excess: dict[int, Variable] = {}
    for j, limit in enumerate(p.budget):
        if job.late():
            return
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

    def walk_of(solution: Solution | None) -> list[int]:
        """The edges of the plan a solution describes, followed from the start (a few reads per step)."""
        edges: list[int] = []
        at = p.start
        for t in range(len(layers)):
            step = next((e for e, var in leaving.get((at, t), ()) if model.getSolVal(solution, var) > 0.5), None)
            if step is None:
                break
            edges.append(step)
            at = p.dst[step]
            if p.goal[at]:
                break
        return edges

    solving = "incumbent"  # which entry of the record SCIP's incumbents go to: "fewer" in the second solve
    watch(model, job, lambda _, solution: job.record(**{solving: walk_of(solution)}))
    if job.late():
        return
    job.record(stage="SCIP was solving")
    status = optimize(model, job)
    if status == "infeasible":
        job.record(infeasible=True)
        return
    if model.getNSols() == 0:
        if status == "optimal":
            raise MetaharnessError("SCIP reported an optimum without a solution; please report this graph.")
        job.record(stopped=status)
        return
    best = walk_of(model.getBestSol())
    if status != "optimal":
        job.record(incumbent=best, stopped=status)
        return
    job.record(optimum=best, stage="the second solve (fewest steps at the optimal value)")
    solving = "fewer"
    if _fewest_steps(model, x, excess, value, job):
        job.record(fewer=walk_of(model.getBestSol()), tie_done=True)


def _fewest_steps(
    model: Model,
    x: dict[tuple[int, int], Variable],
    excess: dict[int, Variable],
    value: dict[tuple[int, int], float],
    job: Job,
) -> bool:
    """The second solve: the optimum's value held (up to the value tolerance), the fewest steps, started from the
    optimum. True when it proved the fewest steps."""
    from pyscipopt import quicksum

    best = model.getObjVal()
    solution = model.getBestSol()
    start = [(var, float(model.getSolVal(solution, var) > 0.5)) for var in x.values()]
    start += [(var, model.getSolVal(solution, var)) for var in excess.values()]
    model.freeTransform()
    keep = model.addCons(quicksum([]) >= best - VALUE_TOLERANCE * max(1.0, abs(best)), name="keep_value")
    for key, gain in value.items():
        model.addCoefLinear(keep, x[key], gain)
    for var in excess.values():
        model.addCoefLinear(keep, var, var.getObj())  # minus the soft-target weight
    model.setObjective(quicksum(x.values()), "minimize")
    _add_start(model, start)
    if job.late():
        return False
    return optimize(model, job) == "optimal" and model.getNSols() > 0


def _result(p: PathProblem, record: dict[str, Any], finished: bool, started: float) -> PlanResult:
    """The answer from the worker's record: its proof when it finished, else the best plan it had (SCIP's incumbent or
    the beam plan, checked here)."""
    if record.get("infeasible"):
        return PlanResult("infeasible", "ilp", time.perf_counter() - started)
    soft = p.soft is not None
    if record.get("optimum"):
        optimum, fewer = record["optimum"], record.get("fewer")
        edges = fewer if fewer and len(fewer) <= len(optimum) else optimum
        walk = p.check_walk([p.edge_ids[e] for e in edges])
        result = PlanResult.from_walk("optimal", "ilp", walk, soft=soft, seconds=time.perf_counter() - started)
        if not record.get("tie_done"):
            result.note = (
                "The time limit passed during the second solve (fewest steps at the optimal value): the value is "
                "optimal, a plan of equal value with fewer steps may exist."
            )
        return result
    found = {name: record[name] for name in ("incumbent", "beam") if record.get(name)}
    if not found:
        return _out_of_time(started, "SCIP was solving" if record.get("stopped") else record.get("stage", "starting"))
    walks = {name: p.check_walk([p.edge_ids[e] for e in edges]) for name, edges in found.items()}
    name = max(walks, key=lambda n: (walks[n].objective, -len(walks[n].path)))
    result = PlanResult.from_walk("feasible", "ilp", walks[name], soft=soft, seconds=time.perf_counter() - started)
    if name == "beam":
        result.note = (
            f"The time limit passed while {record.get('stage')}: the plan is the beam search's, not proved optimal."
        )
    elif finished:
        result.note = f"SCIP stopped at its time limit ({record.get('stopped')}); the plan may not be optimal."
    else:
        result.note = "The time limit passed while SCIP was solving: the plan is SCIP's best yet, not proved optimal."
    return result


def _start_plan(
    p: PathProblem, plan: FoundPlan | None, x: dict[tuple[int, int], Variable], excess: dict[int, Variable]
) -> list[tuple[Variable, float]]:
    """The exact solver's beam plan as a SCIP start ((variable, value) pairs), or [] when it found none."""
    if plan is None or any((e, t) not in x for t, e in enumerate(plan.edges)):
        return []
    start = [(x[e, t], 1.0) for t, e in enumerate(plan.edges)]
    for j, var in excess.items():
        assert p.soft is not None
        start.append((var, max(0.0, float(plan.cost[j]) - p.soft.target[j])))
    return start


def _add_start(model: Model, values: list[tuple[Variable, float]]) -> None:
    sol = model.createSol()
    for var, value in values:
        model.setSolVal(sol, var, value)
    model.addSol(sol, free=True)


def _out_of_time(started: float, stage: str) -> PlanResult:
    return PlanResult(
        "unknown", "ilp", time.perf_counter() - started, note=f"The time limit passed while {stage}, before a plan."
    )
