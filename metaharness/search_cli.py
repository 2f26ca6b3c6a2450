"""Commands over a search: ``optimize`` runs it; ``history``, ``show``, ``diff`` and ``report`` browse it.

The browsing commands are thin layers over the run's git repository that add the scores (see
:mod:`metaharness.store`); everything they print can also be had with plain git.
"""

from __future__ import annotations

import _thread
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Optional

import typer

from metaharness.errors import InputError

RUNS_ROOT = Path("runs")
DEFAULT_EVALS_PER_ITER = 3
# Hosted proposer models used when the matching key is set and no --proposer-model is given.
HOSTED_PROPOSERS = (("ANTHROPIC_API_KEY", "anthropic:claude-sonnet-4-5"), ("OPENAI_API_KEY", "openai:gpt-4.1"))


def _console():
    from rich.console import Console

    return Console(highlight=False)


def resolve_run(run: str | None) -> Path:
    """A run directory from a path or a name under ``runs/``; by default the current directory when it is a run,
    else the most recently changed run under ``runs/``."""
    from metaharness.store import CandidateStore

    if run:
        for path in (Path(run), RUNS_ROOT / run):
            if CandidateStore.exists(path):
                return path
        raise InputError(f"No run at {run} (nor {RUNS_ROOT / run}); list runs with: ls {RUNS_ROOT}")
    if CandidateStore.exists(Path(".")):
        return Path(".")
    runs = [p for p in RUNS_ROOT.glob("*") if CandidateStore.exists(p)] if RUNS_ROOT.is_dir() else []
    if not runs:
        raise InputError(f"No run found in {RUNS_ROOT}/; start one with: metaharness optimize --dataset NAME --iters N")
    return max(runs, key=lambda p: (p / "summary.jsonl").stat().st_mtime if (p / "summary.jsonl").exists() else 0)


def _default_models(task_model: str | None, proposer: str | None, proposer_model: str | None) -> tuple[str, str, str | None, str | None]:
    """(task model, proposer, proposer model, a line explaining the defaults or None)."""
    from metaharness.models import DEFAULT_TASK_MODEL_SPEC
    from metaharness.proposers import PROPOSER_NAMES

    notice = None
    hosted = "tps" in PROPOSER_NAMES  # the hosted-model proposers, once installed
    if proposer_model is None and hosted and proposer in (None, "base", "tps"):
        proposer_model = next((spec for key, spec in HOSTED_PROPOSERS if os.environ.get(key)), None)
    if proposer is None:
        proposer = "tps" if proposer_model and hosted else "offline"
    if task_model is None:
        task_model = DEFAULT_TASK_MODEL_SPEC
        if proposer == "offline":
            has_key = any(os.environ.get(key) for key, _ in HOSTED_PROPOSERS)
            notice = (
                f"{'No hosted proposer selected' if has_key else 'No API key configured'}: using the embedded task "
                f"model {DEFAULT_TASK_MODEL_SPEC} and the offline proposer. "
                "For hosted models set ANTHROPIC_API_KEY or OPENAI_API_KEY, or pass --task-model openai:MODEL@URL "
                "--proposer tps --proposer-model anthropic:claude-sonnet-4-5."
            )
    return task_model, proposer, proposer_model, notice


