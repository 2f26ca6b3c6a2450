"""The lasting program graph as an inline SVG: candidates with a result coloured by score, partly scored ones pale
with their examples (``0.667 (3/4)``: no result yet, so outside the colour scale), implemented dashed, failed grey,
predicted programs hollow grey.

The layout is a tree, left to right from the run's root: each node hangs under its first parent (its first
revision edge); further revisions into a node (merges) are drawn dotted. Under each parent the committed
candidates come first, then the predicted programs, best predicted first, so predictions sit apart from what was
measured. Only the best ``MAX_PREDICTED`` predictions are drawn (the tables list them all).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from metaharness.candidate import Candidate
from metaharness.planner import program
from metaharness.planner.graph import Node, NodeId, PlanGraph
from metaharness.report.svg import FAILED_COLOUR, colour
from metaharness.text import html as inert_html

MAX_PREDICTED = 60
ROOT = "root"
_PREDICTED_STROKE = "#9a9a9a"
_PARTLY_FILL = "#f3e3c3"


def program_graph_svg(graph: PlanGraph, best: str | None = None, candidates: Sequence[Candidate] = ()) -> str:
    """The graph (see the module docstring); ``best`` gets a red ring. ``candidates`` (the run's) label their
    nodes with their results and place each under the candidate it revises rather than under the first revision the
    graph had for it."""
    predicted = sorted(program.nodes_with(graph, program.PREDICTED), key=lambda n: -(n.score or 0.0))
    shown = {n.id for n in graph.nodes if n.status != program.PREDICTED} | {n.id for n in predicted[:MAX_PREDICTED]}
    parent = {n: _first_parent(graph, n, shown) for n in shown}
    partly = {c.id: c.result() for c in candidates if c.partial}
    for c in candidates:
        if c.id in parent:
            parent[c.id] = c.parent if c.parent in shown else ROOT
    children: dict[NodeId, list[Node]] = {}
    for node in graph.nodes:
        if node.id in shown:
            children.setdefault(parent[node.id], []).append(node)
    for kids in children.values():
        kids.sort(
            key=lambda n: (n.status == program.PREDICTED, -(n.score or 0.0) if n.status == program.PREDICTED else 0)
        )
    rows: dict[NodeId, float] = {}
    depth: dict[NodeId, int] = {ROOT: 0}
    order = [0]

    def place(node: NodeId) -> float:
        kids = [k for k in children.get(node, []) if k.id not in depth]
        for kid in kids:
            depth[kid.id] = depth[node] + 1
        if not kids:
            rows[node] = order[0]
            order[0] += 1
        else:
            ys = [place(kid.id) for kid in kids]
            rows[node] = sum(ys) / len(ys)
        return rows[node]

    place(ROOT)
    results = [n for n in graph.nodes if n.status == program.EVALUATED and n.id not in partly]
    scores = [n.score for n in results if n.score is not None]
    low, high = (min(scores), max(scores)) if scores else (0.0, 1.0)
    dx, dy, pad, top = 170, 26, 30, 26
    width = max(pad * 2 + dx * max(depth.values()) + 170, 760)  # at least the legend's width
    height = top + pad * 2 + dy * max(order[0] - 1, 0) + 10

    def pos(node: NodeId) -> tuple[float, float]:
        return pad + dx * depth[node], top + pad + dy * rows[node]

    labels = {n.id: f"{n.id} {partly[n.id]}" if n.id in partly else _label(n) for n in graph.nodes}

    def leave(node: NodeId, x0: float, x1: float) -> float:
        """Where a revision leaves ``node``: after its label when there is room, else at the node."""
        end = x0 + 14 + 6.2 * len(labels[node])
        return end if end < x1 - 24 else x0

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">', _legend()]
    for edge in graph.edges:
        if edge.source not in depth or edge.target not in depth:
            continue
        (x0, y0), (x1, y1) = pos(edge.source), pos(edge.target)
        x0 = leave(edge.source, x0, x1)
        target = graph.node(edge.target)
        if parent[edge.target] != edge.source:
            style = 'stroke="#c7c7c7" stroke-dasharray="1 3"'  # a further revision into a merged node
        elif target.status == program.PREDICTED:
            style = f'stroke="{_PREDICTED_STROKE}" stroke-dasharray="4 3"'
        else:
            style = 'stroke="#bbb"'
        xm = (x0 + x1) / 2
        out.append(
            f'<path d="M{x0:.1f},{y0:.1f} C{xm:.1f},{y0:.1f} {xm:.1f},{y1:.1f} {x1 - 8:.1f},{y1:.1f}" '
            f'fill="none" {style}>'
            f"<title>{inert_html(edge.action or str(edge.id))}</title></path>"
        )
    for node in children.get(ROOT, []):  # the seeds revise the run's root
        (x0, y0), (x1, y1) = pos(ROOT), pos(node.id)
        out.append(f'<path d="M{x0:.1f},{y0:.1f} L{x1:.1f},{y1:.1f}" fill="none" stroke="#bbb"/>')
    x, y = pos(ROOT)
    out.append(
        f'<rect x="{x - 16}" y="{y - 9}" width="32" height="18" fill="#ddd"/>'
        f'<text x="{x}" y="{y + 4}" font-size="10" text-anchor="middle">root</text>'
    )
    for node in graph.nodes:
        if node.id in depth:
            out.append(_node(node, labels[node.id], *pos(node.id), low, high, node.id == best, node.id in partly))
    out.append("</svg>")
    return "".join(out)


def _first_parent(graph: PlanGraph, node: NodeId, shown: set[NodeId]) -> NodeId:
    for edge in graph.in_edges(node):
        if edge.source in shown:
            return edge.source
    return ROOT


def _label(node: Node) -> str:
    score = node.score if node.score is not None else 0.0
    if node.status == program.EVALUATED:
        return f"{node.id} {score:.3f}"
    if node.status == program.IMPLEMENTED:
        return f"{node.id} implemented ~{score:.3f}"
    if node.status == program.FAILED:
        return f"{node.id} failed"
    return f"{node.id} ~{score:.3f}"


def _node(node: Node, label: str, x: float, y: float, low: float, high: float, best: bool, partly: bool) -> str:
    score = node.score if node.score is not None else 0.0
    if partly:
        look = f'fill="{_PARTLY_FILL}" stroke="#333"'
    elif node.status == program.EVALUATED:
        look = f'fill="{colour(score, low, high)}" stroke="#333"'
    elif node.status == program.IMPLEMENTED:
        look = 'fill="#fff" stroke="#333" stroke-dasharray="3 2"'
    elif node.status == program.FAILED:
        look = f'fill="{FAILED_COLOUR}" stroke="#333"'
    else:
        look = f'fill="#fff" stroke="{_PREDICTED_STROKE}"'
    if best:
        look = look.replace('stroke="#333"', 'stroke="#d62728" stroke-width="3"')
    tip = f"{node.id} ({'partly scored, no result yet' if partly else node.status}): {label.split(' ', 1)[1]}"
    if node.status in (program.PREDICTED, program.IMPLEMENTED):
        tip += f"\npredicted {score:.3f}" + (f" +- {node.std:.3f}" if node.std else "")
        tip += {1: ", labelled a goal", -1: ", labelled a dead end"}.get(round(node.reward), "")
    summary = node.data.get("summary")
    if summary:
        tip += f"\n{summary}"
    grey = f' fill="{_PREDICTED_STROKE}"' if node.status == program.PREDICTED else ""
    return (
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="8" {look}><title>{inert_html(tip)}</title></circle>'
        f'<text x="{x + 12:.1f}" y="{y + 4:.1f}" font-size="11"{grey}>{html.escape(label)}</text>'
    )


def _legend() -> str:
    items = [
        ('fill="#21918c" stroke="#333"', "result (colour = score)"),
        (f'fill="{_PARTLY_FILL}" stroke="#333"', "partly scored (k/n)"),
        ('fill="#fff" stroke="#333" stroke-dasharray="3 2"', "implemented, not evaluated"),
        (f'fill="{FAILED_COLOUR}" stroke="#333"', "failed"),
        (f'fill="#fff" stroke="{_PREDICTED_STROKE}"', "predicted (~ predicted score)"),
    ]
    out, x = [], 12
    for look, text in items:
        out.append(f'<circle cx="{x}" cy="12" r="6" {look}/><text x="{x + 10}" y="16" font-size="11">{text}</text>')
        x += 24 + 6 * len(text)
    return "".join(out)
