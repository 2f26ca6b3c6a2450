"""Inline SVG charts with no external resources: scatter and line series, axes with round ticks, tooltips."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

from metaharness.text import html as inert_html

_VIRIDIS = [(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)]
FAILED_COLOUR = "#b0b0b0"


def colour(value: float, low: float, high: float) -> str:
    """Viridis colour for ``value`` on [low, high] (dark purple = worst, yellow = best)."""
    t = 0.5 if high <= low else min(1.0, max(0.0, (value - low) / (high - low)))
    pos = t * (len(_VIRIDIS) - 1)
    i = min(int(pos), len(_VIRIDIS) - 2)
    f = pos - i
    rgb = [round(a + (b - a) * f) for a, b in zip(_VIRIDIS[i], _VIRIDIS[i + 1], strict=False)]
    return "#{:02x}{:02x}{:02x}".format(*tuple(rgb))


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
    out.append(
        f'<text x="{left + pw / 2}" y="{height - 6}" font-size="12" text-anchor="middle">{html.escape(x_label)}</text>'
    )
    out.append(
        f'<text transform="translate(14,{top + ph / 2}) rotate(-90)" font-size="12" text-anchor="middle">'
        f"{html.escape(y_label)}</text>"
    )
    if diagonal:
        lo, hi = max(x0, y0), min(x1, y1)
        out.append(
            f'<line x1="{sx(lo):.1f}" y1="{sy(lo):.1f}" x2="{sx(hi):.1f}" y2="{sy(hi):.1f}" '
            'stroke="#999" stroke-dasharray="4 3"/>'
        )
    for s in series:
        if s.line and len(s.points) > 1:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y, _ in s.points)
            out.append(f'<polyline points="{path}" fill="none" stroke="{s.colour}" stroke-width="2"/>')
        for x, y, tip in s.points:
            out.append(
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{3 if s.line else 5}" fill="{s.colour}" '
                'fill-opacity="0.8">'
                f"<title>{inert_html(tip)}</title></circle>"  # a tip quotes a summary or an error
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
