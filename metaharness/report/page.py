"""``report.html``: a self-contained page (inline SVG, a few lines of inline script) with a run's plots and tables.

It has no external resources, so it opens from a file, offline, anywhere. It opens with the search's story at a
glance (what was tried, what won, where the spend went against the budget), then the plots: score per iteration,
predicted vs. actual score, the lasting program graph (candidates coloured by score, predicted programs apart), cost
over time (what the run was charged, ending at the Spent box's total); then the tables: Pareto front, predicted vs.
actual scores with their mean absolute error, predicted vs. realised cost per iteration, the candidates, and the
predicted programs not yet chosen. Each part is a ``<section>`` with an id (``glance``, ``scores``, ``graph``,
``cost``, ``tables``), so a link or a screenshot can name one. A partly scored candidate is drawn and listed with its
examples (``0.667 (3/4)``) and counted as no result.
"""

from __future__ import annotations

import html
from pathlib import Path

from metaharness.report.graph_svg import program_graph_svg
from metaharness.report.summary import cost_rows, prediction_rows, unjudged_notes
from metaharness.report.svg import FAILED_COLOUR, Series, svg_chart
from metaharness.report.view import ALLOTMENT_HEADERS, PREDICTED_HEADERS, RunView, cost_cell, cost_of
from metaharness.store.files import atomic_write_text
from metaharness.store.run_dir import RunDirectory
from metaharness.text import html as inert_html

PARTLY_COLOUR = "#e4a33a"


def score_chart(view: RunView) -> str:
    """Each candidate with a result, the best so far among them, and apart the partly scored and failed ones."""
    points = [(float(r.iteration), r.score, f"{r.id}: {r.result()} {r.summary}") for r in view.records if r.supported]
    best_line = [
        (float(it), top.score, f"best after iteration {it}: {top.id} {top.result()}") for it, top in view.best_so_far()
    ]
    series = [Series("candidate", points, "#21918c"), Series("best so far", best_line, "#440154", line=True)]
    partly = [
        (float(r.iteration), r.score, f"{r.id}: {r.result()} partly scored, no result yet")
        for r in view.records
        if r.partial
    ]
    if partly:
        series.append(Series("partly scored (k/n: no result)", partly, PARTLY_COLOUR))
    failed = [(float(r.iteration), 0.0, f"{r.id} failed: {r.error or ''}") for r in view.records if r.failed]
    if failed:
        series.append(Series("failed (scored 0)", failed, FAILED_COLOUR))
    return svg_chart(series, x_label="iteration (0 = seeds)", y_label="validation score", y_base=(0.0, 1.0))


def prediction_chart(view: RunView) -> str:
    pairs = view.predicted()
    if not pairs:
        return "<p class='note'>No candidate with a result carries a predicted score.</p>"
    points = [(pred, r.score, f"{r.id}: predicted {pred:.3f}, actual {r.score:.3f}") for r, pred in pairs]
    return svg_chart(
        [Series("candidate", points, "#21918c")],
        x_label="predicted validation score",
        y_label="actual validation score",
        diagonal=True,
        x_base=(0.0, 1.0),
        y_base=(0.0, 1.0),
    )


def cost_chart(view: RunView) -> str:
    """What the run was charged as it went (``RunView.spent_over_time``): tokens, and dollars when any were spent.
    It ends at the total of ``spend.jsonl``, the ``everything`` of the Spent box; free calls are not in it."""
    points = view.spent_over_time()
    if not points:
        return "<p class='note'>Nothing recorded yet.</p>"
    tokens = [
        (x, float(spent.get("tokens", 0)), f"{when}: {float(spent.get('tokens', 0)):,.0f} tokens")
        for when, x, spent in points
    ]
    x_label = "iteration (last point: the whole run)" if points[-1][0].startswith("the whole run") else "iteration"
    charts = [
        svg_chart(
            [Series("tokens charged, every model (cached and replayed calls free)", tokens, "#3b528b", line=True)],
            x_label=x_label,
            y_label="cumulative tokens",
            y_base=(0.0, 0.0),
        )
    ]
    usd = [
        (x, float(spent.get("usd", 0.0)), f"{when}: ${float(spent.get('usd', 0.0)):.4f}") for when, x, spent in points
    ]
    if any(y > 0 for _, y, _ in usd):
        charts.append(
            svg_chart(
                [Series("USD, every model", usd, "#5ec962", line=True)],
                x_label=x_label,
                y_label="cumulative USD",
                y_base=(0.0, 0.0),
            )
        )
    else:
        charts.append("<p class='note'>No dollar cost recorded (local or unpriced models).</p>")
    return "".join(charts)


