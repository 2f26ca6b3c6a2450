"""``metaharness optimize``: run or continue a search, with progress, Ctrl-C handling and the final table.

The search itself is ``metaharness.runner.optimize.optimize``; this module turns options into what the run is given
(``metaharness.cli.options.run_setting_options``: the run settings' options, derived from their declarations; the
run resolves them over its stored settings), draws its events and prints where everything landed.
"""

from __future__ import annotations

import _thread
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import typer
from rich.console import Console
from rich.text import Text

from metaharness.candidate import Candidate
from metaharness.cli.browse import RUNS_ROOT, resolve_run
from metaharness.cli.options import (
    dask_scheduler_option,
    data_dir_option,
    iters_option,
    ray_address_option,
    run_setting_options,
)
from metaharness.cli.output import console, shorten
from metaharness.errors import InputError
from metaharness.evaluation.cluster import cluster
from metaharness.evaluation.evaluator import DEFAULT_WORKERS
from metaharness.proposers import proposer_name, renamed_note
from metaharness.runner.events import RunEvents
from metaharness.runner.models import default_models
from metaharness.runner.optimize import optimize, stored_settings
from metaharness.runner.settings import RunSettings, SettingsChange
from metaharness.search.loop import Outcome, StopRequest
from metaharness.search.test_split import TestSplit
from metaharness.store import RunDirectory
from metaharness.tasks import CustomTask, open_task
from metaharness.tasks.custom.spec import flat_settings
from metaharness.tasks.protocol import Task
from metaharness.text import terminal

RUN_OPTIONS = (
    "dataset",
    "proposer",
    "proposer_model",
    "task_model",
    "evaluation",
    "evals_per_iter",
    "proposals",
    "seed",
    "holdout",
    "judge_train",
    "train_folds",
    "val_limit",
    "per_run",
    "per_iteration",
    "max_proposer_failures",
    "seed_names",
    "proposer_options",
    "harness_seconds",
)


