"""``SUMMARY.md``: the human-readable summary of a run, rewritten after every iteration."""

from __future__ import annotations

from pathlib import Path

from metaharness.report.view import ALLOTMENT_HEADERS, PREDICTED_HEADERS, RunView, cost_cell, cost_of
from metaharness.store.files import atomic_write_text
from metaharness.store.run_dir import RunDirectory
from metaharness.text import markdown


def prediction_rows(view: RunView) -> tuple[list[str], list[list[str]], float | None]:
    """Predicted vs. actual score of every candidate with a result that carried a prediction, and the mean absolute
    error (a partly scored candidate has no actual score yet: ``unjudged_notes``)."""
    rows = []
    for r, predicted in view.predicted():
        std = r.prediction.std if r.prediction is not None else None
        rows.append(
            [
                r.id,
                str(r.iteration),
                f"{predicted:.3f}",
                f"{float(std):.3f}" if std is not None else "",
                f"{r.score:.3f}",
                f"{r.score - predicted:+.3f}",
            ]
        )
    return ["id", "iteration", "predicted", "std", "actual", "actual - predicted"], rows, view.prediction_error()


def unjudged_notes(view: RunView) -> list[str]:
    """The predicted candidates left out of the comparison because they are only partly scored."""
    waiting = view.unjudged()
    if not waiting:
        return []
    listed = ", ".join(f"{r.id} {r.result()}" for r in waiting)
    return [f"Not compared, partly scored (no actual score yet): {listed}."]


COST_LEGEND = (
    "What each iteration's validation evaluations were predicted to spend, and spent, in what the run was charged "
    "(example-evaluations with a new model call, task-model tokens, dollars; a call the run had already made is "
    "free). The proposer's own calls (probes, the proposer model) count in the run's spend, not here."
)


def cost_rows(view: RunView) -> tuple[list[str], list[list[str]]]:
    """Per iteration: the predicted and the realised spend of its evaluations, entry by entry."""
    rows = [
        [
            str(it),
            _amount((predicted or {}).get("evals"), "{:.0f}"),
            _amount(realised.get("evals"), "{:.0f}"),
            _amount((predicted or {}).get("tokens"), "{:.0f}"),
            _amount(realised.get("tokens"), "{:.0f}"),
            _amount((predicted or {}).get("usd"), "{:.4f}"),
            _amount(realised.get("usd"), "{:.4f}"),
        ]
        for it, predicted, realised in view.iteration_costs()
    ]
    headers = [
        "iteration",
        "predicted evals",
        "realised evals",
        "predicted tokens",
        "realised tokens",
        "predicted USD",
        "realised USD",
    ]
    return headers, rows


def _amount(value: object, form: str) -> str:
    return form.format(float(value)) if isinstance(value, (int, float)) else ""


