"""Solver speed and optimality on random merged plan graphs of the sizes TAPE meets, all in one process.

    pip install -e ".[bench]"   # OR-Tools, for the CP-SAT reference
    python benchmarks/planner_solvers.py [--per-size 2] [--seed 0] [--cpsat-limit 2] [--cpsat-workers 8]
    python benchmarks/planner_solvers.py --family penalties --graphs 20 --ilp-limit 10 --no-cpsat

Graphs imitate merged TPS/TAPE plan graphs: M plans advance from the start through levels of predicted states,
equal states merge (plans join), extra transitions go sideways and back (cycles); a few deep states are goals,
about a tenth are dead ends with no way out. Costs: limit 1 counts steps, further limits are real amounts with
cent precision (so TAPE's x1000 scaling is exact and every disagreement is the search's). Budgets are the cheapest
way to a goal plus slack; the horizon equals the step budget (at most 50). Rewards: "tps" labels (+1 goal, -1 dead
end, 0 otherwise) or "graded" (intermediate states also carry rewards in [-0.5, 0.5], as in program-space graphs).

The hard families (``--family NAME``, N graphs with ``--graphs N``): horizon 50, three limits with continuous costs
(no step count among them), discount 0.95, budgets 2-3 times the cost of the cheapest way to a goal (so plans run
10-50 steps). ``hard``: 150 nodes, 600 edges, graded rewards on non-goal nodes; ``penalties``: the same shape with
every node's reward uniform in [-0.3, 2] (positive rewards along the way make long walks pay, negative ones are
risks); ``large``: the penalties law on 2,000 nodes and 8,000 edges. There the run compares exact (wall and CPU
time), auto and ilp (under ``--ilp-limit``, wall clock including model building) and, without ``--no-cpsat``,
CP-SAT, on the same graphs; every answer is checked against exact's.

Solvers: ``exact`` (label-setting DP), ``ilp`` (SCIP), and a reimplementation of TAPE's CP-SAT model (boolean edge
and node variables per step, STOP self-loops at goals, one node and one edge per step, coefficients scaled by 1000
and rounded, ``max_time_in_seconds`` as TAPE sets it) adapted to the same walk semantics (a plan ends at its first
goal; rewards count until then). Times include building each model. Every returned plan is re-checked exactly.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import time

import networkx as nx
from rich.console import Console
from rich.table import Table

from metaharness.errors import InputError
from metaharness.planner.graph import PlanGraph
from metaharness.planner.path.bounds import reach
from metaharness.planner.path.exact import exact_path
from metaharness.planner.path.ilp import ilp_path
from metaharness.planner.path.problem import PathProblem, path_problem
from metaharness.planner.scip import join_workers
from metaharness.planner.solve import solve

# (nodes, edges, limits): TAPE's reported cases (45/104; 132/369 with 2 limits) and the range up to 150/600.
SIZES = [
    (20, 50, 1),
    (45, 104, 1),
    (45, 104, 2),
    (80, 240, 2),
    (132, 369, 2),
    (100, 400, 3),
    (150, 450, 3),
    (150, 600, 3),
]


def merged_plan_graph(rng: random.Random, nodes: int, edges: int, limits: int, rewards: str) -> PlanGraph:
    """A random merged plan graph with ``nodes`` nodes, ``edges`` edges and ``limits`` cost entries."""
    depth_levels = rng.randint(8, 40)
    level = [0] + sorted(rng.randint(1, depth_levels) for _ in range(nodes - 1))
    by_level: dict[int, list[int]] = {}
    for v, lv in enumerate(level):
        by_level.setdefault(lv, []).append(v)
    deepest = max(level)
    goals = set(rng.sample(by_level[deepest], min(2, len(by_level[deepest]))))
    goals |= set(rng.sample(range(nodes // 2, nodes), 2))
    dead = {v for v in rng.sample(range(1, nodes), nodes // 10) if v not in goals}

    pairs: list[tuple[int, int]] = []
    seen: set[tuple[int, int, int]] = set()

    def add(u: int, v: int) -> None:
        key = (u, v, len(pairs) % 2)  # allow at most two parallel transitions (different actions)
        if u in dead or u in goals or key in seen or len(pairs) >= edges:
            return
        seen.add(key)
        pairs.append((u, v))

    levels = sorted(by_level)
    for _ in range(edges):  # plans: walks that move one or two levels deeper per step (until 60% of the edges)
        at = 0
        while at not in goals and at not in dead and len(pairs) < edges * 0.6:
            ahead = [lv for lv in levels if level[at] < lv <= level[at] + 2] or [deepest]
            nxt = rng.choice(by_level[rng.choice(ahead)])
            add(at, nxt)
            at = nxt
    while len(pairs) < edges:  # merges and detours: sideways, back, or a little ahead
        u = rng.randrange(nodes)
        near = [lv for lv in levels if level[u] - 2 <= lv <= level[u] + 2]
        add(u, rng.choice(by_level[rng.choice(near)]))

    graph = PlanGraph("s0", limits=["steps", "usd", "minutes"][:limits])
    for v in range(nodes):
        reward = 1.0 if v in goals else -1.0 if v in dead else 0.0
        if rewards == "graded" and reward == 0.0 and v:
            reward = round(rng.uniform(-0.5, 0.5), 2)
        graph.add_node(f"s{v}", reward, goal=v in goals, dead_end=v in dead)
    for i, (u, v) in enumerate(pairs):
        cost = [1.0] + [round(rng.uniform(0.05, 2.0), 2) for _ in range(limits - 1)]
        graph.add_edge(f"e{i}", f"s{u}", f"s{v}", f"a{i}", cost)

    # Budget: the cheapest way to a goal in each entry plus slack (TAPE: B = T* + slack); horizon = step budget.
    probe = path_problem(graph, [1e9] * limits, horizon=nodes)
    need = reach(probe)
    steps = need.steps[probe.start]
    if math.isinf(steps):
        return merged_plan_graph(rng, nodes, edges, limits, rewards)
    cheapest = need.cost[-1, probe.start]
    step_budget = min(50, int(steps) + rng.randint(2, 12))
    graph.budget = (float(step_budget), *(round(c * rng.uniform(1.1, 1.6), 2) for c in cheapest[1:]))
    graph.horizon = step_budget
    return graph


def hard_graph(
    rng: random.Random,
    nodes: int = 150,
    edges: int = 600,
    limits: int = 3,
    rewards: tuple[float, float] | None = None,
) -> PlanGraph:
    """A graph of the hard family: merged-plan topology, continuous costs in every limit, horizon 50, discount
    0.95; each budget entry is 2-3 times that entry's cost along the path of least summed cost to a goal. Rewards:
    graded (goals +1, dead ends -1, others in [-0.5, 0.5]), or with ``rewards=(low, high)`` every node but the start
    uniform in that range, goals included (penalties where negative, as when a step has a known risk)."""
    shape = merged_plan_graph(rng, nodes, edges, limits, "graded")
    graph = PlanGraph("s0", limits=["usd", "minutes", "tokens"][:limits], horizon=50, discount=0.95)
    for node in shape.nodes:
        reward = node.reward
        if rewards is not None:
            reward = 0.0 if node.id == "s0" else round(rng.uniform(*rewards), 2)
        graph.add_node(node.id, reward, goal=node.goal, dead_end=node.dead_end)
    for edge in shape.edges:
        graph.add_edge(
            edge.id, edge.source, edge.target, edge.action, [round(rng.uniform(0.05, 2.0), 2) for _ in range(limits)]
        )
    summed = nx.DiGraph()
    for edge in graph.edges:
        if not graph.node(edge.source).goal:
            old = summed.get_edge_data(edge.source, edge.target)
            if old is None or old["weight"] > sum(edge.cost):
                summed.add_edge(edge.source, edge.target, weight=sum(edge.cost), cost=edge.cost)
    distance, paths = nx.single_source_dijkstra(summed, "s0")
    goal = min((v for v in distance if graph.node(v).goal), key=distance.__getitem__)
    path = paths[goal]
    spent = [sum(summed[a][b]["cost"][j] for a, b in zip(path, path[1:], strict=False)) for j in range(limits)]
    graph.budget = tuple(round(c * rng.uniform(2.0, 3.0), 2) for c in spent)
    return graph


def solve_cpsat(problem: PathProblem, *, time_limit: float, workers: int, scale: int = 1000) -> tuple[str, list, float]:
    """TAPE's CP-SAT model on the same problem; returns (status, edge ids, CP-SAT wall time)."""
    from ortools.sat.python import cp_model

    p = problem
    steps = p.horizon
    n = len(p.node_ids)
    edges = [(p.src[e], p.dst[e], e) for e in range(len(p.src))] + [(g, g, -1) for g in range(n) if p.goal[g]]
    model = cp_model.CpModel()
    x = {(i, t): model.NewBoolVar(f"x_{i}_{t}") for i in range(len(edges)) for t in range(steps)}
    y = {(v, t): model.NewBoolVar(f"y_{v}_{t}") for v in range(n) for t in range(steps + 1)}
    out_of: dict[int, list[int]] = {}
    into: dict[int, list[int]] = {}
    for i, (u, v, _) in enumerate(edges):
        out_of.setdefault(u, []).append(i)
        into.setdefault(v, []).append(i)
    for v in range(n):
        model.Add(y[v, 0] == (1 if v == p.start else 0))
    for t in range(steps + 1):
        model.AddExactlyOne(y[v, t] for v in range(n))
    for t in range(steps):
        model.AddExactlyOne(x[i, t] for i in range(len(edges)))
        for v in range(n):
            model.Add(sum(x[i, t] for i in out_of.get(v, [])) == y[v, t])
            model.Add(sum(x[i, t] for i in into.get(v, [])) == y[v, t + 1])
        for i, (u, _, e) in enumerate(edges):  # a plan ends at its first goal: from a goal only STOP
            if e >= 0 and p.goal[u] and (t > 0 or u != p.start):
                model.Add(x[i, t] == 0)
    if not any(p.goal):
        return "infeasible", [], 0.0
    model.AddExactlyOne(y[g, steps] for g in range(n) if p.goal[g])
    for j, limit in enumerate(p.budget):
        terms = [
            round(p.cost[e][j] * scale) * x[i, t]
            for i, (_, _, e) in enumerate(edges)
            if e >= 0
            for t in range(steps)
            if p.cost[e][j]
        ]
        if terms:
            model.Add(sum(terms) <= round(limit * scale))
    objective = [
        round(p.reward[v] * p.discount**t * scale) * x[i, t]
        for i, (_, v, e) in enumerate(edges)
        if e >= 0 and p.reward[v]
        for t in range(steps)
    ]
    model.Maximize(sum(objective))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_search_workers = workers
    status = solver.Solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return ("infeasible" if status == cp_model.INFEASIBLE else "no solution"), [], solver.WallTime()
    path = []
    for t in range(steps):
        i = next(i for i in range(len(edges)) if solver.Value(x[i, t]))
        if edges[i][2] < 0:
            break
        path.append(p.edge_ids[edges[i][2]])
    return ("optimal" if status == cp_model.OPTIMAL else "feasible"), path, solver.WallTime()


