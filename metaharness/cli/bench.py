"""``metaharness bench``: the agent benchmarks.

``sokoban`` and ``blocksworld`` play a fixed instance set with one agent under a step budget
(``metaharness.agents.puzzle_bench``); ``tools`` executes long tool plans in ToolWorld
(``metaharness.agents.tool_bench``); ``harness`` runs the harness-optimisation grid of the TPS paper (datasets x
proposers x seeds, ``metaharness.experiment``). Each writes JSON lines as it goes, so a rerun with the same
``--out`` resumes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from metaharness.agents.tool_bench import AGENTS as TOOL_AGENTS
from metaharness.agents.tool_bench import METRICS as TOOL_METRICS
from metaharness.agents.tool_bench import ToolAgentSettings, run_bench
from metaharness.cli.options import (
    dask_scheduler_option,
    data_dir_option,
    iters_option,
    max_cost_option,
    ray_address_option,
    renamed,
    run_setting_options,
)
from metaharness.cli.output import console as output_console
from metaharness.errors import InputError
from metaharness.evaluation.cluster import cluster
from metaharness.models import connect
from metaharness.models.local import DEFAULT_TASK_MODEL_SPEC
from metaharness.runner.settings import SettingsChange
from metaharness.text import terminal

if TYPE_CHECKING:
    from rich.console import Console

    from metaharness.experiment.grid import Cell, CellRecord, ExperimentSpec

DEFAULT_SETS = {"sokoban": "sokoban_v1", "blocksworld": "blocksworld_v1"}


def _puzzle_command(env_name: str) -> Callable[..., None]:
    def command(
        agent: str = typer.Option(..., "--agent", help="react | plan-act | tps | tape | random | greedy"),
        model: str | None = typer.Option(
            None, "--model", help="Model spec, e.g. local:smollm2-135m, openai:gpt-4.1-mini."
        ),
        slack: int = typer.Option(2, "--slack", help="Budget B = T* + slack."),
        episodes: int | None = typer.Option(None, "--episodes", help="Instances per bin.", show_default="all"),
        bins: str | None = typer.Option(
            None, "--bins", help="Comma-separated bins, e.g. easy,hard.", show_default="all"
        ),
        oracle_subagents: bool = typer.Option(
            False, "--oracle-subagents", help="Simulate and label with the true environment."
        ),
        plans: int | None = typer.Option(
            None, "--plans", min=1, help="Plans sampled per planning call (tps, tape).", show_default="4"
        ),
        old_m: int | None = typer.Option(None, "--m", hidden=True),
        epsilon: float = typer.Option(
            0.3, "--epsilon", help="Noise of the model-free sampler (tape, oracle subagents, no model)."
        ),
        seed: int = typer.Option(0, "--seed", help="Seed of the random parts (baselines, model-free sampler)."),
        free_text: bool = typer.Option(
            False, "--free-text", help="ReAct-style agents answer 'Thought: ... Action: ...' text, not JSON."
        ),
        temperature: float = typer.Option(
            0.0, "--temperature", help="Temperature of the model's plan sampling (tps, tape)."
        ),
        instances: str = typer.Option(
            DEFAULT_SETS[env_name], "--instances", help="Shipped set name or instance-set .json path."
        ),
        out: Path | None = typer.Option(
            None, "--out", help="Append episodes as JSONL (a rerun resumes).", show_default="a summary table only"
        ),
    ) -> None:
        # Start-up: loaded when the command runs, so that `metaharness --help` stays fast.
        from rich.progress import Progress

        from metaharness.agents.puzzle_bench import MODEL_FREE, AgentSettings, run_bench, summary_table

        sampled = renamed("--plans", plans, "--m", old_m)
        settings = AgentSettings(
            oracle_subagents, 4 if sampled is None else sampled, epsilon, seed, free_text, temperature
        )
        client = None
        if model is not None and agent not in MODEL_FREE:
            client = connect(model)
        console = output_console()
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task(f"{env_name} {agent}", total=None)

            def tick(instance, row) -> None:
                progress.update(
                    task, advance=1, description=f"{instance.id}: {'solved' if row['success'] else 'failed'}"
                )

            rows = run_bench(
                instances,
                agent=agent,
                model=client,
                settings=settings,
                slack=slack,
                episodes=episodes,
                bins=bins.split(",") if bins else None,
                out=out,
                on_episode=tick,
            )
        title = f"{env_name} · {agent} · {model or 'no model'} · slack {slack}" + (
            " · oracle subagents" if oracle_subagents else ""
        )
        console.print(summary_table(rows, title))
        if out is not None:
            console.print(f"episodes: {out}")

    command.__doc__ = f"Play the {env_name} instances with one agent under B = T* + slack; JSONL out, summary table."
    return command


def tools(
    agent: str = typer.Option(..., help=f"One of: {', '.join(TOOL_AGENTS)}."),
    model: str = typer.Option(
        DEFAULT_TASK_MODEL_SPEC, help="Model spec, e.g. local:smollm2-135m, openai:gpt-4.1-mini."
    ),
    tasks: int = typer.Option(5, help="Number of generated tasks."),
    seed: int = typer.Option(0, help="Seed of the world and the task generator."),
    samples: int = typer.Option(5, help="Votes per step (egb, majority) or sampled paths (self-consistency)."),
    branch_budget: int = typer.Option(3, help="EGB branches, or Reflexion retries after the first run."),
    uncertainty: str = typer.Option("sample", help="EGB/majority estimate: 'sample' (votes) or 'logprobs'."),
    downstream: str = typer.Option(
        "reuse", help="EGB branches: 'reuse' the parent's downstream votes or 'revote' them with the new observations."
    ),
    temperature: float = typer.Option(0.7, help="Sampling temperature of votes and self-consistency paths."),
    min_steps: int = typer.Option(10, help="Minimum plan length."),
    candidates: int = typer.Option(8, help="Tools retrieved per step (BM25) and shown to the model."),
    out: Path | None = typer.Option(
        None, help="JSONL of per-task records.", show_default="runs/tools/AGENT-seedS.jsonl"
    ),
) -> None:
    """Execute long tool plans in ToolWorld (1,000+ tools, exact-match success) with one agent."""
    # Start-up: loaded when the command runs, so that `metaharness --help` stays fast.
    from rich.progress import Progress
    from rich.table import Table

    settings = ToolAgentSettings.checked(samples, branch_budget, uncertainty, downstream, temperature, seed)
    path = out or Path("runs/tools") / f"{agent}-seed{seed}.jsonl"
    with Progress() as progress:
        bar = progress.add_task(f"{agent} on {model}", total=tasks)
        solved: list[bool] = []

        def tick(record: dict[str, Any], done: int, total: int) -> None:
            solved.append(bool(record["success"]))
            description = f"{agent}: {sum(solved)}/{len(solved)} solved in this session"
            progress.update(bar, completed=done, total=total, description=description)

        summary = run_bench(
            agent, model, settings, tasks=tasks, out=path, min_steps=min_steps, candidates=candidates, on_task=tick
        )
    table = Table(title=f"ToolWorld: {agent} on {model} ({summary['tasks']} tasks, seed {seed})")
    for key in TOOL_METRICS:
        table.add_column(key.replace("_", " "), justify="right")
    table.add_row(*(str(summary[k]) for k in TOOL_METRICS))
    console = output_console()
    console.print(table)
    console.print(f"records: {path}  summary: {path.with_suffix('.summary.json')}")


@run_setting_options(
    "task_model",
    "proposer_model",
    "evals_per_iter",
    "val_limit",
    "holdout",
    "proposer_options",
    help={"proposer_options": "KEY=VALUE for every cell's proposer (the seed is set per cell); repeatable."},
    shown={"holdout": "a third of --val-limit, else 0"},
)
def harness(
    settings: SettingsChange,
    out: Path = typer.Option(
        ..., "--out", help="Experiment folder; a rerun resumes it (settings not given are the stored ones)."
    ),
    datasets: str | None = typer.Option(
        None, "--datasets", help="Comma-separated tasks.", show_default="lawbench,symptom2disease,uspto"
    ),
    proposers: str | None = typer.Option(
        None,
        "--proposers",
        help="Comma-separated proposers.",
        show_default="coding,tps; without a proposer model: offline",
    ),
    evaluation: str | None = typer.Option(
        None,
        "--evaluation",
        help="Comma-separated evaluation policies compared at equal spend: the planner's staged evaluation and its "
        "baselines.",
        show_default="planner,greedy,best-of-n,halving,gate",
    ),
    old_arms: str | None = typer.Option(None, "--arms", hidden=True),
    seed: str | None = typer.Option(None, "--seed", help="Comma-separated proposer seeds.", show_default="0,1,2"),
    old_seeds: str | None = typer.Option(None, "--seeds", hidden=True),
    iters: int | None = iters_option(None, "Iterations per run.", "12"),
    max_cost: float | None = max_cost_option(
        "Dollar cap of the whole experiment, split evenly over the cells; the estimate is shown first."
    ),
    jobs: int = typer.Option(1, "--jobs", help="Cells run at once (processes; mind the model endpoints' limits)."),
    data_dir: Path | None = data_dir_option(),
    test: bool | None = typer.Option(
        None, "--test/--no-test", help="Score each run's best on the test split.", show_default="test"
    ),
    dask_scheduler: str | None = dask_scheduler_option("Evaluate every cell's examples on this Dask scheduler."),
    ray_address: str | None = ray_address_option("Evaluate every cell's examples on this Ray cluster."),
) -> None:
    """The harness-optimisation grid: one search per dataset x proposer x seed, then the tables over seeds."""
    # Start-up: loaded when the command runs, so that `metaharness --help` stays fast.
    from metaharness.experiment import run_experiment
    from metaharness.experiment.grid import check_models

    show = output_console()
    arms = renamed("--evaluation", evaluation, "--arms", old_arms)
    seeds = renamed("--seed", seed, "--seeds", old_seeds)
    grid = {"datasets": datasets, "proposers": proposers, "arms": arms, "seeds": seeds, "iterations": iters}
    spec, notice = harness_spec(out, **grid, test=test, max_cost=max_cost, template=settings)
    if jobs < 1:
        raise InputError(f"--jobs takes a number of cells >= 1, got {jobs}.")
    check_models(spec)
    with cluster(dask_scheduler, ray_address):  # reachable (and installed) before any cell starts
        pass
    _show_plan(show, out, spec, notice)
    resume = f"metaharness bench harness --out {out}" + (f" --data-dir {data_dir}" if data_dir else "")
    resume += f" --dask-scheduler {dask_scheduler}" if dask_scheduler else ""
    resume += f" --ray-address {ray_address}" if ray_address else ""
    resume += f" --jobs {jobs}" if jobs > 1 else ""
    lines = GridLines(show)
    try:
        records = run_experiment(
            out,
            spec,
            jobs=jobs,
            progress=lines,
            data_dir=data_dir,
            dask_scheduler=dask_scheduler,
            ray_address=ray_address,
        )
    except KeyboardInterrupt:
        show.print(f"[yellow]Stopped. Finished runs are kept and a started one continues: resume with {resume}[/]")
        raise typer.Exit(130) from None
    if not lines.started:
        show.print(f"All {len(spec.cells())} runs were done already.")
    _show_results(show, out, records, resume)


def _show_results(show: Console, out: Path, records: list[CellRecord], resume: str) -> None:
    """Write the tables and say where they are, which cells stopped at their cap and which failed (exit 1)."""
    # Start-up: loaded when the command runs, so that `metaharness --help` stays fast.
    from metaharness.experiment.page import write_results

    failed = [r for r in records if r.status == "failed"]
    capped = [r for r in records if r.status == "capped"]
    show.print(f"Tables: {write_results(out)} (also results.json, results.html)")
    if capped:
        show.print(
            f"[yellow]{len(capped)} run(s) stopped at their share of --max-cost and are not in the means; "
            f"{resume} --max-cost LARGER continues them.[/]"
        )
    if failed:
        show.print(f"[red]{len(failed)} run(s) failed (see {out / 'cells.jsonl'}); {resume} retries them.[/]")
        raise typer.Exit(1)


def harness_spec(out: Path, **given: Any) -> tuple[ExperimentSpec, str | None]:
    """The grid's spec from the options (``ExperimentSpec.resolve``: a setting not given is the stored
    experiment's, else the paper's), checked against the stored one before anything starts."""
    # Start-up: loaded when the command runs, so that `metaharness --help` stays fast.
    from metaharness.experiment.grid import ExperimentSpec, check_same_spec, stored_spec  # noqa: F811

    given.update(
        datasets=_names("--datasets", given["datasets"]),
        proposers=_names("--proposers", given["proposers"]),
        arms=_names("--evaluation", given["arms"]),
        seeds=_seeds(given["seeds"]),
    )
    spec, notice = ExperimentSpec.resolve(given, stored_spec(out))
    check_same_spec(out, spec)
    return spec, notice


def _show_plan(show: Console, out: Path, spec: ExperimentSpec, notice: str | None) -> None:
    """What the grid will run (and the notice about its settings), with the cost estimate under a cap."""
    # Start-up: loaded when the command runs, so that `metaharness --help` stays fast.
    from metaharness.experiment import estimate_cost
    from metaharness.experiment.grid import stored_spec

    before = (stored_spec(out) or {}).get("iterations")
    if isinstance(before, int) and spec.iterations > before:
        notice = f"{notice}\n" if notice else ""
        notice += f"Extending {out} from {before} to {spec.iterations} iterations: every run continues."
    if notice:
        show.print(f"[yellow]{notice}[/]")
    cells = len(spec.cells())
    arm_text = f" x arms {', '.join(spec.arms)}" if spec.arms else ""
    run = spec.template
    show.print(
        f"Experiment {out}: {cells} runs ({', '.join(spec.datasets)} x {', '.join(spec.proposers)}{arm_text} "
        f"x seeds {', '.join(map(str, spec.seeds))}), {spec.iterations} iterations x {run.evals_per_iter} "
        f"full evaluations' worth each, {run.holdout} validation examples held out to judge, task "
        f"model {run.task_model}, proposer model {run.proposer_model or 'none'}."
    )
    if spec.max_cost is not None:
        estimate = estimate_cost(spec)
        guess = "unknown (a model without a price)" if estimate.total is None else f"~${estimate.total:,.2f}"
        show.print(
            f"Estimated cost: {guess} (rough, within a factor of several); cap ${spec.max_cost:,.2f} "
            f"(${spec.max_cost / cells:,.2f} per run)."
        )
        if estimate.total is not None and estimate.total > spec.max_cost:
            show.print("[yellow]The estimate is above the cap: runs stop cleanly when they reach their share.[/]")


class GridLines:
    """The grid's progress as one line per cell start and finish, with the count of finished runs."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = 0

    def cell_started(self, cell: Cell, done: int, total: int) -> None:
        self.started += 1
        self.console.print(f"[{done}/{total} done] started {cell.name}")

    def cell_finished(self, cell: Cell, record: CellRecord, done: int, total: int) -> None:
        took = f"in {record.seconds:.0f} s"
        if record.status == "done":
            self.console.print(f"[{done}/{total} done] [green]finished[/] {cell.name} {took}")
        elif record.status == "capped":
            stopped = terminal(str(record.stopped or "its cap"))  # a run's own words may quote a harness
            self.console.print(f"[{done}/{total} done] [yellow]capped[/] {cell.name} {took}:", stopped)
        else:
            error = terminal(str(record.error))
            self.console.print(f"[{done}/{total} done] [red]failed[/] {cell.name} {took}:", error)


def _names(option: str, text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise InputError(f"{option} takes comma-separated names, got '{text}'.")
    return names


def _seeds(text: str | None) -> list[int] | None:
    names = _names("--seed", text)
    if names is None:
        return None
    if not all(n.isdigit() for n in names):
        raise InputError(f"--seed takes comma-separated integers >= 0 (e.g. 0,1,2), got '{text}'.")
    return [int(n) for n in names]


def register(app: typer.Typer) -> None:
    bench = typer.Typer(
        help="Benchmarks: agents planning under a budget, long tool plans, the harness-optimisation grid.",
        no_args_is_help=True,
    )
    for env_name in DEFAULT_SETS:
        bench.command(env_name)(_puzzle_command(env_name))
    bench.command("tools")(tools)
    bench.command("harness")(harness)
    app.add_typer(bench, name="bench")
