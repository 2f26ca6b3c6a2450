"""``metaharness eval``: score one harness (a file or a seed name) on a task split, with a table and a trace.

A seed name is resolved among the task's seeds (``metaharness.runner.task.seed_sources``: the paper task's
folder, a task folder's ``candidates/``, or the standard seeds written for the task); its source is saved as
``harness.py`` beside the results.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from metaharness.candidates import seed_path
from metaharness.cli.options import data_dir_option, run_setting_options
from metaharness.cli.output import console as output_console
from metaharness.errors import InputError
from metaharness.evaluation.evaluator import DEFAULT_WORKERS
from metaharness.models.local import DEFAULT_TASK_MODEL_SPEC
from metaharness.models.spec import parse_spec
from metaharness.runner.settings import SettingsChange
from metaharness.runner.task import seed_sources
from metaharness.tasks import CustomTask, open_task
from metaharness.tasks.custom.spec import flat_settings
from metaharness.tasks.protocol import Task
from metaharness.text import terminal


def _resolve(candidate: str, task: Task, folder: Path) -> Path:
    """The harness file to evaluate: ``candidate`` itself when it is a file, a paper task's seed file, else the
    task's seed of that name written to ``folder/harness.py``."""
    path = Path(candidate)
    if path.suffix == ".py" or path.exists():
        return path

    if not isinstance(task, CustomTask):
        return seed_path(task.name, candidate)
    source = seed_sources(task, [candidate.removesuffix(".py").replace("-", "_")])
    folder.mkdir(parents=True, exist_ok=True)
    harness = folder / "harness.py"
    harness.write_text(next(iter(source.values())), encoding="utf-8")
    return harness


@run_setting_options(
    "task_model",
    "val_limit",
    "harness_seconds",
    help={"val_limit": "Score only the first N examples of the split."},
)
def eval_command(
    settings: SettingsChange,
    candidate: str = typer.Argument(..., help="A harness .py file, or a seed name (zero_shot, few_shot, retrieval)."),
    dataset: str = typer.Option(
        ..., "--dataset", "-d", help="Task: lawbench, symptom2disease, uspto, a task folder or hf:OWNER/NAME."
    ),
    split: str = typer.Option("val", "--split", help="Split to score: val or test (train also works)."),
    data_dir: Path | None = data_dir_option(),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Folder for summary.json and records.jsonl.",
        show_default="runs/eval/TASK-SPLIT-NAME-TIME",
    ),
    workers: int | None = typer.Option(
        None, "--workers", help="Examples in flight at once.", show_default=str(DEFAULT_WORKERS)
    ),
    task_setting: list[str] = typer.Option(
        [],
        "--task-setting",
        "-T",
        help="KEY=VALUE for a task folder or hf: dataset (e.g. -T data.config=main); repeatable.",
        show_default="the task's own",
    ),
) -> None:
    """Score a harness on a task split; print the score table and write summary.json + records.jsonl."""
    # Start-up: loaded when the command runs, so that `metaharness --help` stays fast.
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from metaharness.evaluation import SandboxLimits, evaluate

    task_model = settings.task_model or DEFAULT_TASK_MODEL_SPEC
    limit, harness_seconds = settings.val_limit, settings.harness_seconds
    parse_spec(task_model)
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be at least 1, got {workers}.")
    console = output_console()
    task = open_task(dataset, data_dir=data_dir, settings=flat_settings(task_setting))
    for note in task.notes if isinstance(task, CustomTask) else []:
        console.print(f"[yellow]note: {note}[/]")
    stem = Path(candidate).stem.replace("-", "_")
    folder = out or Path("runs") / "eval" / f"{task.name}-{split}-{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    harness = _resolve(candidate, task, folder)
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
        tracker = bar.add_task(f"{task.name}/{split} {stem}", total=None, status="")

        def progress(record, done: int, total: int) -> None:
            primary.append(record.scores.get("primary", 0.0))
            bar.update(tracker, completed=done, total=total, status=f"primary {sum(primary) / len(primary):.3f}")

        limits = SandboxLimits() if harness_seconds is None else SandboxLimits(average_seconds=harness_seconds)
        report = evaluate(
            harness, task, split, model=task_model, limit=limit, workers=workers, progress=progress, limits=limits
        )

    summary, records = report.write(folder)  # first: what was measured is kept whatever printing meets
    metric = f"metric {task.metric.name}" if isinstance(task, CustomTask) else "paper metric"
    table = Table(title=f"{harness} on {task.name}/{split} with {report.model}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in report.scores.items():
        table.add_row(name + (f" ({metric})" if name == "primary" else ""), f"{value:.3f}")
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
        reason = next(iter((first.error or "").splitlines()), "")
        # The harness's error text, shown inert (metaharness.text): no markup, no control sequence.
        console.print(f"[yellow]{report.errors} example(s) failed; first ({first.id}):[/]", terminal(reason))
    console.print(f"summary: {summary}\nrecords: {records}")


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