def _timed(fn, *args, **kwargs):
    started = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-size", type=int, default=2, help="graphs per size and reward kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpsat-limit", type=float, default=2.0, help="CP-SAT time limit in seconds (TAPE-style)")
    parser.add_argument("--cpsat-workers", type=int, default=8, help="CP-SAT search workers (TAPE uses 8)")
    parser.add_argument("--no-cpsat", action="store_true", help="skip the CP-SAT reference (no OR-Tools needed)")
    parser.add_argument("--hard", type=int, default=0, help="run only N graphs of the hard family (--family hard)")
    parser.add_argument("--family", choices=sorted(FAMILIES), help="run only a family of hard graphs")
    parser.add_argument("--graphs", type=int, default=20, help="graphs of the family")
    parser.add_argument("--ilp-limit", type=float, default=10.0, help="ILP time limit in seconds, in --family runs")
    args = parser.parse_args()
    if args.hard:
        args.family, args.graphs = "hard", args.hard
    console = Console(width=150)
    console.print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (timings scale with it)")
    if args.family:
        _family(console, args)
        console.print(f"load average at end: {os.getloadavg()[0]:.1f}")
        return
    rng = random.Random(args.seed)
    cases = [(size, kind, k) for size in SIZES for kind in ("tps", "graded") for k in range(args.per_size)]
    rows = []
    for (nodes, edges, limits), kind, _ in cases:
        graph = merged_plan_graph(rng, nodes, edges, limits, kind)

        exact, exact_s = min(
            (_timed(lambda g=graph: exact_path(path_problem(g))) for _ in range(3)), key=lambda r: r[1]
        )  # best of 3 (ms scale)
        ilp, ilp_s = _timed(lambda g=graph: ilp_path(path_problem(g)))
        row = {
            "nodes": nodes,
            "edges": len(graph.edges),
            "limits": limits,
            "horizon": graph.horizon,
            "kind": kind,
            "exact_s": exact_s,
            "exact": exact,
            "ilp_s": ilp_s,
            "ilp": ilp,
        }
        assert ilp.status == exact.status and (
            exact.value is None or math.isclose(ilp.value, exact.value, abs_tol=1e-9)
        ), ("exact and ilp disagree", graph.to_json())
        if not args.no_cpsat:
            (status, path, wall), cpsat_s = _timed(
                solve_cpsat, path_problem(graph), time_limit=args.cpsat_limit, workers=args.cpsat_workers
            )
            value = None
            if path:
                try:
                    value = path_problem(graph).check_walk(path).value
                except InputError:
                    status = "invalid plan"
            row.update(cpsat_s=cpsat_s, cpsat_wall=wall, cpsat_status=status, cpsat_value=value)
        rows.append(row)
        console.print(
            f"{nodes} nodes/{len(graph.edges)} edges/{limits} limits/horizon {graph.horizon}/{kind}: "
            f"exact {exact_s * 1000:.1f} ms, ilp {ilp_s:.2f} s"
            + ("" if args.no_cpsat else f", cp-sat {row['cpsat_s']:.2f} s ({_agree(row)})"),
            highlight=False,
        )
    _report(console, rows, args)
    console.print(f"load average at end: {os.getloadavg()[0]:.1f}")


