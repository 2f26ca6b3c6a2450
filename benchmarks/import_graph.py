"""The import graph between the package's parts, drawn from the source, and whether it matches the written layers.

The graph is the one ``tests/test_layers.py`` reads (``ast`` over ``metaharness/`` and the folders installed as
``metaharness.proposers``, ``.tasks`` and ``.candidates``; imports inside functions included, those under
``if TYPE_CHECKING:`` left out), collapsed to the package's parts: a subpackage (``store``) or a top-level module
(``budget``). The picture (docs/images/import-graph.svg) puts each part in the row of its layer, the bottom layer
at the bottom, with an arrow from a part to each part it imports (dashed: only inside functions; red: to a layer
above, which the layers forbid). It then checks, and prints, that the picture matches the layers as
docs/architecture.md writes them ("**Layers.** From the bottom: ...; ...; ..."): the same layers in the same order
as the test's, every part in one of them, and no import up a layer. Exit code 0 when it matches, 1 when not.

    python benchmarks/import_graph.py            # writes docs/images/import-graph.svg
"""

from __future__ import annotations

import re
import sys
from html import escape
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "images" / "import-graph.svg"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
sys.path.insert(0, str(ROOT / "tests"))

from test_layers import LAYERS, graph  # noqa: E402 (the tests folder is not a package: on the path above)

ROW, BOX_H, GAP, LABEL_W, MARGIN = 90, 28, 14, 250, 20
STOP_WORDS = {"and", "the"}


def part_edges() -> dict[tuple[str, str], bool]:
    """(part, imported part) -> whether every import behind it is inside a function."""
    edges: dict[tuple[str, str], bool] = {}
    for module, targets in graph().items():
        for target, inside in targets.items():
            if "metaharness" in (module, target):
                continue  # the package's root runs with every submodule: no layer of its own
            key = (module.split(".")[1], target.split(".")[1])
            if key[0] != key[1]:
                edges[key] = edges.get(key, True) and inside
    return edges


def layer_of(part: str) -> int | None:
    return next((i for i, (_, parts) in enumerate(LAYERS) if part in parts), None)


def written_layers() -> list[str]:
    """The layers docs/architecture.md names, from the bottom (its "**Layers.** From the bottom: ..." sentence)."""
    text = " ".join(ARCHITECTURE.read_text(encoding="utf-8").split())
    found = re.search(r"\*\*Layers\.\*\* From the bottom: (.*?)\. A module", text)
    return [phrase.strip() for phrase in found.group(1).split(";")] if found else []


def mismatches(parts: set[str], edges: dict[tuple[str, str], bool]) -> list[str]:
    """How the graph and the written layers disagree (nothing when they match)."""
    found = []
    written = written_layers()
    if len(written) != len(LAYERS):
        found.append(f"docs/architecture.md names {len(written)} layers, tests/test_layers.py {len(LAYERS)}")
    for (name, _), phrase in zip(LAYERS, written, strict=False):
        words = set(re.findall(r"[a-z]+", name)) - STOP_WORDS
        if not words <= set(re.findall(r"[a-z]+", phrase.lower())):
            found.append(f"layer {name!r} is written as {phrase!r}")
    found += [f"{part} is in no layer" for part in sorted(parts) if layer_of(part) is None]
    for (source, target), _ in sorted(edges.items()):
        low, high = layer_of(source), layer_of(target)
        if low is not None and high is not None and high > low:
            found.append(f"{source} ({LAYERS[low][0]}) imports {target} ({LAYERS[high][0]}), a layer above")
    return found


def draw(parts: set[str], edges: dict[tuple[str, str], bool]) -> str:
    """The SVG: one row per layer (the bottom layer lowest), the parts in it left to right, the imports as arrows."""
    rows = [sorted(p for p in parts if layer_of(p) == i) for i in range(len(LAYERS))]
    orphans = sorted(p for p in parts if layer_of(p) is None)
    rows += [orphans] if orphans else []  # shown on top, in red: in no layer
    widths = [sum(9 * len(p) + 16 + GAP for p in row) for row in rows]
    width = LABEL_W + max(widths) + 2 * MARGIN
    height = len(rows) * ROW + 2 * MARGIN
    place: dict[str, tuple[float, float, float]] = {}  # part -> (x of centre, y of centre, box width)
    labels = []
    for i, row in enumerate(rows):
        y = height - MARGIN - ROW * i - ROW / 2
        name = LAYERS[i][0] if i < len(LAYERS) else "in no layer"
        labels.append(f'<text x="{MARGIN}" y="{y + 5}" class="layer">{escape(name)}</text>')
        x = LABEL_W + MARGIN + (max(widths) - widths[i]) / 2
        for part in row:
            w = 9 * len(part) + 16
            place[part] = (x + w / 2, y, w)
            x += w + GAP
    arrows = []
    for (source, target), inside in sorted(edges.items()):
        (x1, y1, _), (x2, y2, _) = place[source], place[target]
        up = (layer_of(target) or 0) > (layer_of(source) or 0) or layer_of(target) is None
        y1 += -BOX_H / 2 if y2 < y1 else BOX_H / 2 if y2 > y1 else 0
        y2 += BOX_H / 2 if y2 < y1 else -BOX_H / 2 if y2 > y1 else 0
        kind = " up" if up else " inside" if inside else ""
        bend = f"Q {(x1 + x2) / 2} {min(y1, y2) - 30}" if y1 == y2 else "L"
        arrows.append(f'<path d="M {x1:.1f} {y1:.1f} {bend} {x2:.1f} {y2:.1f}" class="edge{kind}"/>')
    boxes = []
    for part, (x, y, w) in sorted(place.items()):
        kind = " orphan" if layer_of(part) is None else ""
        boxes.append(
            f'<rect x="{x - w / 2:.1f}" y="{y - BOX_H / 2}" width="{w}" height="{BOX_H}" rx="5" class="part{kind}"/>'
            f'<text x="{x:.1f}" y="{y + 5}" text-anchor="middle">{escape(part)}</text>'
        )
    style = (
        "text{font:14px monospace}.layer{font:bold 13px sans-serif;fill:#555}"
        ".part{fill:#eef3fb;stroke:#4a6fa5}.part.orphan{fill:#fdd;stroke:#c00}"
        ".edge{fill:none;stroke:#8899aa;stroke-width:1;stroke-opacity:.6;marker-end:url(#arrow)}"
        ".edge.inside{stroke-dasharray:4 3}.edge.up{stroke:#c00;stroke-width:2}"
    )
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}">',
            "<title>metaharness: imports between the package's parts, by layer (benchmarks/import_graph.py)</title>",
            f"<style>{style}</style>",
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
            'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#8899aa"/></marker></defs>',
            '<rect width="100%" height="100%" fill="white"/>',
            *labels,
            *arrows,
            *boxes,
            "</svg>",
            "",
        ]
    )


def main() -> int:
    edges = part_edges()
    parts = {p for edge in edges for p in edge} | {m.split(".")[1] for m in graph() if m != "metaharness"}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(draw(parts, edges), encoding="utf-8")
    inside = sum(edges.values())
    where = OUT.relative_to(ROOT)
    print(f"{len(parts)} parts, {len(edges)} imports between them ({inside} only inside functions): {where}")
    found = mismatches(parts, edges)
    if found:
        print("does NOT match the layers of docs/architecture.md:")
        print("\n".join(f"  {line}" for line in found))
        return 1
    print(f"matches the {len(LAYERS)} layers of docs/architecture.md: every part in one, no import up a layer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
