"""``metaharness bench sokoban`` and ``metaharness bench blocksworld``: play a fixed instance set with one agent."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

DEFAULT_SETS = {"sokoban": "sokoban_v1", "blocksworld": "blocksworld_v1"}


def _command(env_name: str):
    def command(
        agent: str = typer.Option(..., "--agent", help="react | plan-act | tps | tape | random | greedy"),
        model: Optional[str] = typer.Option(None, "--model", help="Model spec, e.g. local:smollm2-135m, openai:gpt-4.1-mini."),
        slack: int = typer.Option(2, "--slack", help="Budget B = T* + slack."),
        episodes: Optional[int] = typer.Option(None, "--episodes", help="Instances per bin (default: all)."),
        bins: Optional[str] = typer.Option(None, "--bins", help="Comma-separated bins, e.g. easy,hard (default: all)."),
        oracle_subagents: bool = typer.Option(False, "--oracle-subagents", help="Simulate and label with the true environment."),
        m: int = typer.Option(4, "--m", help="Plans sampled per planning call (tps, tape)."),
        epsilon: float = typer.Option(0.3, "--epsilon", help="Noise of the model-free sampler (tape, oracle subagents, no model)."),
        seed: int = typer.Option(0, "--seed", help="Seed of the random parts (baselines, model-free sampler)."),
        free_text: bool = typer.Option(False, "--free-text", help="ReAct-style agents answer 'Thought: ... Action: ...' text, not JSON."),
        temperature: float = typer.Option(0.0, "--temperature", help="Temperature of the model's plan sampling (tps, tape)."),
        instances: str = typer.Option(DEFAULT_SETS[env_name], "--instances", help="Shipped set name or instance-set .json path."),
        out: Optional[Path] = typer.Option(None, "--out", help="Append episodes as JSONL (a rerun resumes)."),
    ) -> None:
        from rich.console import Console
        from rich.progress import Progress

        from metaharness.agents.puzzle_bench import MODEL_FREE, run_bench, summary_table

        client = None
        if model is not None and agent not in MODEL_FREE:
            from metaharness.models import connect

            client = connect(model)
        console = Console(width=max(Console().width, 130))
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task(f"{env_name} {agent}", total=None)

            def tick(instance, row) -> None:
                progress.update(task, advance=1, description=f"{instance.id}: {'solved' if row['success'] else 'failed'}")

            rows = run_bench(
                instances, agent=agent, model=client, slack=slack, episodes=episodes,
                bins=bins.split(",") if bins else None, oracle=oracle_subagents, m=m, epsilon=epsilon, seed=seed,
                free_text=free_text, temperature=temperature, out=out, on_episode=tick,
            )
        title = f"{env_name} · {agent} · {model or 'no model'} · slack {slack}" + (" · oracle subagents" if oracle_subagents else "")
        console.print(summary_table(rows, title))
        if out is not None:
            console.print(f"episodes: {out}")

    command.__doc__ = f"Play the {env_name} instances with one agent under B = T* + slack; JSONL out, summary table."
    return command


def register(bench: typer.Typer) -> None:
    for env_name in DEFAULT_SETS:
        bench.command(env_name)(_command(env_name))