@run_setting_options(*RUN_OPTIONS)
def optimize_command(
    settings: SettingsChange,
    task_setting: list[str] = typer.Option(
        [],
        "--task-setting",
        "-T",
        help="KEY=VALUE for a task folder or hf: dataset (e.g. -T data.config=main); repeatable.",
        show_default="the task's own",
    ),
    iters: int = iters_option(12, "Total iterations of the run (a rerun continues up to this)."),
    run_dir: Path | None = typer.Option(
        None, "--run-dir", help="Run directory.", show_default="runs/<dataset>-<proposer>"
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Continue an existing run (its settings are reused).", show_default="off"
    ),
    data_dir: Path | None = data_dir_option(),
    raise_caps: bool = typer.Option(
        False,
        "--raise-caps",
        help="Let this session raise a cap the run was started with (to continue a capped run).",
        show_default="off",
    ),
    workers: int | None = typer.Option(
        None, "--workers", min=1, help="Examples evaluated in parallel.", show_default=str(DEFAULT_WORKERS)
    ),
    test: bool = typer.Option(
        True, "--test/--no-test", help="Evaluate the best and the frontier on the test split at the end."
    ),
    test_limit: str | None = typer.Option(
        None,
        "--test-limit",
        metavar="N|all",
        help="Test examples per candidate at the end, in stages Ctrl-C can stop; a finished run never scores them "
        "again.",
        show_default="as many as the search's validation examples",
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Print what the run would cost (calls, tokens, dollars, minutes, from the seeds' prompts and the model's "
        "measured speed) and stop: nothing is run or written.",
        show_default="off",
    ),
    dask_scheduler: str | None = dask_scheduler_option("Evaluate on this Dask cluster (e.g. tcp://host:8786)."),
    ray_address: str | None = ray_address_option("Evaluate on this Ray cluster (e.g. ray://host:10001, auto)."),
) -> None:
    """Search for a better harness: evaluate the seeds, then propose, evaluate in stages and commit, each iteration.

    A run keeps its settings (settings.json in the run directory): a rerun or --resume reuses them, a flag given
    again must agree with them, and a cap may only be tightened unless --raise-caps. A run of a task folder or hf:
    dataset records where it came from, so --resume needs no --dataset."""
    out = console()
    task, run_dir, stored = _task_and_run(settings.dataset, task_setting, data_dir, run_dir, resume, settings.proposer)
    change = settings.replace(dataset=None, proposer=_renamed_proposer(out, settings.proposer))
    if stored is None:
        _new_run(out, change, task)
    else:
        _note_finished(out, run_dir, iters)
    if test_limit is not None and not test:
        raise InputError("--no-test and --test-limit disagree: give one of them.")
    test_split = TestSplit.parse(test_limit) if test_limit is not None else test
    if dry_run:
        print_estimate(out, run_dir, change, iterations=iters, task=task, data_dir=data_dir, test=test_split)
        return
    stop = StopRequest()
    # Ctrl-C is blocked for every thread and child process started from here on (see StopOnCtrlC).
    with StopOnCtrlC(stop, out), cluster(dask_scheduler, ray_address), ProgressEvents(out) as events:
        outcome = optimize(
            run_dir,
            change,
            iterations=iters,
            task=task,
            data_dir=data_dir,
            workers=workers,
            test=test_split,
            events=events,
            stop=stop,
            raise_caps=raise_caps,
        )
    final_table(out, run_dir, outcome)
    if outcome.stopped and outcome.stopped.startswith("interrupted"):
        raise typer.Exit(130)


def _task_and_run(
    dataset: str | None,
    task_setting: list[str],
    data_dir: Path | None,
    run_dir: Path | None,
    resume: bool,
    proposer: str | None,
) -> tuple[Task | None, Path, RunSettings | None]:
    """The task ``--dataset`` opens (with its ``-T`` settings), the run directory (``--run-dir``, the latest run for a
    bare ``--resume``, else ``runs/<task>-<proposer>``) and the settings it holds (None: no run there yet)."""
    if dataset is None and task_setting:
        raise InputError("-T sets up the task given with --dataset: add --dataset (a resumed run keeps its task's).")
    if resume and run_dir is None:
        run_dir = resolve_run(None)
    task = open_task(dataset, data_dir=data_dir, settings=flat_settings(task_setting)) if dataset else None
    if run_dir is None and task is not None:
        run_dir = RUNS_ROOT / f"{task.name}-{default_models(None, proposer, None).proposer}"
    if run_dir is None:
        raise InputError(
            "Name the task with --dataset (lawbench, symptom2disease, uspto, a task folder or hf:OWNER/NAME), "
            "or --resume a run."
        )
    stored = stored_settings(run_dir)
    if resume and stored is None:
        raise InputError(
            f"--resume: no run at {run_dir}; start one with: metaharness optimize --dataset NAME --run-dir {run_dir}"
        )
    return task, run_dir, stored


def _new_run(out: Console, change: SettingsChange, task: Task | None) -> None:
    """Say what a new run will take that was not given: its models (``default_models``, as the run's settings
    default them, with the line that says why), and the task's notes (a small val split, test leaked, ...)."""
    models = default_models(change.task_model, change.proposer, change.proposer_model)
    if models.notice:
        out.print(f"[yellow]{models.notice}[/]")
    for note in task.notes if isinstance(task, CustomTask) else []:
        out.print(f"[yellow]note: {note}[/]")


def _renamed_proposer(out: Console, proposer: str | None) -> str | None:
    """``--proposer`` by its name now, with a deprecation note for an old name (``metaharness.proposers.RENAMED``;
    the default run directory keeps the name typed, so an old run is found again)."""
    note = renamed_note(proposer) if proposer is not None else None
    if note is None:
        return proposer
    out.print(f"[yellow]note: {note}[/]")
    return proposer_name(proposer) if proposer is not None else None


def _note_finished(out: Console, run_dir: Path, iters: int) -> None:
    """Say so when the run has finished the iterations ``--iters`` asks for (no iteration will run)."""
    done = max(RunDirectory.browse(run_dir).completed_iterations(), default=None)
    if done is not None and done >= iters:
        out.print(
            f"[yellow]note: {run_dir} has finished {done} iterations and --iters {iters} asks for no more, so no "
            f"iteration runs (--iters {done + 1} runs one more; --iters is the run's total)[/]"
        )


def print_estimate(
    out: Console,
    run_dir: Path,
    change: SettingsChange,
    *,
    iterations: int,
    task: Task | None,
    data_dir: Path | None,
    test: bool | TestSplit,
) -> None:
    """``--dry-run``: the estimate of what the run would cost (``metaharness.runner.estimate``), as a table."""
    # Start-up: loaded when the command runs, so that `metaharness --help` stays fast.
    from rich import box
    from rich.table import Table

    from metaharness.runner.estimate import HEADERS, dry_run

    out.print(f"dry run of {run_dir}: measuring what the seeds send (a stand-in model) and the task model's speed")
    started = time.monotonic()
    settings, estimate = dry_run(run_dir, change, iterations=iterations, task=task, data_dir=data_dir, test=test)
    out.print(f"measured in {time.monotonic() - started:.0f} s")
    rates = Table(title="what each seed sends per validation example", box=box.SIMPLE_HEAD)
    for column in ("seed", "model calls", "tokens in", "tokens out at most", "seconds"):
        rates.add_column(column, justify="left" if column == "seed" else "right")
    for rate in estimate.rates:
        seconds = "not timed" if rate.seconds is None else f"{rate.seconds:.1f}"
        rates.add_row(
            rate.name, f"{rate.calls:.1f}", f"{rate.input_tokens:,.0f}", f"{rate.output_tokens:,.0f}", seconds
        )
    out.print(rates)
    title = (
        f"estimate: {settings.dataset}, task model {settings.task_model}, proposer {settings.proposer}, "
        f"{iterations} iterations, evaluation {settings.search.evaluation}"
    )
    table = Table(title=title, box=box.SIMPLE_HEAD)
    for column in HEADERS:
        table.add_column(column, justify="left" if column in ("", "bound") else "right")
    for row in estimate.rows():
        table.add_row(*row)
    out.print(table)
    for note in estimate.notes:
        out.print(f"- {note}")
    out.print("nothing was run or written; the same command without --dry-run starts the run")


class StopOnCtrlC:
    """First Ctrl-C: finish the current step, then stop. Second Ctrl-C: abort at once.

    A terminal's Ctrl-C signals every process of the foreground group: the sandboxed harnesses, git's helper
    processes and model servers would die mid-step. So SIGINT is blocked (a mask that threads and child processes
    inherit) and a watcher thread takes it with ``sigwait``: only this process sees Ctrl-C, and the step under
    way completes normally. Native threads started before (numpy's BLAS pool is started at import) do not block
    it, and the kernel may hand the signal to one of them; then Python runs its handler in the main thread, so the
    handler installed here applies the same rule. Enter before any child process is started.
    """

    def __init__(self, stop: StopRequest, console: Console) -> None:
        self.stop, self.console = stop, console
        self.closed = False
        self.previous: set[int | signal.Signals] = set()
        # What signal.signal returns: the SIGINT handler before this one, restored on exit.
        self.handler: Callable[[int, FrameType | None], object] | int | signal.Handlers | None = None
        self.watcher = threading.Thread(target=self._watch, name="ctrl-c", daemon=True)

    def _ctrl_c(self) -> bool:
        """One Ctrl-C: the first requests a stop (False), the second asks to abort now (True)."""
        if self.stop.requested:
            return True
        self.stop.requested = True
        self.console.print("[yellow]Ctrl-C: finishing the current step, then stopping (press again to abort now)[/]")
        return False

    def _watch(self) -> None:
        while True:
            signal.sigwait({signal.SIGINT})
            if self.closed:
                return
            if self._ctrl_c():
                _thread.interrupt_main()  # KeyboardInterrupt in the main thread: abort now
                return

    def _on_signal(self, signum: int, frame: object) -> None:
        if not self.closed and self._ctrl_c():
            raise KeyboardInterrupt

    def __enter__(self) -> StopOnCtrlC:
        self.previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        self.handler = signal.signal(signal.SIGINT, self._on_signal)
        self.watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed = True
        if self.watcher.is_alive() and self.watcher.ident is not None:
            signal.pthread_kill(self.watcher.ident, signal.SIGINT)
            self.watcher.join(timeout=5)
        signal.signal(signal.SIGINT, self.handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, self.previous)


class ProgressEvents(RunEvents):
    """Draws the run's events: the settings it runs with, then a rich progress line (iteration, candidate, examples
    done, running cost)."""

    def __init__(self, console: Console) -> None:
        # Start-up: loaded when the command runs, so that `metaharness --help` stays fast.
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console
        self.config: RunSettings | None = None
        self.spent: Callable[[], dict[str, float]] = dict
        self.iteration = ""
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[cost]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task = self.progress.add_task("starting", total=None, cost="")

    def __enter__(self) -> ProgressEvents:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    def _cost(self) -> str:
        spent = self.spent()
        return f"${spent.get('usd', 0):.4f}  {spent.get('tokens', 0):,} tok"

    def settings_resolved(self, settings: RunSettings) -> None:
        self.config = settings

    def run_started(self, path: Path, spent: Callable[[], dict[str, float]]) -> None:
        self.spent = spent
        cfg = self.config
        assert cfg is not None  # optimize() resolves the settings before the loop starts
        self.progress.console.print(
            f"run directory [bold]{path}[/] (task {cfg.dataset}, task model {cfg.task_model}, proposer "
            f"{cfg.proposer}, evaluation {cfg.search.evaluation})"
        )

    def note(self, text: str) -> None:
        self.progress.console.print(terminal(text, "yellow"))  # a note may quote a proposer's or a harness's text

    def iteration_started(self, iteration: int, total: int) -> None:
        self.iteration = "seeds" if iteration == 0 else f"iteration {iteration}/{total}"
        self.progress.console.rule(self.iteration)

    def proposing(self, proposer: str) -> None:
        description = f"{self.iteration} proposer {proposer} at work"
        self.progress.reset(self.task, total=None, description=description, cost=self._cost())

    def candidate_started(self, cid: str, split: str, summary: str) -> None:
        self.progress.reset(self.task, total=None, description=f"{self.iteration} {cid} {split}", cost=self._cost())

    def examples_done(self, done: int, total: int) -> None:
        self.progress.update(self.task, completed=done, total=total, cost=self._cost())

    def candidate_finished(self, candidate: Candidate) -> None:
        c = candidate
        # The error and the summary are a harness's and a proposer's text: shown inert (metaharness.text).
        if c.failed:
            error = next(iter((c.error or "").splitlines()), "")
            line = Text.assemble((f"{c.id} failed", "red"), f" ({c.parent or 'root'}): ", terminal(shorten(error, 160)))
        elif c.implemented:
            line = Text(f"{c.id} implemented, not evaluated ({c.parent or 'root'} -> {c.id}) ")
            line.append_text(terminal(shorten(c.summary, 100)))
        else:
            line = Text.assemble(f"{c.id} val ", (c.result(), "bold"), f" ({c.parent or 'root'} -> {c.id}) ")
            line.append_text(terminal(shorten(c.summary, 100)))
        self.progress.console.print(line)


def final_table(console: Console, run_dir: Path, outcome: Outcome) -> None:
    """The best candidate and the Pareto front, then where the summaries are and how to browse with git."""
    # Start-up: loaded when the command runs, so that `metaharness --help` stays fast.
    from rich import box
    from rich.table import Table

    from metaharness.report import RunView

    run = RunDirectory.browse(run_dir)
    view = RunView.load(run)
    shown = {c.id: c for c in [outcome.best, *outcome.frontier] if c is not None}
    rows = []
    for c in shown.values():
        test = view.test.get(c.id)
        rows.append(
            {
                "id": c.id + (" (best)" if outcome.best and c.id == outcome.best.id else ""),
                "iter": str(c.iteration),
                "parent": c.parent or "root",
                "val": c.result(4),
                "test": f"{test.primary:.4f}" if test else "",
                "context": f"{c.cost.get('context_tokens', 0):.0f}",
                "USD": f"{c.cost.get('usd', 0):.4f}",
            }
        )
    # A column with nothing to say (no test result; no dollar spent, as on a local model) is left out.
    columns = [col for col in rows[0] if any(row[col] and row[col] != "0.0000" for row in rows)] if rows else []
    # The numbers keep their width; the summary gets what is left of the line (metaharness.cli.output: a pipe is as
    # wide as the terminal it is read in). Each column takes its widest cell and 3 more (padding and the space
    # between columns), the edges 2.
    used = sum(max(len(col), *(len(row[col]) for row in rows)) + 3 for col in columns) + 2
    room = max(16, min(80, console.width - used - 3))
    table = Table(title=f"{run.path}: best and Pareto front (score vs. context vs. cost)", box=box.SIMPLE_HEAD)
    for col in columns:
        table.add_column(col, no_wrap=True, justify="left" if col in ("id", "parent") else "right")
    table.add_column("summary", no_wrap=True)
    for c, row in zip(shown.values(), rows, strict=True):
        table.add_row(*(row[col] for col in columns), terminal(shorten(c.summary, room)))
    console.print(table)
    console.print(
        f"{len(view.records)} candidates, {outcome.iterations_done} iterations done"
        + (f"; stopped: {outcome.stopped}" if outcome.stopped else "")
    )
    console.print(f"summary: {run.summary_md}  record: {run.summary_path}")
    console.print(
        f"browse: git -C {run.path} log --graph --oneline --branches --tags  (the best, its score and its diff: "
        "git show best)"
    )


def register(app: typer.Typer) -> None:
    app.command("optimize")(optimize_command)
