"""``history``, ``show``, ``diff`` and ``report``: a run's candidates with their scores.

Thin layers over the run's git repository (``docs/run-directory.md``); everything they print can also be had with
plain git, and each command says how.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from metaharness.candidate import Candidate
from metaharness.candidates.protocol import HARNESS_FILE
from metaharness.errors import InputError
from metaharness.store import NOTES_REF, GitStore, RunDirectory
from metaharness.store.git_store import readable_note

RUNS_ROOT = Path("runs")


def console() -> Console:
    return Console(highlight=False)


def resolve_run(run: str | None) -> Path:
    """A run directory from a path or a name under ``runs/``; by default the current directory when it is a run,
    else the most recently changed run under ``runs/``."""
    if run:
        for path in (Path(run), RUNS_ROOT / run):
            if GitStore.exists(path):
                return path
        raise InputError(f"No run at {run} (nor {RUNS_ROOT / run}); list runs with: ls {RUNS_ROOT}")
    if GitStore.exists(Path(".")):
        return Path(".")
    runs = [p for p in RUNS_ROOT.glob("*") if GitStore.exists(p)] if RUNS_ROOT.is_dir() else []
    if not runs:
        raise InputError(f"No run found in {RUNS_ROOT}/; start one with: metaharness optimize --dataset NAME --iters N")
    return max(runs, key=lambda p: (p / "summary.jsonl").stat().st_mtime if (p / "summary.jsonl").exists() else 0)


def _score_text(candidate: Candidate) -> str:
    """``0.4000``; a partly scored candidate also says on how many of its share (``0.5000 (8/25)``)."""
    if candidate.failed or candidate.implemented or candidate.evaluation is None:
        return "failed" if candidate.failed else "implemented"
    ev = candidate.evaluation
    return f"{candidate.score:.4f}" + (f" ({ev.examples}/{ev.share})" if not ev.supported else "")


def history(
    run: str | None = typer.Argument(None, help="Run directory or name under runs/ (default: the latest)."),
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

    path = resolve_run(run)
    rd = RunDirectory.browse(path)
    view = RunView.load(rd)
    out = console()
    if graph:
        out.print(
            rd.store.repo.git.log("--graph", "--oneline", "--branches", "--tags", f"--notes={NOTES_REF}", "--decorate"),
            markup=False,
        )
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
            _score_text(r),
            f"{view.test[r.id].primary:.4f}" if r.id in view.test else "",
            f"{pred:.3f}" if isinstance(pred, (int, float)) else "",
            f"{r.evaluation.cost.get('context_tokens', 0):.0f}" if r.evaluation else "",
            f"{r.evaluation.cost.get('usd', 0):.4f}" if r.evaluation else "",
            (r.summary + (f" -- {r.error.splitlines()[0]}" if r.error else ""))[:90],
        )
    out.print(table)
    if predicted:
        waiting = Table(
            title=f"predicted programs not yet chosen ({len(view.predicted_nodes())}, best predicted first)"
        )
        for col in PREDICTED_HEADERS:
            waiting.add_column(col)
        for row in view.predicted_rows():
            waiting.add_row(*row[:-1], row[-1][:60])
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
    out.print(
        "* best (chosen among candidates scored on every search example); implemented: checked, not scored yet; "
        f"0.5000 (8/25): partly scored, on 8 of 25. Plain git: git -C {path} log --graph --all --notes=metaharness"
    )


def _print_code(out: Console, text: str, lexer: str) -> None:
    """Highlighted on a terminal; plain text when piped (no padding, easy to grep)."""
    # Start-up: loaded when the command runs, so that `metaharness --help` stays fast.
    from rich.syntax import Syntax

    if out.is_terminal:
        out.print(Syntax(text, lexer, line_numbers=lexer == "python"))
    else:
        out.print(text, markup=False, highlight=False, soft_wrap=True)


def show(
    candidate: str = typer.Argument(..., help="Candidate id, e.g. c004, or 'best'."),
    run: str | None = typer.Option(None, "--run", help="Run directory or name under runs/ (default: the latest)."),
    source: bool = typer.Option(True, "--source/--no-source", help="Print the harness program."),
) -> None:
    """One candidate: where it came from, its scores and cost, its traces, and its program."""
    path = resolve_run(run)
    rd = RunDirectory.browse(path)
    best = rd.store.best()
    cid = best.id if candidate == "best" and best is not None else candidate
    stored = rd.store.get(cid)
    r = stored.candidate
    out = console()
    out.print(
        f"[bold]{r.id}[/]  commit {stored.commit[:10]}  iteration {r.iteration}  parent {r.parent or 'root'}  "
        f"{r.status}"
    )
    out.print(f"summary: {r.summary}")
    if r.hypothesis:
        out.print(f"hypothesis: {r.hypothesis}")
    if r.prediction is not None and r.prediction.to_json():
        out.print(f"prediction: {json.dumps(r.prediction.to_json(), sort_keys=True)}", markup=False)
    out.print(readable_note(stored.note).rstrip(), markup=False)
    if r.trace:
        out.print(f"trace: {path / r.trace}")
    if source:
        _print_code(out, r.source, "python")
    out.print(f"plain git: git -C {path} show {r.id}:{HARNESS_FILE}")


def diff(
    a: str = typer.Argument(..., help="Candidate id (e.g. the parent)."),
    b: str = typer.Argument(..., help="Candidate id (e.g. the revision)."),
    run: str | None = typer.Option(None, "--run", help="Run directory or name under runs/ (default: the latest)."),
) -> None:
    """The change between two candidates' programs, with both scores."""
    path = resolve_run(run)
    rd = RunDirectory.browse(path)
    ra, rb = rd.store.get(a).candidate, rd.store.get(b).candidate
    out = console()
    delta = f"  ({rb.score - ra.score:+.4f})" if ra.evaluated and rb.evaluated else ""
    out.print(f"{ra.id} val {_score_text(ra)}  ->  {rb.id} val {_score_text(rb)}{delta}")
    out.print(f"{rb.id}: {rb.summary}")
    text = rd.store.repo.git.diff(a, b, "--", HARNESS_FILE)
    _print_code(out, text, "diff") if text else out.print("(the programs are identical)")


def report(
    run: str | None = typer.Argument(None, help="Run directory or name under runs/ (default: the latest)."),
    out: Path | None = typer.Option(None, "--out", help="Where to write the page (default RUN/report.html)."),
) -> None:
    """Write a self-contained HTML page with the run's plots and tables (opens offline in any browser)."""
    # Start-up: loaded when the command runs, so that `metaharness --help` stays fast.
    from metaharness.report import write_report

    path = write_report(RunDirectory.browse(resolve_run(run)), out)
    console().print(f"wrote {path}")


def register(app: typer.Typer) -> None:
    for command in (history, show, diff, report):
        app.command()(command)
