"""What a run says about itself: ``SUMMARY.md`` (rewritten after every iteration) and a self-contained HTML page.

The HTML page has no external resources (plots are inline SVG, the few lines of script are inline), so it opens
from a file, offline, anywhere: score per iteration, the candidate tree coloured by score, predicted vs. actual
score, and cost over time, then the tables.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaharness import frontier
from metaharness.store.files import atomic_write_text
from metaharness.store.record import CandidateRecord, Evaluation
from metaharness.store.run_dir import RunDirectory


@dataclass
class RunView:
    """Everything the summaries show, read once from a run directory."""

    path: Path
    config: dict[str, Any]
    records: list[CandidateRecord]
    log: list[dict[str, Any]]
    test: dict[str, Evaluation] = field(default_factory=dict)

    @classmethod
    def load(cls, run: RunDirectory) -> RunView:
        records = [c.record for c in run.store.candidates()]
        test = {r.id: ev for r in records if (ev := run.test_result(r.id)) is not None}
        return cls(run.path, run.store.config(), records, run.log_records(), test)

    @property
    def best(self) -> CandidateRecord | None:
        return frontier.best(self.records)

    @property
    def front(self) -> list[CandidateRecord]:
        return frontier.pareto_front(self.records)

    def notes(self) -> list[str]:
        """Stops and skipped test evaluations as the log recorded them (a note repeated by reruns: its last time)."""
        latest: dict[str, str] = {}
        for entry in self.log:
            if entry.get("type") == "stop":
                text = f"stopped: {entry.get('reason', '')}"
            elif entry.get("type") == "test_skipped":
                text = f"test split not evaluated: {entry.get('reason', '')}"
            else:
                continue
            latest.pop(text, None)
            latest[text] = entry.get("time", "")
        return [f"{when} {text}" for text, when in latest.items()]

    def predicted(self) -> list[tuple[CandidateRecord, float]]:
        return [
            (r, float(r.prediction["score"]))
            for r in self.records
            if r.prediction and isinstance(r.prediction.get("score"), (int, float)) and not r.failed
        ]


def _cost(record: CandidateRecord, key: str) -> float:
    return float(record.evaluation.cost.get(key, 0.0)) if record.evaluation else 0.0


def _val(record: CandidateRecord) -> str:
    return "failed" if record.failed else f"{record.score:.3f}"


# -- SUMMARY.md ----------------------------------------------------------------------------------------------


def render_markdown(view: RunView) -> str:
    cfg = view.config
    iterations = sorted({int(e["iteration"]) for e in view.log if e.get("type") == "iteration" and e["iteration"] > 0})
    lines = [
        f"# metaharness run: {cfg.get('dataset')}",
        "",
        f"- task model: `{cfg.get('task_model')}`; proposer: `{cfg.get('proposer')}`"
        + (f" (`{cfg['proposer_model']}`)" if cfg.get("proposer_model") else ""),
        f"- validation examples per candidate: {cfg.get('val_limit') or 'all'}; evaluations per iteration: {cfg.get('evals_per_iter')}",
        f"- iterations done: {max(iterations, default=0)}; candidates: {len(view.records)} "
        f"({sum(r.failed for r in view.records)} failed)",
    ]
    best = view.best
    if best:
        lines += ["", "## Best", "", f"`{best.id}` val {best.score:.4f}: {best.summary}  "]
        if best.id in view.test:
            lines.append(f"test {view.test[best.id].primary:.4f} on {view.test[best.id].examples} examples  ")
        lines.append(f"Its program: `git -C {view.path} show best:harness.py`")
    lines += ["", "## Pareto front (val score vs. context tokens per example vs. USD)", ""]
    lines += ["| id | val | test | context tok | USD | summary |", "|---|---|---|---|---|---|"]
    for r in view.front:
        test = f"{view.test[r.id].primary:.4f}" if r.id in view.test else ""
        lines.append(f"| {r.id} | {r.score:.4f} | {test} | {_cost(r, 'context_tokens'):.0f} | {_cost(r, 'usd'):.4f} | {_cell(r.summary)} |")
    lines += ["", "## Candidates", ""]
    lines += ["| id | iteration | parent | val | predicted | context tok | USD | summary / error |", "|---|---|---|---|---|---|---|---|"]
    for r in view.records:
        predicted = f"{r.prediction['score']:.3f}" if r.prediction and isinstance(r.prediction.get("score"), (int, float)) else ""
        text = r.summary + (f" -- {r.error.splitlines()[0]}" if r.failed and r.error else "")
        lines.append(
            f"| {r.id} | {r.iteration} | {r.parent or 'root'} | {_val(r)} | {predicted} | "
            f"{_cost(r, 'context_tokens'):.0f} | {_cost(r, 'usd'):.4f} | {_cell(text)} |"
        )
    if view.notes():
        lines += ["", "## Notes", ""] + [f"- {n}" for n in view.notes()]
    lines += [
        "",
        "## Browse",
        "",
        f"- the search tree with scores: `git -C {view.path} log --graph --all --oneline --notes=metaharness`",
        "- one candidate: `metaharness show cNNN`; a revision: `metaharness diff cAAA cBBB`; plots: `metaharness report`",
        "- machine-readable record: `summary.jsonl`; per-example traces: `traces/`",
        "",
    ]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")[:120]


def write_summary_markdown(run: RunDirectory) -> Path:
    atomic_write_text(run.summary_md, render_markdown(RunView.load(run)))
    return run.summary_md


# -- HTML ----------------------------------------------------------------------------------------------------

_VIRIDIS = [(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)]
_FAILED_COLOUR = "#b0b0b0"


def colour(value: float, low: float, high: float) -> str:
    """Viridis colour for ``value`` on [low, high] (dark purple = worst, yellow = best)."""
    t = 0.5 if high <= low else min(1.0, max(0.0, (value - low) / (high - low)))
    pos = t * (len(_VIRIDIS) - 1)
    i = min(int(pos), len(_VIRIDIS) - 2)
    f = pos - i
    rgb = [round(a + (b - a) * f) for a, b in zip(_VIRIDIS[i], _VIRIDIS[i + 1])]
    return "#%02x%02x%02x" % tuple(rgb)


@dataclass
class Series:
    name: str
    points: list[tuple[float, float, str]]  # x, y, tooltip
    colour: str = "#3b528b"
    line: bool = False


def _range(values: list[float], base: tuple[float, float] | None = None) -> tuple[float, float]:
    """Padded axis range covering ``values`` (and ``base``, e.g. (0, 1) for scores, when given)."""
    values = list(values) + (list(base) if base else [])
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    if high - low < 1e-9:
        low, high = low - 0.5, high + 0.5
    pad = (high - low) * 0.05
    return low - pad, high + pad


def svg_chart(
    series: list[Series],
    *,
    x_label: str,
    y_label: str,
    diagonal: bool = False,
    x_base: tuple[float, float] | None = None,
    y_base: tuple[float, float] | None = None,
    width: int = 560,
    height: int = 300,
) -> str:
    """A scatter/line chart as an inline SVG element: legend on top, axes with ticks, tooltips from ``<title>``.

    ``x_base``/``y_base``: a range the axis always covers (e.g. (0, 1) for scores)."""
    xs = [p[0] for s in series for p in s.points]
    ys = [p[1] for s in series for p in s.points]
    if diagonal:
        xs, ys = xs + ys, ys + xs
    (x0, x1), (y0, y1) = _range(xs, x_base), _range(ys, y_base)
    left, right, top, bottom = 58, 14, 10 + 16 * len(series), 42
    height += top
    pw, ph = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + ph - (y - y0) / (y1 - y0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">']
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ccc"/>')
    for xv in _ticks(x0, x1, all(float(x).is_integer() for x in xs)):
        out.append(f'<text x="{sx(xv):.1f}" y="{top + ph + 16}" font-size="11" text-anchor="middle">{_fmt(xv)}</text>')
    for yv in _ticks(y0, y1, False):
        out.append(f'<text x="{left - 6}" y="{sy(yv) + 4:.1f}" font-size="11" text-anchor="end">{_fmt(yv)}</text>')
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{sy(yv):.1f}" y2="{sy(yv):.1f}" stroke="#eee"/>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 6}" font-size="12" text-anchor="middle">{html.escape(x_label)}</text>')
    out.append(
        f'<text transform="translate(14,{top + ph / 2}) rotate(-90)" font-size="12" text-anchor="middle">{html.escape(y_label)}</text>'
    )
    if diagonal:
        lo, hi = max(x0, y0), min(x1, y1)
        out.append(f'<line x1="{sx(lo):.1f}" y1="{sy(lo):.1f}" x2="{sx(hi):.1f}" y2="{sy(hi):.1f}" stroke="#999" stroke-dasharray="4 3"/>')
    for s in series:
        if s.line and len(s.points) > 1:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y, _ in s.points)
            out.append(f'<polyline points="{path}" fill="none" stroke="{s.colour}" stroke-width="2"/>')
        for x, y, tip in s.points:
            out.append(
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{3 if s.line else 5}" fill="{s.colour}" fill-opacity="0.8">'
                f"<title>{html.escape(tip)}</title></circle>"
            )
    for i, s in enumerate(series):
        out.append(f'<rect x="{left}" y="{4 + 16 * i}" width="10" height="10" fill="{s.colour}"/>')
        out.append(f'<text x="{left + 14}" y="{13 + 16 * i}" font-size="11">{html.escape(s.name)}</text>')
    out.append("</svg>")
    return "".join(out)


def _ticks(low: float, high: float, integer: bool) -> list[float]:
    """About five round tick positions (steps of 1, 2, 2.5 or 5 times a power of ten) inside [low, high]."""
    raw = (high - low) / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    if integer:
        step = max(1.0, float(math.ceil(step)))
    first = math.ceil(low / step) * step
    return [round(first + i * step, 10) for i in range(int((high - first) / step + 1e-9) + 1)]


def _fmt(value: float) -> str:
    if float(value).is_integer():
        return f"{value:.0f}"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.2f}"


def score_chart(view: RunView) -> str:
    done = [r for r in view.records if not r.failed]
    points = [(float(r.iteration), r.score, f"{r.id}: {r.score:.3f} {r.summary}") for r in done]
    best_line, running = [], None
    for it in sorted({r.iteration for r in done}):
        top = max(r.score for r in done if r.iteration == it)
        running = top if running is None else max(running, top)
        best_line.append((float(it), running, f"best after iteration {it}: {running:.3f}"))
    failed = [(float(r.iteration), 0.0, f"{r.id} failed: {r.error or ''}") for r in view.records if r.failed]
    series = [Series("candidate", points, "#21918c"), Series("best so far", best_line, "#440154", line=True)]
    if failed:
        series.append(Series("failed (scored 0)", failed, _FAILED_COLOUR))
    return svg_chart(series, x_label="iteration (0 = seeds)", y_label="validation score", y_base=(0.0, 1.0))


def tree_svg(view: RunView) -> str:
    """The candidate tree (root -> seeds -> revisions), left to right, nodes coloured by validation score."""
    children: dict[str | None, list[CandidateRecord]] = {}
    for r in view.records:
        children.setdefault(r.parent, []).append(r)
    rows: dict[str | None, float] = {}
    depth: dict[str | None, int] = {None: 0}
    order = [0]

    def place(node: str | None) -> float:
        kids = children.get(node, [])
        for kid in kids:
            depth[kid.id] = depth[node] + 1
        if not kids:
            rows[node] = order[0]
            order[0] += 1
        else:
            ys = [place(kid.id) for kid in kids]
            rows[node] = sum(ys) / len(ys)
        return rows[node]

    place(None)
    scores = [r.score for r in view.records if not r.failed]
    low, high = (min(scores), max(scores)) if scores else (0.0, 1.0)
    dx, dy, pad = 110, 28, 30
    width = pad * 2 + dx * max(depth.values()) + 120
    height = pad * 2 + dy * max(order[0] - 1, 0) + 10

    def pos(node: str | None) -> tuple[float, float]:
        return pad + dx * depth[node], pad + dy * rows[node]

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">']
    for r in view.records:
        (x0, y0), (x1, y1) = pos(r.parent), pos(r.id)
        out.append(f'<path d="M{x0:.1f},{y0:.1f} C{x0 + dx / 2:.1f},{y0:.1f} {x1 - dx / 2:.1f},{y1:.1f} {x1:.1f},{y1:.1f}" fill="none" stroke="#bbb"/>')
    x, y = pos(None)
    out.append(f'<rect x="{x - 16}" y="{y - 9}" width="32" height="18" fill="#ddd"/><text x="{x}" y="{y + 4}" font-size="10" text-anchor="middle">root</text>')
    best = view.best
    for r in view.records:
        x, y = pos(r.id)
        fill = _FAILED_COLOUR if r.failed else colour(r.score, low, high)
        ring = ' stroke="#d62728" stroke-width="3"' if best and r.id == best.id else ' stroke="#333"'
        tip = f"{r.id} (iteration {r.iteration}, parent {r.parent or 'root'}): {_val(r)}\n{r.summary}" + (f"\n{r.error}" if r.error else "")
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="9" fill="{fill}"{ring}><title>{html.escape(tip)}</title></circle>')
        out.append(f'<text x="{x + 13:.1f}" y="{y + 4:.1f}" font-size="11">{r.id} {_val(r)}</text>')
    out.append("</svg>")
    return "".join(out)


def prediction_chart(view: RunView) -> str:
    pairs = view.predicted()
    if not pairs:
        return "<p class='note'>No candidate of this run carries a predicted score (the proposer made no predictions).</p>"
    points = [(pred, r.score, f"{r.id}: predicted {pred:.3f}, actual {r.score:.3f}") for r, pred in pairs]
    return svg_chart([Series("candidate", points, "#21918c")], x_label="predicted validation score", y_label="actual validation score", diagonal=True,
                     x_base=(0.0, 1.0), y_base=(0.0, 1.0))


def cost_chart(view: RunView) -> str:
    tokens, total = [], 0.0
    for n, r in enumerate(view.records, start=1):
        total += _cost(r, "input_tokens") + _cost(r, "output_tokens")
        tokens.append((float(n), total, f"after {r.id}: {total:.0f} evaluation tokens"))
    charts = [svg_chart([Series("task-model tokens (validation)", tokens, "#3b528b", line=True)], x_label="candidates evaluated", y_label="cumulative tokens")]
    spent = [(float(e["iteration"]), float(e.get("spent", {}).get("usd", 0.0)), f"iteration {e['iteration']}") for e in view.log if e.get("type") == "iteration"]
    if any(y > 0 for _, y, _ in spent):
        charts.append(svg_chart([Series("USD, all roles", spent, "#5ec962", line=True)], x_label="iteration", y_label="cumulative USD"))
    else:
        charts.append("<p class='note'>No dollar cost recorded (local or unpriced models).</p>")
    return "".join(charts)


_STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ddd;padding:3px 7px;text-align:left}
th{background:#f0f0f0;cursor:pointer}.note{color:#666;font-size:13px}.grid{display:flex;flex-wrap:wrap;gap:18px}
.tree{overflow-x:auto;border:1px solid #eee}
"""