# name -> (description, graph maker)
FAMILIES = {
    "hard": (
        "150 nodes, 600 edges, horizon 50, 3 continuous limits, graded rewards (non-goal nodes in [-0.5, 0.5]), "
        "discount 0.95",
        lambda rng: hard_graph(rng),
    ),
    "penalties": (
        "150 nodes, 600 edges, horizon 50, 3 continuous limits, node rewards uniform in [-0.3, 2], discount 0.95",
        lambda rng: hard_graph(rng, rewards=(-0.3, 2.0)),
    ),
    "large": (
        "2,000 nodes, 8,000 edges, horizon 50, 3 continuous limits, node rewards uniform in [-0.3, 2], discount 0.95",
        lambda rng: hard_graph(rng, 2000, 8000, rewards=(-0.3, 2.0)),
    ),
}


def _family(console: Console, args) -> None:
    """Exact (wall and CPU time), auto, ilp (with its time limit) and optionally CP-SAT on N graphs of a family."""
    description, make = FAMILIES[args.family]
    rng = random.Random(args.seed)
    table = Table(title=f"{args.family}: {description}; ilp limit {args.ilp_limit:g} s")
    for column in ("graph", "value", "steps", "exact s", "exact cpu s", "auto s", "ilp s", "ilp", "cp-sat"):
        table.add_column(column, justify="right")
    times: dict[str, list[float]] = {"exact": [], "exact cpu": [], "auto": [], "ilp": []}
    ilp_status: dict[str, int] = {}
    after: list[float] = []
    for k in range(args.graphs):
        graph = make(rng)
        cpu = time.process_time()
        exact, exact_s = _timed(solve, graph, solver="exact")
        exact_cpu = time.process_time() - cpu
        auto, auto_s = _timed(solve, graph, solver="auto")
        ilp, ilp_s = _timed(solve, graph, solver="ilp", time_limit=args.ilp_limit)
        # What the ILP's worker still does after the call returned (SCIP stops at its next event, the model is
        # freed), waited for here so that the next graph's timings (CPU time counts every thread) do not pay it.
        _, after_s = _timed(join_workers)
        after.append(after_s)
        assert auto.status == exact.status and (exact.value is None or math.isclose(auto.value, exact.value)), (
            "auto and exact disagree",
            graph.to_json(),
        )
        _check_ilp(ilp, exact, graph)
        ilp_status[ilp.status] = ilp_status.get(ilp.status, 0) + 1
        verdict = "skipped"
        if not args.no_cpsat:
            (status, path, _), _ = _timed(
                solve_cpsat, path_problem(graph), time_limit=args.cpsat_limit, workers=args.cpsat_workers
            )
            value = path_problem(graph).check_walk(path).value if path else None
            verdict = _agree({"exact": exact, "cpsat_status": status, "cpsat_value": value})
        for name, seconds in (("exact", exact_s), ("exact cpu", exact_cpu), ("auto", auto_s), ("ilp", ilp_s)):
            times[name].append(seconds)
        row = (
            str(k),
            "infeasible" if exact.value is None else f"{exact.value:.3f}",
            str(len(exact.path)),
            f"{exact_s:.3f}",
            f"{exact_cpu:.3f}",
            f"{auto_s:.3f}",
            f"{ilp_s:.2f}",
            ilp.status + ("" if ilp.value is None or ilp.status == "optimal" else f" {ilp.value:.3f}"),
            verdict,
        )
        console.print(" | ".join(row), highlight=False)
        table.add_row(*row)
    console.print(table)
    for name, values in times.items():
        console.print(
            f"{name}: worst {max(values):.3f} s, median {statistics.median(values):.3f} s over {len(values)} graphs",
            highlight=False,
        )
    console.print(
        f"ilp work after the call returned (SCIP stopping, the model freed; not in ilp s): worst {max(after):.3f} s, "
        f"median {statistics.median(after):.3f} s",
        highlight=False,
    )
    console.print(
        "ilp: "
        + ", ".join(f"{n} {s}" for s, n in sorted(ilp_status.items()))
        + "; every optimal ilp value equals exact's, every other ilp plan is feasible and no better; auto = exact.",
        highlight=False,
    )