def optimize(
    dataset: Optional[str] = typer.Option(None, "--dataset", help="Task to optimise: lawbench, symptom2disease or uspto."),
    iters: int = typer.Option(12, "--iters", min=0, help="Total iterations of the run (a rerun continues up to this)."),
    proposer: Optional[str] = typer.Option(None, "--proposer", help="offline (default without a key), base, tps, or a baseline."),
    proposer_model: Optional[str] = typer.Option(None, "--proposer-model", help="Model spec of the proposer, e.g. anthropic:claude-sonnet-4-5."),
    task_model: Optional[str] = typer.Option(None, "--task-model", help="Model spec the harnesses call (default: the embedded local model)."),
    evals_per_iter: Optional[int] = typer.Option(
        None, "--evals-per-iter", min=1, help=f"Candidate evaluations per iteration [default: {DEFAULT_EVALS_PER_ITER}, or the run's]."
    ),
    run_dir: Optional[Path] = typer.Option(None, "--run-dir", help="Run directory (default runs/<dataset>-<proposer>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue an existing run (its settings are reused)."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Folder with the task's splits (else downloaded)."),
    val_limit: Optional[int] = typer.Option(None, "--val-limit", min=1, help="Evaluate on the first N validation examples only."),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", min=0.0, help="Stop cleanly once this many USD are spent (whole run)."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Examples evaluated in parallel."),
    test: bool = typer.Option(True, "--test/--no-test", help="Evaluate the best and the frontier on the test split at the end."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Comma-separated seed harnesses to start from (default: all of the task's)."),
    proposer_option: list[str] = typer.Option(
        [], "--proposer-option", "-P", help="KEY=VALUE passed to the proposer (e.g. probe_size=4, plans=4); repeatable."
    ),
) -> None:
    """Search for a better harness: evaluate the seeds, then propose, evaluate and commit candidates each iteration."""
    from metaharness import __version__
    from metaharness.store import RunDirectory

    console = _console()
    if resume and run_dir is None:
        run_dir = resolve_run(None)
    if run_dir is None and dataset is not None:
        run_dir = RUNS_ROOT / f"{dataset}-{_default_models(task_model, proposer, proposer_model)[1]}"
    stored: dict = {}
    if run_dir is not None and (run_dir / ".git").exists():
        stored = RunDirectory.browse(run_dir).store.config()
    elif resume:
        raise InputError(f"--resume: no run at {run_dir}; start one with: metaharness optimize --dataset NAME --run-dir {run_dir}")
    dataset = dataset or stored.get("dataset")
    if dataset is None:
        raise InputError("Name the task with --dataset (lawbench, symptom2disease or uspto), or --resume a run.")
    task_model, proposer, proposer_model, notice = _default_models(
        task_model or stored.get("task_model"), proposer or stored.get("proposer"), proposer_model or stored.get("proposer_model")
    )
    if stored and val_limit is None:
        val_limit = stored.get("val_limit")
    evals_per_iter = evals_per_iter or stored.get("evals_per_iter") or DEFAULT_EVALS_PER_ITER
    if notice:
        console.print(f"[yellow]{notice}[/]")
    config = {
        "dataset": dataset,
        "task_model": task_model,
        "proposer": proposer,
        "proposer_model": proposer_model,
        "evals_per_iter": evals_per_iter,
        "val_limit": val_limit,
        "metaharness": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    options = _parse_options(proposer_option)
    _run_search(
        console, run_dir, config, iters=iters, data_dir=data_dir, max_cost=max_cost, workers=workers, test=test,
        options=options, seed_names=[s.strip() for s in seeds.split(",") if s.strip()] if seeds else None,
    )


def _parse_options(pairs: list[str]) -> dict[str, object]:
    """``KEY=VALUE`` strings to a dict; values are JSON when they parse (numbers, booleans), else text."""
    options: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--proposer-option takes KEY=VALUE (e.g. probe_size=4), got '{pair}'.")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def _seed_files(dataset: str, names: list[str] | None) -> list[Path]:
    """The task's seed harnesses (``candidates/<task>/*.py``), or the named ones."""
    from metaharness.candidates import ROOT

    available = {p.stem: p for p in sorted((ROOT / dataset).glob("*.py"))}
    if not available:
        raise InputError(f"No seed harnesses for {dataset} in {ROOT / dataset}.")
    unknown = [n for n in names or [] if n not in available]
    if unknown:
        raise InputError(f"Unknown seed(s) {', '.join(unknown)} for {dataset}: choose from {', '.join(available)}.")
    return [available[n] for n in names] if names else list(available.values())


def _run_search(
    console, run_dir: Path, config: dict, *, iters: int, data_dir, max_cost, workers, test: bool, options: dict,
    seed_names: list[str] | None,
) -> None:
    from metaharness.loop import LoopSettings, Optimizer, Seed, StopRequest, TaskEvaluator
    from metaharness.models import Ledger, connect
    from metaharness.proposers import get_proposer
    from metaharness.store import RunDirectory
    from metaharness.tasks import get_task

    stop = StopRequest()
    # Block Ctrl-C for every thread and child process started from here on (see _stop_on_ctrl_c).
    with _stop_on_ctrl_c(stop, console):
        task = get_task(config["dataset"], data_dir=data_dir)
        seeds = [Seed(p.stem, p.read_text(encoding="utf-8")) for p in _seed_files(config["dataset"], seed_names)]
        run = RunDirectory.open(run_dir, config)
        try:
            previous = _spent_before(run)
            ledger = Ledger(max_dollars=None if max_cost is None else max(0.0, max_cost - previous.get("usd", 0.0)))
            task_client = connect(config["task_model"], ledger=ledger)
            proposer_client = connect(config["proposer_model"], ledger=ledger) if config.get("proposer_model") else None
            evaluator = TaskEvaluator(task, task_client, val_limit=config["val_limit"], workers=workers)
            proposer = get_proposer(
                config["proposer"], **{"workers": workers, **options}, task=task, task_model=task_client,
                model=proposer_client, run_dir=run_dir, data_dir=data_dir,
            )

            def spent() -> dict[str, float]:
                return {
                    "usd": round(previous.get("usd", 0.0) + ledger.dollars, 6),
                    "tokens": previous.get("tokens", 0) + ledger.tokens,
                }

            def budget() -> dict[str, float]:
                return {} if max_cost is None else {"usd": max(0.0, max_cost - spent()["usd"])}

            run.log({"type": "start", "config": config, "iterations": iters, "max_cost": max_cost,
                     "proposer_options": options, "spent_before": previous})
            console.print(
                f"run directory [bold]{run_dir}[/] (task {config['dataset']}, task model {config['task_model']}, "
                f"proposer {config['proposer']})"
            )
            settings = LoopSettings(task=config["dataset"], iterations=iters, evals_per_iter=config["evals_per_iter"], test=test)
            with _ProgressEvents(console, spent) as events:
                optimizer = Optimizer(run, settings, proposer, evaluator, seeds, events=events, stop=stop, budget=budget, spent=spent)
                outcome = optimizer.run()
            _final_table(console, run, outcome)
        finally:
            run.close()
    if outcome.stopped and outcome.stopped.startswith("interrupted"):
        raise typer.Exit(130)


def _spent_before(run) -> dict[str, float]:
    """What earlier sessions of this run spent (the last ``spent`` the log recorded)."""
    for entry in reversed(run.log_records()):
        if isinstance(entry.get("spent"), dict):
            return entry["spent"]
    return {}


class _stop_on_ctrl_c:
    """First Ctrl-C: finish the current step, then stop. Second Ctrl-C: abort at once.

    A terminal's Ctrl-C signals every process of the foreground group: the sandboxed harnesses, git's helper
    processes and model servers would die mid-step. So SIGINT is blocked (a mask that threads and child processes
    inherit) and a watcher thread takes it with ``sigwait``: only this process sees Ctrl-C, and the step under
    way completes normally. Enter before any thread or child process is started.
    """

    def __init__(self, stop, console) -> None:
        self.stop, self.console = stop, console
        self.closed = False

    def _watch(self) -> None:
        while True:
            signal.sigwait({signal.SIGINT})
            if self.closed:
                return
            if self.stop.requested:
                _thread.interrupt_main()  # KeyboardInterrupt in the main thread: abort now
                return
            self.stop.requested = True
            self.console.print("[yellow]Ctrl-C: finishing the current step, then stopping (press again to abort now)[/]")

    def __enter__(self):
        self.previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        self.watcher = threading.Thread(target=self._watch, name="ctrl-c", daemon=True)
        self.watcher.start()
        return self

    def __exit__(self, *exc) -> None:
        self.closed = True
        if self.watcher.is_alive():
            signal.pthread_kill(self.watcher.ident, signal.SIGINT)
            self.watcher.join(timeout=5)
        signal.pthread_sigmask(signal.SIG_SETMASK, self.previous)


class _ProgressEvents:
    """Draws the loop's events: a rich progress line (iteration, candidate, examples done, running cost)."""

    def __init__(self, console, spent) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console
        self.spent = spent
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
        self.task = None

    def __enter__(self):
        self.progress.__enter__()
        self.task = self.progress.add_task("starting", total=None, cost="")
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def _cost(self) -> str:
        spent = self.spent()
        return f"${spent.get('usd', 0):.4f}  {spent.get('tokens', 0):,} tok"

    def note(self, text: str) -> None:
        self.progress.console.print(f"[yellow]{text}[/]")

    def iteration_started(self, iteration: int, total: int) -> None:
        self.iteration = "seeds" if iteration == 0 else f"iteration {iteration}/{total}"
        self.progress.console.rule(self.iteration)

    def proposing(self, proposer: str) -> None:
        self.progress.reset(self.task, total=None, description=f"{self.iteration} proposer {proposer} at work", cost=self._cost())

    def candidate_started(self, cid: str, split: str, summary: str) -> None:
        self.progress.reset(self.task, total=None, description=f"{self.iteration} {cid} {split}", cost=self._cost())

    def examples_done(self, done: int, total: int) -> None:
        self.progress.update(self.task, completed=done, total=total, cost=self._cost())

    def candidate_finished(self, record) -> None:
        if record.failed:
            line = f"[red]{record.id} failed[/] ({record.parent or 'root'}): {(record.error or '').splitlines()[0][:160]}"
        else:
            line = f"{record.id} val [bold]{record.score:.3f}[/] ({record.parent or 'root'} -> {record.id}) {record.summary[:100]}"
        self.progress.console.print(line)


def _final_table(console, run, outcome) -> None:
    from rich.table import Table

    from metaharness.report import RunView

    view = RunView.load(run)
    table = Table(title=f"{run.path}: best and Pareto front (score vs. context vs. cost)")
    for col in ("id", "iteration", "parent", "val", "test", "context tok", "USD", "summary"):
        table.add_column(col)
    shown = {r.id: r for r in [outcome.best, *outcome.frontier] if r is not None}
    for record in shown.values():
        test = view.test.get(record.id)
        table.add_row(
            record.id + (" (best)" if outcome.best and record.id == outcome.best.id else ""),
            str(record.iteration),
            record.parent or "root",
            f"{record.score:.4f}",
            f"{test.primary:.4f}" if test else "",
            f"{record.evaluation.cost.get('context_tokens', 0):.0f}",
            f"{record.evaluation.cost.get('usd', 0):.4f}",
            record.summary[:60],
        )
    console.print(table)
    console.print(
        f"{len(view.records)} candidates, {outcome.iterations_done} iterations done"
        + (f"; stopped: {outcome.stopped}" if outcome.stopped else "")
    )
    console.print(f"summary: {run.summary_md}  record: {run.summary_path}")
    console.print(f"browse: git -C {run.path} log --graph --all --oneline --notes=metaharness")


def _score_text(record) -> str:
    return "failed" if record.failed else f"{record.score:.4f}"


def history(
    run: Optional[str] = typer.Argument(None, help="Run directory or name under runs/ (default: the latest)."),
    graph: bool = typer.Option(False, "--graph", help="Also draw the search tree with git log --graph."),
) -> None:
    """List every candidate of a run with its scores (add --graph for the git tree)."""
    from rich.table import Table

    from metaharness.report import RunView
    from metaharness.store import NOTES_REF, RunDirectory

    path = resolve_run(run)
    rd = RunDirectory.browse(path)
    view = RunView.load(rd)
    console = _console()
    if graph:
        console.print(
            rd.store.repo.git.log("--graph", "--oneline", "--branches", "--tags", f"--notes={NOTES_REF}", "--decorate"),
            markup=False,
        )
    best = view.best
    table = Table(title=f"{path} ({view.config.get('dataset')}, task model {view.config.get('task_model')})")
    for col in ("id", "iter", "parent", "val", "test", "pred", "ctx tok", "USD", "summary / error"):
        table.add_column(col)
    for r in view.records:
        pred = r.prediction.get("score") if r.prediction else None
        table.add_row(
            r.id + (" *" if best and r.id == best.id else ""),
            str(r.iteration),
            r.parent or "root",
            _score_text(r),
            f"{view.test[r.id].primary:.4f}" if r.id in view.test else "",
            f"{pred:.3f}" if isinstance(pred, (int, float)) else "",
            f"{r.evaluation.cost.get('context_tokens', 0):.0f}" if r.evaluation else "",
            f"{r.evaluation.cost.get('usd', 0):.4f}" if r.evaluation else "",
            (r.summary + (f" -- {r.error.splitlines()[0]}" if r.error else ""))[:90],
        )
    console.print(table)
    for note in view.notes():
        console.print(f"[yellow]{note}[/]")
    console.print(f"* best. Plain git: git -C {path} log --graph --all --oneline --notes=metaharness")


def _print_code(console, text: str, lexer: str) -> None:
    """Highlighted on a terminal; plain text when piped (no padding, easy to grep)."""
    from rich.syntax import Syntax

    if console.is_terminal:
        console.print(Syntax(text, lexer, line_numbers=lexer == "python"))
    else:
        console.print(text, markup=False, highlight=False, soft_wrap=True)


def show(
    candidate: str = typer.Argument(..., help="Candidate id, e.g. c004, or 'best'."),
    run: Optional[str] = typer.Option(None, "--run", help="Run directory or name under runs/ (default: the latest)."),
    source: bool = typer.Option(True, "--source/--no-source", help="Print the harness program."),
) -> None:
    """One candidate: where it came from, its scores and cost, its traces, and its program."""
    from metaharness.proposal import HARNESS_FILE
    from metaharness.store import RunDirectory

    path = resolve_run(run)
    rd = RunDirectory.browse(path)
    cid = rd.store.best().id if candidate == "best" and rd.store.best() else candidate
    stored = rd.store.get(cid)
    r = stored.record
    console = _console()
    console.print(f"[bold]{r.id}[/]  commit {stored.commit[:10]}  iteration {r.iteration}  parent {r.parent or 'root'}  {r.status}")
    console.print(f"summary: {r.summary}")
    if r.hypothesis:
        console.print(f"hypothesis: {r.hypothesis}")
    if r.prediction:
        console.print(f"prediction: {json.dumps(r.prediction, sort_keys=True)}", markup=False)
    console.print(stored.note.rstrip(), markup=False)
    if r.trace:
        console.print(f"trace: {path / r.trace}")
    if source:
        _print_code(console, r.source, "python")
    console.print(f"plain git: git -C {path} show {r.id}:{HARNESS_FILE}")


def diff(
    a: str = typer.Argument(..., help="Candidate id (e.g. the parent)."),
    b: str = typer.Argument(..., help="Candidate id (e.g. the revision)."),
    run: Optional[str] = typer.Option(None, "--run", help="Run directory or name under runs/ (default: the latest)."),
) -> None:
    """The change between two candidates' programs, with both scores."""
    from metaharness.proposal import HARNESS_FILE
    from metaharness.store import RunDirectory

    path = resolve_run(run)
    rd = RunDirectory.browse(path)
    ra, rb = rd.store.get(a).record, rd.store.get(b).record
    console = _console()
    delta = "" if ra.failed or rb.failed else f"  ({rb.score - ra.score:+.4f})"
    console.print(f"{ra.id} val {_score_text(ra)}  ->  {rb.id} val {_score_text(rb)}{delta}")
    console.print(f"{rb.id}: {rb.summary}")
    text = rd.store.repo.git.diff(a, b, "--", HARNESS_FILE)
    _print_code(console, text, "diff") if text else console.print("(the programs are identical)")


def report(
    run: Optional[str] = typer.Argument(None, help="Run directory or name under runs/ (default: the latest)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where to write the page (default RUN/report.html)."),
) -> None:
    """Write a self-contained HTML page with the run's plots and tables (opens offline in any browser)."""
    from metaharness.report import write_report
    from metaharness.store import RunDirectory

    path = write_report(RunDirectory.browse(resolve_run(run)), out)
    _console().print(f"wrote {path}")


def register(app: typer.Typer) -> None:
    app.command()(optimize)
    app.command()(history)
    app.command()(show)
    app.command()(diff)
    app.command()(report)
