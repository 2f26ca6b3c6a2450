"""``results.html``: an experiment's results as a self-contained page (inline SVG, no external resources); and
``write_results``, which writes it beside ``results.json`` and ``RESULTS.md``.

One best-so-far chart per dataset and one for the average over datasets (a line per proposer, the mean over seeds),
then the tables of ``.results`` and the failed cells. Charts, tables, style and script are the run report's
(``metaharness.report.page``, ``metaharness.report.svg``).
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path

from metaharness.experiment.results import (
    COLUMNS,
    JUDGED_NOTE,
    PAIRED_COLUMNS,
    PAIRED_NOTE,
    RESULTS_HTML,
    RESULTS_JSON,
    RESULTS_MD,
    ExperimentTable,
    Group,
    capped_rows,
    experiment_table,
    failed_rows,
    paired_rows,
    render_markdown,
    table_rows,
)
from metaharness.report.page import PAGE_SCRIPT, PAGE_STYLE, html_table
from metaharness.report.svg import Series, colour, svg_chart
from metaharness.store.files import atomic_write_json, atomic_write_text


def curve_chart(groups: Mapping[str, Group]) -> str:
    """Best-so-far validation score per iteration, a line per proposer (its ``curve``: the mean over seeds)."""
    if not any(g["curve"] for g in groups.values()):
        return "<p class='note'>No iteration finished yet.</p>"
    names = list(groups)
    series = [
        Series(
            f"{name} ({groups[name]['runs']} runs)",
            [(float(it), y, f"{name}, iteration {it:.0f}: {y:.3f}") for it, y in groups[name]["curve"]],
            colour(i, 0, max(1, len(names) - 1) * 1.25),  # stop short of viridis' pale yellow
            line=True,
        )
        for i, name in enumerate(names)
    ]
    return svg_chart(series, x_label="iteration (0 = seeds)", y_label="best validation score so far")


def render_html(table: ExperimentTable) -> str:
    spec = table["experiment"]
    sections: list[tuple[str, Mapping[str, Group]]] = list(table["datasets"].items())
    sections.append(("average over datasets", table["average"]))
    charts = "".join(
        f"<div><h2>{html.escape(name)}: best so far (mean over seeds)</h2>{curve_chart(groups)}</div>"
        for name, groups in sections
    )
    tables = "".join(
        f"<h2>{html.escape(name)}</h2>" + html_table(COLUMNS, table_rows(groups)) for name, groups in sections
    )
    if table["paired"]:
        tables += f"<h2>Paired differences</h2><p class='note'>{html.escape(PAIRED_NOTE)}</p>"
        tables += html_table(PAIRED_COLUMNS, paired_rows(table))
    if any(p["difference"]["n"] for p in table.get("paired_judged", [])):
        tables += f"<h2>Paired differences, judged</h2><p class='note'>{html.escape(JUDGED_NOTE)}</p>"
        tables += html_table(PAIRED_COLUMNS, paired_rows(table, "paired_judged"))
    if table.get("capped"):
        tables += "<h2>Capped cells (not in the means)</h2>"
        tables += html_table(["cell", "spent", "stopped"], capped_rows(table))
    failed = (
        "<h2>Failed cells</h2>" + html_table(["cell", "error"], failed_rows(table))
        if table["failed"]
        else "<p class='note'>No cell failed.</p>"
    )
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>metaharness experiment</title><style>{PAGE_STYLE}</style></head><body>",
        "<h1>metaharness experiment</h1>",
        f"<p>task model <code>{html.escape(str(spec.get('task_model')))}</code>, proposer model "
        f"<code>{html.escape(str(spec.get('proposer_model')))}</code>; {html.escape(str(spec.get('iterations')))} "
        f"iterations, {html.escape(str(spec.get('evals_per_iter')))} evaluations per iteration; seeds "
        f"{html.escape(str(spec.get('seeds')))}. Tables: mean (sample sd) over seeds; the average is the mean over "
        "datasets of the per-dataset means, its sd over seeds of the per-seed averages across datasets.</p>",
        f"<div class='grid'>{charts}</div>",
        tables,
        failed,
        f"<script>{PAGE_SCRIPT}</script>",
        "</body></html>",
    ]
    return "".join(parts)


def write_results(exp_dir: Path) -> Path:
    """Write ``results.json``, ``RESULTS.md`` and ``results.html`` into the experiment folder; return RESULTS.md."""
    exp_dir = Path(exp_dir)
    table = experiment_table(exp_dir)
    atomic_write_json(exp_dir / RESULTS_JSON, table)
    atomic_write_text(exp_dir / RESULTS_HTML, render_html(table))
    atomic_write_text(exp_dir / RESULTS_MD, render_markdown(table))
    return exp_dir / RESULTS_MD
