"""``history``, ``show``, ``diff`` and ``report``: a run's candidates with their scores.

Thin layers over the run's git repository (``docs/run-directory.md``); everything they print can also be had with
plain git, and each command says how. Every command names its run with ``--run-dir`` (as ``optimize`` does); the
older forms (``history RUN``, ``report RUN``, ``show --run RUN``) still work and say so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from metaharness.candidates.protocol import HARNESS_FILE
from metaharness.cli.output import console, shorten
from metaharness.errors import InputError
from metaharness.store import GitStore, RunDirectory
from metaharness.store.git_store import METADATA_FILE, readable_note, result_ref
from metaharness.text import terminal, visible

RUNS_ROOT = Path("runs")
RUN_DIR_HELP = "Run directory, or a run's name under runs/."
RUN_DIR_DEFAULT = "this directory if it is a run, else the latest under runs/"
# What plain git shows of the search: every candidate's commit and every result commit (results/cNNN), with scores.
GIT_TREE = ("log", "--graph", "--oneline", "--branches", "--tags", "--decorate")


def resolve_run(run: str | None) -> Path:
    """A run directory from a path or a name under ``runs/``; by default the current directory when it is a run,
    else the most recently changed run under ``runs/``, named on stderr (with how many runs there are)."""
    if run:
        places = list(dict.fromkeys([Path(run), RUNS_ROOT / run]))
        for path in places:
            if GitStore.exists(path):
                return path
        tried = f"{places[0]}" + (f" (nor {places[1]})" if len(places) > 1 else "")
        raise InputError(f"No run at {tried}; list runs with: ls {RUNS_ROOT}")
    if GitStore.exists(Path(".")):
        return Path(".")
    runs = [p for p in RUNS_ROOT.glob("*") if GitStore.exists(p)] if RUNS_ROOT.is_dir() else []
    if not runs:
        raise InputError(f"No run found in {RUNS_ROOT}/; start one with: metaharness optimize --dataset NAME --iters N")
    latest = max(runs, key=lambda p: (p / "summary.jsonl").stat().st_mtime if (p / "summary.jsonl").exists() else 0)
    others = f", the latest of {len(runs)} runs under {RUNS_ROOT}/" if len(runs) > 1 else ""
    Console(stderr=True, highlight=False).print(
        f"[yellow]run: {latest}{others} (name another with --run-dir)[/]", soft_wrap=True
    )
    return latest


def run_dir_option() -> Any:
    """``--run-dir DIR``: the one way every subcommand names its run."""
    return typer.Option(None, "--run-dir", metavar="DIR", help=RUN_DIR_HELP, show_default=RUN_DIR_DEFAULT)


def named_run(run_dir: str | None, old: str | None, old_form: str) -> Path:
    """The run a browsing command was given: ``--run-dir``, or the older form (``old_form``) with a note."""
    if old is None:
        return resolve_run(run_dir)
    if run_dir is not None and run_dir != old:
        raise InputError(f"Name the run once: --run-dir {run_dir} or {old_form} {old}, not both.")
    path = resolve_run(old)  # a run that is not there is one error line, without the note
    Console(stderr=True, highlight=False).print(
        f"[yellow]note: {old_form} RUN is deprecated; every subcommand takes --run-dir {old}[/]"
    )
    return path


def history(
    old_run: str | None = typer.Argument(None, hidden=True, metavar="RUN"),
    run_dir: str | None = run_dir_option(),
    graph: bool = typer.Option(False, "--graph", help="Also draw the search tree with git log --graph."),
    predicted: bool = typer.Option(
        False, "--predicted", help="Also list the predicted programs of the run's program graph not yet chosen."
    ),
) -> None:
    """List every candidate of a run with its scores (add --graph for the git tree, --predicted for predictions)."""
    # Start-up: loaded when the command runs, so that `metaharness --help` stays fast.
    from rich.table import Table

    from metaharness.report import RunView
    from metaharness.report.view import PREDICTED_HEADERS

    path = named_run(run_dir, old_run, "history")
    rd = RunDirectory.browse(path)
    view = RunView.load(rd)
    out = console()
    if graph:
        out.print(rd.store.repo.git.execute(["git", *GIT_TREE]), markup=False)
    best = view.best
    table = Table(title=f"{path} ({view.config.get('dataset')}, task model {view.config.get('task_model')})")
    for col in ("id", "iter", "parent", "val", "test", "pred", "ctx tok", "USD", "summary / error"):
        table.add_column(col)
    for r in view.records:
        pred = r.prediction.score if r.prediction is not None else None
        table.add_row(
            r.id + (" *" if best and r.id == best.id else ""),
            str(r.iteration),
            r.parent or "root",
            r.result(4),
            f"{view.test[r.id].primary:.4f}" if r.id in view.test else "",
            f"{pred:.3f}" if isinstance(pred, (int, float)) else "",
            f"{r.evaluation.cost.get('context_tokens', 0):.0f}" if r.evaluation else "",
            f"{r.evaluation.cost.get('usd', 0):.4f}" if r.evaluation else "",
            terminal(shorten(r.summary + (f" -- {r.error.splitlines()[0]}" if r.error else ""), 120)),
        )
    out.print(table)
    if predicted:
        waiting = Table(
            title=f"predicted programs not yet chosen ({len(view.predicted_nodes())}, best predicted first)"
        )
        for col in PREDICTED_HEADERS:
            waiting.add_column(col)
        for row in view.predicted_rows():
            waiting.add_row(*row[:-1], terminal(shorten(row[-1], 80)))
        out.print(waiting)
    for note in view.notes():
        out.print(f"[yellow]{note}[/]")
    for cid, sha in rd.store.untagged().items():
        out.print(
            f"[yellow]{cid} is committed ({sha[:10]}) but its tag is missing, so it is not listed; rerunning the run "
            f"restores it (or: git -C {path} tag {cid} {sha[:10]})[/]"
        )
    if not predicted and view.predicted_nodes():
        out.print(f"{len(view.predicted_nodes())} predicted programs not yet chosen (--predicted lists them)")
    legend = ["* best (chosen among the candidates with a result: scored on every search example)"]
    partly = next((r for r in view.records if r.partial and r.evaluation is not None), None)
    if partly is not None and partly.evaluation is not None:
        ev = partly.evaluation
        legend.append(f"{partly.result(4)}: partly scored, on {ev.examples} of {ev.share} so far (no result yet)")
    if any(r.implemented for r in view.records):
        legend.append("implemented: checked, not scored")
    legend.append(f"plain git: git -C {path} {' '.join(GIT_TREE[:-1])}")
    out.print("; ".join(legend))


def _print_code(out: Console, text: str, lexer: str) -> None:
    """Highlighted on a terminal; plain text when piped (no padding, easy to grep). A model wrote the program: its
    control characters are shown as escapes, and no markup or emoji code in it is read (metaharness.text)."""
    # Start-up: loaded when the command runs, so that `metaharness --help` stays fast.
    from rich.syntax import Syntax

    if out.is_terminal:
        out.print(Syntax(visible(text), lexer, line_numbers=lexer == "python"))
    else:
        out.print(terminal(text), soft_wrap=True)


def _deprecated_run_option() -> Any:
    return typer.Option(None, "--run", hidden=True)


def show(
    candidate: str = typer.Argument(..., help="Candidate id, e.g. c004, or 'best'."),
    run_dir: str | None = run_dir_option(),
    source: bool = typer.Option(True, "--source/--no-source", help="Print the harness program."),
    old_run: str | None = _deprecated_run_option(),
) -> None:
    """One candidate: its result, where it came from, its prediction and cost, its traces, and its program."""
    path = named_run(run_dir, old_run, "--run")
    rd = RunDirectory.browse(path)
    best = rd.store.best()
    if candidate == "best" and best is None:
        raise InputError(
            f"No candidate of {path} has a result yet, so there is no best (list them: metaharness history)"
        )
    stored = rd.store.get(best.id if candidate == "best" and best is not None else candidate)
    r = stored.candidate
    out = console()
    state = "partly scored, no result yet" if r.partial else "implemented, not scored" if r.implemented else r.status
    mark = "  (best)" if best is not None and best.id == r.id else ""
    out.print(
        f"[bold]{r.id}[/]  val {r.result(4)}{mark}  ({state}; iteration {r.iteration}, parent {r.parent or 'root'})"
    )
    out.print("summary:", terminal(r.summary))  # a proposer's texts and a harness's error: shown inert
    if r.hypothesis:
        out.print("hypothesis:", terminal(r.hypothesis))
    out.print(terminal(readable_note(stored.note).rstrip()))
    if r.trace:
        out.print(f"trace: {path / r.trace}")
    if source:
        _print_code(out, r.source, "python")
    out.print(
        f"its commit: {stored.commit[:10]} (git -C {path} show {r.id}:{HARNESS_FILE}; its whole prediction: "
        f"git -C {path} show {r.id}:{METADATA_FILE})",
        markup=False,
    )
    if stored.result is not None:
        branch = result_ref(r.id).removeprefix("refs/heads/")
        out.print(
            f"its result: {stored.result[:10]} on {branch} (its score and its diff: git -C {path} show {branch})",
            markup=False,
        )


def diff(
    a: str = typer.Argument(..., help="Candidate id (e.g. the parent)."),
    b: str = typer.Argument(..., help="Candidate id (e.g. the revision)."),
    run_dir: str | None = run_dir_option(),
    old_run: str | None = _deprecated_run_option(),
) -> None:
    """The change between two candidates' programs, with both results."""
    path = named_run(run_dir, old_run, "--run")
    rd = RunDirectory.browse(path)
    ra, rb = rd.store.get(a).candidate, rd.store.get(b).candidate
    out = console()
    delta = f"  ({rb.score - ra.score:+.4f})" if ra.supported and rb.supported else ""
    out.print(f"{ra.id} val {ra.result(4)}  ->  {rb.id} val {rb.result(4)}{delta}")
    out.print(f"{rb.id}:", terminal(rb.summary))
    text = rd.store.repo.git.diff(a, b, "--", HARNESS_FILE)
    _print_code(out, text, "diff") if text else out.print("(the programs are identical)")


def report(
    old_run: str | None = typer.Argument(None, hidden=True, metavar="RUN"),
    run_dir: str | None = run_dir_option(),
    out: Path | None = typer.Option(None, "--out", help="Where to write the page.", show_default="RUN/report.html"),
) -> None:
    """Write a self-contained HTML page with the run's story, plots and tables (opens offline in any browser)."""
    # Start-up: loaded when the command runs, so that `metaharness --help` stays fast.
    from metaharness.report import write_report

    path = write_report(RunDirectory.browse(named_run(run_dir, old_run, "report")), out)
    console().print(f"wrote {path}")


def register(app: typer.Typer) -> None:
    for command in (history, show, diff, report):
        app.command()(command)
