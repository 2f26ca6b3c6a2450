"""``metaharness bench``: the agent benchmarks.

``sokoban`` and ``blocksworld`` play a fixed instance set with one agent under a step budget
(:mod:`metaharness.agents.puzzle_bench`); ``tools`` executes long tool plans in ToolWorld
(:mod:`metaharness.agents.tool_bench`). Each writes JSON lines as it goes, so a rerun with the same ``--out`` resumes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from metaharness.agents.tool_bench import AGENTS as TOOL_AGENTS
from metaharness.agents.tool_bench import METRICS as TOOL_METRICS
from metaharness.models.local import DEFAULT_TASK_MODEL_SPEC

DEFAULT_SETS = {"sokoban": "sokoban_v1", "blocksworld": "blocksworld_v1"}


def _puzzle_command(env_name: str) -> Callable[..., None]:
    def command(
        agent: str = typer.Option(..., "--agent", help="react | plan-act | tps | tape | random | greedy"),
        model: str | None = typer.Option(
            None, "--model", help="Model spec, e.g. local:smollm2-135m, openai:gpt-4.1-mini."
        ),
        slack: int = typer.Option(2, "--slack", help="Budget B = T* + slack."),
        episodes: int | None = typer.Option(None, "--episodes", help="Instances per bin (default: all)."),
        bins: str | None = typer.Option(None, "--bins", help="Comma-separated bins, e.g. easy,hard (default: all)."),
        oracle_subagents: bool = typer.Option(
            False, "--oracle-subagents", help="Simulate and label with the true environment."
        ),
        m: int = typer.Option(4, "--m", help="Plans sampled per planning call (tps, tape)."),
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
        out: Path | None = typer.Option(None, "--out", help="Append episodes as JSONL (a rerun resumes)."),
    ) -> None:
        from rich.console import Console
        from rich.progress import Progress

        from metaharness.agents.puzzle_bench import MODEL_FREE, AgentSettings, run_bench, summary_table

        client = None
        if model is not None and agent not in MODEL_FREE:
            from metaharness.models import connect

            client = connect(model)
        console = Console(width=max(Console().width, 130))
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
                settings=AgentSettings(oracle_subagents, m, epsilon, seed, free_text, temperature),
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
    out: Path | None = typer.Option(None, help="JSONL of per-task records (default runs/tools/AGENT-seedS.jsonl)."),
) -> None:
    """Execute long tool plans in ToolWorld (1,000+ tools, exact-match success) with one agent."""
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from metaharness.agents.tool_bench import ToolAgentSettings, run_bench

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
    console = Console()
    console.print(table)
    console.print(f"records: {path}  summary: {path.with_suffix('.summary.json')}")


def register(app: typer.Typer) -> None:
    bench = typer.Typer(help="Agent benchmarks: planning under a budget, long tool plans.", no_args_is_help=True)
    for env_name in DEFAULT_SETS:
        bench.command(env_name)(_puzzle_command(env_name))
    bench.command("tools")(tools)
    app.add_typer(bench, name="bench")
