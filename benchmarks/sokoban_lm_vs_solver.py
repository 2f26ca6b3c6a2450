"""The seeds' LM-vs-solver test: the same recorded plan graph given to a model and to the exact solver.

    python benchmarks/sokoban_lm_vs_solver.py [--model local:smollm2-135m] [--graphs 10] [--epsilon 0.5]
        [--graphs-out reports/sokoban/lm_vs_solver_graphs.jsonl] [--out reports/sokoban/lm_vs_solver.json]

For the first ``--graphs`` Sokoban instances (easy and hard bins alternately), one TPS planning call with oracle
subagents and the model-free sampler (M = 4 plans, each action optimal with probability 1 - epsilon) records a plan
graph at the start state with budget T* + 2; states are written as canonical keys to keep the graph small. The
exact solver and the model (``solve(graph, solver="lm")``: the graph JSON in, a list of edge ids out, checked like
any plan) then read the same graph. Counted: graphs that hold a feasible path, and feasible and optimal paths
found by each.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from metaharness.agents.environments.puzzle_instances import load_instance_set, make_env
from metaharness.agents.puzzle_planning import PuzzlePlanner
from metaharness.models import connect
from metaharness.planner.solve import solve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="local:smollm2-135m")
    parser.add_argument("--graphs", type=int, default=10)
    parser.add_argument("--epsilon", type=float, default=0.5)
    parser.add_argument("--slack", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--graphs-out", type=Path, default=None, help="write the recorded graphs as JSONL")
    parser.add_argument("--out", type=Path, default=None, help="write the per-graph results as JSON")
    args = parser.parse_args()

    instance_set = load_instance_set("sokoban_v1")
    easy, hard = instance_set.select(["easy"]), instance_set.select(["hard"])
    chosen = [i for pair in zip(easy, hard, strict=False) for i in pair][: args.graphs]
    model = connect(args.model)
    rows = []
    for instance in chosen:
        env = make_env(instance)
        planner = PuzzlePlanner(env, oracle=True, m=4, epsilon=args.epsilon, seed=args.seed, describe="key")
        graph = planner.plan(env.start, instance.t_star + args.slack, []).graph
        exact = solve(graph, solver="exact")
        lm = solve(graph, solver="lm", model=model)
        rows.append(
            {
                "instance": instance.id,
                "nodes": graph.nx.number_of_nodes(),
                "edges": len(graph.edges),
                "feasible_exists": exact.status == "optimal",
                "exact": {"status": exact.status, "value": exact.value, "path": exact.path},
                "lm": {"status": lm.status, "value": lm.value, "path": lm.path, "note": lm.note},
                "lm_optimal": lm.has_plan and exact.has_plan and lm.value == exact.value,
                "graph": graph.to_json(),
            }
        )
        print(
            f"{instance.id}: graph {rows[-1]['nodes']} nodes / {rows[-1]['edges']} edges; exact {exact.status}; "
            f"lm {lm.status}{' (' + lm.note + ')' if lm.note else ''}",
            flush=True,
        )

    n = len(rows)
    table = Table(title=f"Same recorded graphs, exact solver vs {args.model} ({n} graphs, epsilon {args.epsilon})")
    for column in ("reader", "feasible path found", "optimal path found", "invalid answers"):
        table.add_column(column, justify="left" if column == "reader" else "right")
    exists = sum(r["feasible_exists"] for r in rows)
    table.add_row("graphs holding a feasible path", f"{exists}/{n}", "", "")
    table.add_row(
        "exact solver",
        f"{sum(r['exact']['status'] == 'optimal' for r in rows)}/{n}",
        f"{sum(r['exact']['status'] == 'optimal' for r in rows)}/{n}",
        "0",
    )
    table.add_row(
        args.model,
        f"{sum(r['lm']['status'] == 'feasible' for r in rows)}/{n}",
        f"{sum(r['lm_optimal'] for r in rows)}/{n}",
        f"{sum(r['lm']['status'] == 'invalid' for r in rows)}",
    )
    Console(width=120).print(table)
    if args.graphs_out:
        args.graphs_out.parent.mkdir(parents=True, exist_ok=True)
        args.graphs_out.write_text(
            "".join(json.dumps({"instance": r["instance"], "graph": r["graph"]}) + "\n" for r in rows)
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        summary = [{k: v for k, v in r.items() if k != "graph"} for r in rows]
        args.out.write_text(
            json.dumps({"model": args.model, "epsilon": args.epsilon, "graphs": summary}, indent=1) + "\n"
        )


if __name__ == "__main__":
    main()