def _check_ilp(ilp, exact, graph) -> None:
    """An optimal ILP answer matches exact (value, and steps by the tie rule); a plan under a time limit is feasible
    and no better than exact's."""
    if ilp.status == "optimal":
        # The fewest steps too, unless the limit cut the second solve (the ILP's note says so).
        tie_cut = "second solve" in (ilp.note or "") and len(ilp.path) >= len(exact.path)
        assert math.isclose(ilp.value, exact.value, abs_tol=1e-9) and (len(ilp.path) == len(exact.path) or tie_cut), (
            "exact and ilp disagree",
            graph.to_json(),
        )
    elif ilp.status == "infeasible":
        assert exact.status == "infeasible", ("ilp says infeasible", graph.to_json())
    elif ilp.path:
        assert path_problem(graph).check_walk(ilp.path).value <= exact.value + 1e-9, (
            "ilp beats exact",
            graph.to_json(),
        )


def _agree(row) -> str:
    exact = row["exact"]
    if row["cpsat_status"] in ("no solution", "invalid plan"):
        return row["cpsat_status"]
    if exact.value is None:
        return "both infeasible" if row["cpsat_status"] == "infeasible" else "MISMATCH"
    if row["cpsat_value"] is not None and math.isclose(row["cpsat_value"], exact.value, abs_tol=1e-6):
        return "optimal (proved)" if row["cpsat_status"] == "optimal" else "optimal (not proved)"
    return f"suboptimal {row['cpsat_value']:.2f} < {exact.value:.2f}" if row["cpsat_value"] is not None else "MISMATCH"