# The pages' stylesheet, shared by the run report and the experiment page.
PAGE_STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ddd;padding:3px 7px;text-align:left}
th{background:#f0f0f0;cursor:pointer}.note{color:#666;font-size:13px}.grid{display:flex;flex-wrap:wrap;gap:18px}
.tree{overflow-x:auto;border:1px solid #eee}
.story{display:flex;flex-wrap:wrap;gap:14px;margin:10px 0;align-items:flex-start}
.story>div{flex:1 1 320px;border:1px solid #ddd;padding:4px 12px 10px;background:#fafafa}.story h2{margin-top:6px}
"""

# Click a header to sort a table; marks the page as rendered (tests check it from a headless browser).
PAGE_SCRIPT = """
document.querySelectorAll('table.sortable th').forEach(function (th, col) {
  th.addEventListener('click', function () {
    var body = th.closest('table').tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var asc = th.dataset.asc !== 'true'; th.dataset.asc = asc;
    rows.sort(function (a, b) {
      var x = a.cells[col].textContent, y = b.cells[col].textContent;
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return asc ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
document.documentElement.setAttribute('data-rendered', 'yes');
"""


def html_table(headers: list[str], rows: list[list[str]]) -> str:
    """A sortable HTML table (``PAGE_SCRIPT`` sorts it) of escaped text cells; shared by the experiment page."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    # A cell may hold a proposer's summary or a harness's error: control characters shown as escapes too.
    body = "".join("<tr>" + "".join(f"<td>{inert_html(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _prediction_table(view: RunView) -> str:
    headers, rows, error = prediction_rows(view)
    table = (
        html_table(headers, rows) + f"<p>mean absolute error {error:.3f} over {len(rows)} candidates</p>"
        if rows
        else "<p class='note'>No candidate with a result carried a predicted score.</p>"
    )
    return table + "".join(f"<p class='note'>{html.escape(n)}</p>" for n in unjudged_notes(view))


def _cost_table(view: RunView) -> str:
    headers, rows = cost_rows(view)
    return html_table(headers, rows) if rows else "<p class='note'>No iteration recorded its costs.</p>"


def story_html(view: RunView) -> str:
    """The search's story at a glance: what was tried, what won, where the spend went against the budget."""
    rows, notes = view.spend_story()
    spend = html_table(["", "evals", "tokens", "USD"], rows) if rows else ""
    return (
        "<div class='story'>"
        f"<div><h2>Tried</h2><p>{html.escape(view.tried())}</p></div>"
        f"<div><h2>Won</h2><p>{inert_html(view.won())}</p></div>"
        f"<div><h2>Spent</h2>{spend}" + "".join(f"<p class='note'>{html.escape(n)}</p>" for n in notes) + "</div></div>"
    )


def render_html(view: RunView) -> str:
    cfg = view.config
    best = view.best
    rows = []
    for r in view.records:
        pred = r.prediction.score if r.prediction is not None else None
        rows.append(
            [
                r.id,
                str(r.iteration),
                r.parent or "root",
                r.result(),
                f"{view.test[r.id].primary:.3f}" if r.id in view.test else "",
                f"{pred:.3f}" if isinstance(pred, (int, float)) else "",
                cost_cell(r, "context_tokens", "{:.0f}"),
                cost_cell(r, "usd", "{:.4f}"),
                (r.summary + (f" | {r.error}" if r.error else ""))[:300],
            ]
        )
    front = [
        [r.id, r.result(), f"{cost_of(r, 'context_tokens'):.0f}", f"{cost_of(r, 'usd'):.4f}", r.summary]
        for r in view.front
    ]
    headline = f"best {best.id}: val {best.result()}" if best else "no candidate with a result yet"
    failed = [[str(it), error[:500]] for it, error in view.proposer_failures()]
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>metaharness run {html.escape(str(cfg.get('dataset')))}</title>",
        f"<style>{PAGE_STYLE}</style></head><body>",
        "<section id='glance'>",
        f"<h1>metaharness run: {html.escape(str(cfg.get('dataset')))}</h1>",
        f"<p>task model <code>{html.escape(str(cfg.get('task_model')))}</code>, "
        f"proposer <code>{html.escape(str(cfg.get('proposer')))}</code>, "
        f"evaluation <code>{html.escape(str(cfg.get('evaluation', 'best-of-n')))}</code>; "
        f"{len(view.records)} candidates; {html.escape(headline)}</p>",
        story_html(view),
        "".join(f"<p class='note'>{inert_html(n)}</p>" for n in view.notes()),
        "</section><section id='scores'>",
        "<div class='grid'><div><h2>Validation score per iteration</h2>",
        score_chart(view),
        "</div><div><h2>Predicted vs. actual score</h2>",
        prediction_chart(view),
        "</div></div></section><section id='graph'>",
        "<h2>Program graph (colour = validation score, red ring = best; predicted programs hollow, "
        f"{len(view.predicted_nodes())} not yet chosen)</h2>",
        "<div class='tree'>",
        program_graph_svg(view.graph, best.id if best else None, view.records) if view.graph is not None else "",
        "</div></section><section id='cost'><h2>Cost over time</h2><div class='grid'>",
        cost_chart(view),
        "</div></section><section id='tables'><h2>Pareto front: score vs. context tokens vs. USD</h2>",
        html_table(["id", "val", "context tok", "USD", "summary"], front),
        "<h2>Predicted vs. actual score of every candidate with a prediction</h2>",
        _prediction_table(view),
        "<h2>Predicted vs. realised cost per iteration</h2>",
        _cost_table(view),
        "<h2>Staged evaluation: examples allotted per iteration</h2>",
        html_table(ALLOTMENT_HEADERS, view.allotments()) if view.allotments() else "<p class='note'>None.</p>",
        "<h2>Candidates</h2>",
        html_table(
            ["id", "iteration", "parent", "val", "test", "predicted", "context tok", "USD", "summary / error"], rows
        ),
        "<h2>Predicted programs not yet chosen</h2>",
        html_table(PREDICTED_HEADERS, view.predicted_rows()) if view.predicted_nodes() else "<p class='note'>None.</p>",
        (
            "<h2>Proposer failures (each iteration was asked again)</h2>" + html_table(["iteration", "error"], failed)
            if failed
            else ""
        ),
        "</section>",
        f"<script>{PAGE_SCRIPT}</script>",
        "</body></html>",
    ]
    return "".join(parts)


def write_report(run: RunDirectory, out: Path | None = None) -> Path:
    path = Path(out) if out else run.path / "report.html"
    atomic_write_text(path, render_html(RunView.load(run)))
    return path
