"""``metaharness plan``: solve a plan graph file, or serve the planning tool over MCP (stdio)."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import typer

from metaharness.errors import InputError
from metaharness.models import connect
from metaharness.models.local import DEFAULT_TASK_MODEL_SPEC
from metaharness.planner.graph import MAX_FILE_BYTES, PlanGraph, parse_json
from metaharness.planner.path.bounds import TABLE_STEPS_CAP
from metaharness.planner.path.problem import implied_horizon
from metaharness.planner.solve import solve

CLI_SOLVERS = ("exact", "ilp", "auto")


def machine_memory() -> int:
    """Bytes of memory this machine has (physical pages times their size)."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def solver_bytes(graph: PlanGraph) -> tuple[int, int]:
    """About how many bytes the path solvers' tables take for ``graph``, and the steps they span (the horizon, or
    the walk length the budget implies when there is none): discount powers per step, the least-cost rows (nodes x
    steps x (limits + 2)) and the Lagrangian tables, in 8-byte floats."""
    budget = graph.validate()
    steps = graph.horizon if graph.horizon is not None else implied_horizon(graph, budget)
    nodes, columns = len(graph.nodes), len(budget) + 2
    rows = nodes * (min(steps, nodes) + 1) * columns
    tables = columns * (min(steps, TABLE_STEPS_CAP) + 1) * nodes
    return 8 * (steps + 1 + rows + tables), steps


def refuse_oversized(graph: PlanGraph) -> None:
    """``InputError`` (one line, before anything is allocated) when solving ``graph`` would take more than half of
    this machine's memory."""
    if graph.problem == "selection":
        return  # a program graph: one node per program, solved as a selection (no tables over steps)
    (need, steps), have = solver_bytes(graph), machine_memory()
    if need > have // 2:
        allowed = "a horizon of" if graph.horizon is not None else "the walks its budget allows, up to"
        span = f"{allowed} {steps:,} steps"
        raise InputError(
            f"This plan graph is too large to solve here: {len(graph.nodes):,} nodes and {span} need about "
            f"{need / 2**30:,.1f} GiB, more than half of this machine's {have / 2**30:.1f} GiB. Lower the horizon "
            "(or the budget, which bounds the walk), or split the graph."
        )


def register(app: typer.Typer) -> None:
    plan_app = typer.Typer(
        help="Plan under a budget: solve plan graphs, serve the planning tool.", no_args_is_help=True
    )

    @plan_app.command("solve")
    def solve_command(
        file: str = typer.Argument(
            ..., help="Plan graph or program graph JSON file (the format is below); '-' reads stdin."
        ),
        solver: str = typer.Option(
            "exact", "--solver", help="exact, ilp (SCIP) or auto; for a program graph the selection solvers."
        ),
        time_limit: float = typer.Option(
            None, "--time-limit", help="Seconds the ILP may take.", show_default="no limit"
        ),
    ) -> None:
        """Print the best feasible plan (or status "infeasible" and why) as JSON; a program graph (problem
        "selection") prints what to implement and evaluate. Bad files exit with code 2 and say what is wrong.

        In: {"start": ID, "budget": a list of one number >= 0 per limit, "limits": a name per limit (optional),
        "horizon": most steps (optional), "discount": 0 to 1 (optional), "nodes": objects {"id", "reward" (default
        0), "goal", "dead_end"}, "edges": objects {"id", "source", "target", "action", "cost": one number per
        limit}}. Out: {"status", "path" (edge ids), "nodes", "value", "cost", "solver", "seconds"}, and "reason" when
        infeasible. The whole contract, program graphs included, is the "Plan graphs" page of the reference site
        (mkdocs build in the source tree) and the docstrings of metaharness.planner.graph and
        metaharness.planner.selection (python -m pydoc metaharness.planner.graph)."""
        if solver not in CLI_SOLVERS:
            raise InputError(f"Unknown solver {solver!r}; use one of {', '.join(CLI_SOLVERS)}.")
        if file == "-":
            text = sys.stdin.read(MAX_FILE_BYTES + 1)
            if len(text) > MAX_FILE_BYTES:
                raise InputError(f"stdin holds more than the {MAX_FILE_BYTES:,} characters a plan graph may.")
            graph = PlanGraph.from_json(parse_json(text, "stdin"))
        else:
            graph = PlanGraph.load(Path(file))
        refuse_oversized(graph)
        result = solve(graph, solver=solver, time_limit=time_limit)  # type: ignore[arg-type]
        typer.echo(json.dumps(result.to_json(), indent=2))

    @plan_app.command("serve")
    def serve_command(
        model: str = typer.Option(
            None,
            "--model",
            help="Model spec for the planning subagents of `plan` (e.g. openai:MODEL@http://127.0.0.1:8000/v1 or "
            f"{DEFAULT_TASK_MODEL_SPEC}); without it the server answers `solve` and `plan` says it needs a model.",
        ),
        plans: int = typer.Option(4, "--plans", "-m", help="Candidate plans sampled per call (M)."),
        solver: str = typer.Option("exact", "--solver", help="exact, ilp or auto."),
        horizon: int = typer.Option(
            None, "--horizon", help="The most steps a route may take.", show_default="the graph's nodes"
        ),
        max_tokens: int = typer.Option(512, "--max-tokens", help="Answer length cap per subagent call."),
    ) -> None:
        """Run the MCP server (stdio): `plan` (history, goal, remaining budget; per call also plans, horizon,
        solver, tools) and `solve` (a plan graph). The flags are the defaults of `plan`. The tools' arguments and
        results, and how to connect a client, are the "MCP and tools" page of the reference site (mkdocs build in
        the source tree) and the docstring of metaharness.planner.tool."""
        # Start-up: the MCP library loads only for `plan serve`.
        from metaharness.planner.tool import build_mcp_server

        logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per model request would flood stderr

        if solver not in CLI_SOLVERS:
            raise InputError(f"Unknown solver {solver!r}; use one of {', '.join(CLI_SOLVERS)}.")
        if plans < 1 or (horizon is not None and horizon < 1):
            raise InputError("--plans and --horizon must be at least 1.")
        client = connect(model) if model is not None else None
        server = build_mcp_server(client, plans=plans, solver=solver, horizon=horizon, max_tokens=max_tokens)
        logging.getLogger("httpx").setLevel(logging.WARNING)  # again: the MCP SDK may configure logging itself
        server.run("stdio")

    app.add_typer(plan_app, name="plan")