def _report(console: Console, rows: list[dict], args) -> None:
    cpsat = not args.no_cpsat
    table = Table(title="Planner solvers on merged plan graphs (times include model building)")
    for column in (
        "nodes",
        "edges",
        "limits",
        "horizon",
        "rewards",
        "value",
        "exact ms",
        "ilp s",
        *(("cp-sat s", "cp-sat result", "speed-up") if cpsat else ()),
    ):
        table.add_column(column, justify="right")
    for r in rows:
        value = "infeasible" if r["exact"].value is None else f"{r['exact'].value:.2f}"
        cells = [
            str(r["nodes"]),
            str(r["edges"]),
            str(r["limits"]),
            str(r["horizon"]),
            r["kind"],
            value,
            f"{r['exact_s'] * 1000:.1f}",
            f"{r['ilp_s']:.2f}",
        ]
        if cpsat:
            cells += [f"{r['cpsat_s']:.2f}", _agree(r), f"{r['cpsat_s'] / r['exact_s']:.0f}x"]
        table.add_row(*cells)
    console.print(table)
    exact_ms = [r["exact_s"] * 1000 for r in rows]
    ilp_s = [r["ilp_s"] for r in rows]
    console.print(
        f"graphs: {len(rows)}; exact: median {statistics.median(exact_ms):.1f} ms, max {max(exact_ms):.1f} ms; "
        f"ilp (SCIP): median {statistics.median(ilp_s):.2f} s, max {max(ilp_s):.2f} s; "
        f"exact and ilp agree on every graph (value and feasibility)."
    )
    if cpsat:
        speedups = [r["cpsat_s"] / r["exact_s"] for r in rows]
        verdicts = [_agree(r) for r in rows]
        optimal = sum(v.startswith("optimal") or v == "both infeasible" for v in verdicts)
        console.print(
            f"CP-SAT ({args.cpsat_limit:g} s limit, {args.cpsat_workers} workers): "
            f"median {statistics.median(r['cpsat_s'] for r in rows):.2f} s; "
            f"optimal value on {optimal}/{len(rows)} graphs (proved on {verdicts.count('optimal (proved)')}), "
            f"no solution on {verdicts.count('no solution')}, invalid plan on {verdicts.count('invalid plan')}, "
            f"suboptimal on {sum(v.startswith('suboptimal') for v in verdicts)}."
        )
        console.print(
            f"speed-up of exact over CP-SAT: median {statistics.median(speedups):.0f}x, "
            f"min {min(speedups):.0f}x, max {max(speedups):.0f}x."
        )


if __name__ == "__main__":
    main()
