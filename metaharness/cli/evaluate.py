"""``metaharness eval``: score one harness (a file or a seed name) on a task split, with a table and a trace."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from metaharness.models.local import DEFAULT_TASK_MODEL_SPEC


def _resolve(candidate: str, task: str) -> Path:
    path = Path(candidate)
    if path.suffix == ".py" or path.exists():
        return path
    from metaharness.candidates import seed_path

    return seed_path(task, candidate)


def eval_command(
    candidate: str = typer.Argument(..., help="A harness .py file, or a seed name (zero_shot, few_shot, retrieval)."),
    dataset: str = typer.Option(..., "--dataset", "-d", help="Task: lawbench, symptom2disease or uspto."),
    split: str = typer.Option("val", "--split", help="Split to score: val or test (train also works)."),
    task_model: str = typer.Option(DEFAULT_TASK_MODEL_SPEC, "--task-model", help="Model spec of the task model."),
    limit: int | None = typer.Option(None, "--limit", help="Score only the first N examples."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Folder with the splits (else download)."),
    out: Path | None = typer.Option(None, "--out", help="Folder for summary.json and records.jsonl."),
    workers: int | None = typer.Option(None, "--workers", help="Examples in flight at once (default 8)."),
) -> None:
    """Score a harness on a task split; print the score table and write summary.json + records.jsonl."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from metaharness.errors import InputError
    from metaharness.evaluation import evaluate
    from metaharness.models.spec import parse_spec
    from metaharness.tasks import get_task

    parse_spec(task_model)
    for option, count in (("--limit", limit), ("--workers", workers)):
        if count is not None and count < 1:
            raise InputError(f"{option} must be at least 1, got {count}.")
    console = Console()
    task = get_task(dataset, data_dir=data_dir)
    harness = _resolve(candidate, task.name)
    primary: list[float] = []
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
        transient=True,
    ) as bar:
        tracker = bar.add_task(f"{task.name}/{split} {harness.stem}", total=None, status="")

        def progress(record, done: int, total: int) -> None:
            primary.append(record.scores.get("primary", 0.0))
            bar.update(tracker, completed=done, total=total, status=f"primary {sum(primary) / len(primary):.3f}")

        report = evaluate(harness, task, split, model=task_model, limit=limit, workers=workers, progress=progress)

    table = Table(title=f"{harness} on {task.name}/{split} with {report.model}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in report.scores.items():
        table.add_row(name + (" (paper metric)" if name == "primary" else ""), f"{value:.3f}")
    table.add_row("examples", str(len(report.records)))
    table.add_row("errors", str(report.errors))
    table.add_row("model calls (cached)", f"{int(report.cost['calls'])} ({int(report.cost['cached_calls'])})")
    table.add_row("input / output tokens", f"{int(report.cost['input_tokens'])} / {int(report.cost['output_tokens'])}")
    table.add_row("context tokens per example", f"{report.cost['context_tokens']:.0f}")
    table.add_row("cost (USD)", f"{report.cost['usd']:.4f}")
    table.add_row("wall time (s)", f"{report.seconds:.1f}")
    console.print(table)
    if report.errors:
        first = next(r for r in report.records if r.error)
        reason = (first.error or "").splitlines()[0]
        console.print(f"[yellow]{report.errors} example(s) failed; first ({first.id}):[/] {reason}")
    folder = out or Path("runs") / "eval" / f"{task.name}-{split}-{harness.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    summary, records = report.write(folder)
    console.print(f"summary: {summary}\nrecords: {records}")


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