# Click a header to sort a table; marks the page as rendered (tests check it from a headless browser).
_SCRIPT = """
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


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def render_html(view: RunView) -> str:
    cfg = view.config
    best = view.best
    rows = []
    for r in view.records:
        pred = r.prediction.get("score") if r.prediction else None
        rows.append(
            [
                r.id,
                str(r.iteration),
                r.parent or "root",
                _val(r),
                f"{view.test[r.id].primary:.3f}" if r.id in view.test else "",
                f"{pred:.3f}" if isinstance(pred, (int, float)) else "",
                f"{_cost(r, 'context_tokens'):.0f}",
                f"{_cost(r, 'usd'):.4f}",
                (r.summary + (f" | {r.error}" if r.error else ""))[:300],
            ]
        )
    front = [[r.id, f"{r.score:.3f}", f"{_cost(r, 'context_tokens'):.0f}", f"{_cost(r, 'usd'):.4f}", r.summary] for r in view.front]
    headline = f"best {best.id}: val {best.score:.3f}" if best else "no evaluated candidate yet"
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>metaharness run {html.escape(str(cfg.get('dataset')))}</title><style>{_STYLE}</style></head><body>",
        f"<h1>metaharness run: {html.escape(str(cfg.get('dataset')))}</h1>",
        f"<p>task model <code>{html.escape(str(cfg.get('task_model')))}</code>, proposer <code>{html.escape(str(cfg.get('proposer')))}</code>; "
        f"{len(view.records)} candidates; {html.escape(headline)}</p>",
        "".join(f"<p class='note'>{html.escape(n)}</p>" for n in view.notes()),
        "<div class='grid'><div><h2>Validation score per iteration</h2>",
        score_chart(view),
        "</div><div><h2>Predicted vs. actual score</h2>",
        prediction_chart(view),
        "</div></div><h2>Candidate tree (colour = validation score, red ring = best, grey = failed)</h2><div class='tree'>",
        tree_svg(view),
        "</div><h2>Cost over time</h2><div class='grid'>",
        cost_chart(view),
        "</div><h2>Pareto front: score vs. context tokens vs. USD</h2>",
        _table(["id", "val", "context tok", "USD", "summary"], front),
        "<h2>Candidates</h2>",
        _table(["id", "iteration", "parent", "val", "test", "predicted", "context tok", "USD", "summary / error"], rows),
        f"<script>{_SCRIPT}</script>",
        "</body></html>",
    ]
    return "".join(parts)


def write_report(run: RunDirectory, out: Path | None = None) -> Path:
    path = Path(out) if out else run.path / "report.html"
    atomic_write_text(path, render_html(RunView.load(run)))
    return path