def render_markdown(view: RunView) -> str:
    cfg = view.config
    iterations = sorted(it for it in view.iterations() if it > 0)
    failed = view.proposer_failures()
    lines = [
        f"# metaharness run: {cfg.get('dataset')}",
        "",
        f"- task model: `{cfg.get('task_model')}`; proposer: `{cfg.get('proposer')}`"
        + (f" (`{cfg['proposer_model']}`)" if cfg.get("proposer_model") else ""),
        f"- validation examples: {cfg.get('val_limit') or 'all'}"
        + (f", {cfg['holdout']} held out of the search to judge the best" if cfg.get("holdout") else "")
        + f"; evaluation: {cfg.get('evaluation', 'best-of-n')}, {cfg.get('evals_per_iter')} full evaluations' worth "
        "of examples per iteration",
        f"- iterations done: {max(iterations, default=0)}"
        + (f" (the proposer failed {len(failed)} times and was asked again)" if failed else "")
        + f"; candidates: {len(view.records)} ({sum(r.failed for r in view.records)} failed"
        + (f", {partial} partly scored" if (partial := sum(r.partial for r in view.records)) else "")
        + (
            f", {implemented} implemented, not scored)"
            if (implemented := sum(r.implemented for r in view.records))
            else ")"
        ),
        "- the best and the front are chosen among candidates with a result: scored on every search example "
        "(a partly scored one shows on how many, `0.667 (3/4)`)",
        "",
        "## At a glance",
        "",
        f"- **Tried:** {view.tried()}",
        f"- **Won:** {markdown(view.won())}",  # it quotes the best's summary
    ]
    rows, notes = view.spend_story()
    lines += ["- **Spent:** " + "; ".join(notes), ""] + markdown_table(["", "evals", "tokens", "USD"], rows)
    best = view.best
    if best:
        lines += ["", "## Best", "", f"`{best.id}` val {best.result(4)}: {markdown(best.summary)}  "]
        if best.id in view.test:
            lines.append(f"test {view.test[best.id].primary:.4f} on {view.test[best.id].examples} examples  ")
        if best.id in view.holdout:
            judged = view.holdout[best.id]
            lines.append(f"held-out val {judged.primary:.4f} on {judged.examples} examples the search never saw  ")
        lines.append(f"Its program: `git -C {view.path} show best:harness.py`")
    lines += ["", "## Pareto front (val score vs. context tokens per example vs. USD)", ""]
    lines += ["| id | val | test | context tok | USD | summary |", "|---|---|---|---|---|---|"]
    for r in view.front:
        test = f"{view.test[r.id].primary:.4f}" if r.id in view.test else ""
        lines.append(
            f"| {r.id} | {r.result(4)} | {test} | {cost_of(r, 'context_tokens'):.0f} | {cost_of(r, 'usd'):.4f} | "
            f"{markdown_cell(r.summary)} |"
        )
    lines += ["", "## Candidates", ""]
    lines += [
        "| id | iteration | parent | val | predicted | context tok | USD | summary / error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in view.records:
        predicted = f"{r.prediction.score:.3f}" if r.prediction is not None and r.prediction.score is not None else ""
        text = r.summary + (f" -- {r.error.splitlines()[0]}" if r.failed and r.error else "")
        lines.append(
            f"| {r.id} | {r.iteration} | {r.parent or 'root'} | {r.result()} | {predicted} | "
            f"{cost_cell(r, 'context_tokens', '{:.0f}')} | {cost_cell(r, 'usd', '{:.4f}')} | {markdown_cell(text)} |"
        )
    headers, rows, error = prediction_rows(view)
    if rows:
        lines += ["", f"## Predicted vs. actual score (mean absolute error {error:.3f} over {len(rows)})", ""]
        lines += markdown_table(headers, rows)
    lines += [f"\n{n}" for n in unjudged_notes(view)]
    headers, rows = cost_rows(view)
    if rows:
        lines += ["", "## Predicted vs. realised cost per iteration", ""]
        lines += [COST_LEGEND]
        lines += [""] + markdown_table(headers, rows)
    allotments = view.allotments()
    if allotments:
        lines += ["", "## Staged evaluation: examples allotted per iteration", ""]
        lines += markdown_table(ALLOTMENT_HEADERS, allotments)
    waiting = view.predicted_rows()
    if waiting:
        lines += ["", f"## Predicted programs not yet chosen ({len(waiting)}; `metaharness history --predicted`)", ""]
        lines += markdown_table(PREDICTED_HEADERS, waiting[:20])
        if len(waiting) > 20:
            lines.append(f"\n({len(waiting) - 20} more in `program-graph.json`)")
    if failed:
        lines += ["", "## Proposer failures (each iteration was asked again)", ""]
        lines += [f"- iteration {it}: {markdown_cell(error, 300)}" for it, error in failed]
        lines.append("  (the tracebacks: `proposer_traceback` in the `proposer_failure` lines of `summary.jsonl`)")
    if view.notes():
        lines += ["", "## Notes", ""] + [f"- {markdown(n)}" for n in view.notes()]
    lines += [
        "",
        "## Browse",
        "",
        f"- the search tree with scores: `git -C {view.path} log --graph --oneline --branches --tags` (every "
        f"candidate is a commit, every result a commit on `results/cNNN`); the best, its score and its harness diff: "
        f"`git -C {view.path} show best`",
        "- one candidate: `metaharness show cNNN`; a revision: `metaharness diff cAAA cBBB`; "
        "plots: `metaharness report`",
        "- machine-readable record: `summary.jsonl`; per-example traces: `traces/`",
        "",
    ]
    return "\n".join(lines)


def markdown_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """The lines of a Markdown table; every cell goes through ``markdown_cell``."""
    return [
        "| " + " | ".join(headers) + " |",
        "|" + "---|" * len(headers),
        *("| " + " | ".join(markdown_cell(c) for c in row) + " |" for row in rows),
    ]


def markdown_cell(text: str, width: int = 120) -> str:
    """``text`` as one table cell: at most ``width`` characters of it, made inert (``metaharness.text.markdown``:
    one line, no HTML, no link, no emphasis, ``|`` escaped). A proposer's summary or a harness's error may be
    anything."""
    return markdown(" ".join(text.split())[:width], block_start=False)


def write_summary_markdown(run: RunDirectory) -> Path:
    atomic_write_text(run.summary_md, render_markdown(RunView.load(run)))
    return run.summary_md
