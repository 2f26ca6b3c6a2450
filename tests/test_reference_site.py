"""The reference site renders what it is given: `mkdocs build --strict` succeeds, no page shows a raw Sphinx role
(the docstrings are Markdown: `code` spans, not `:class:`), no inline code span is broken across source lines (the
theme shows the break and the indentation inside the code), and the contracts table names who relies on each
contract."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# A role as the page shows it: the marker, then the backticked name (Markdown makes that a <code> element).
ROLES = re.compile(r":(?:py:)?(?:class|mod|meth|func|data|attr|obj|exc):(?:`|<code>)")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs", reason="mkdocs is in the dev extra")
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    return out


def pages(site: Path) -> dict[str, str]:
    return {str(p.relative_to(site)): p.read_text(encoding="utf-8") for p in sorted(site.rglob("*.html"))}


def test_a_raw_role_is_found_as_the_page_would_show_it():
    assert ROLES.findall("see :class:<code>PlanGraph</code> and :meth:`solve`") == [":class:<code>", ":meth:`"]
    assert ROLES.findall("a <code>PlanGraph</code> (class), a:hover, 12:30") == []


def test_the_built_site_has_no_raw_role(site):
    found = {name: ROLES.findall(text) for name, text in pages(site).items()}
    assert {name: hits for name, hits in found.items() if hits} == {}
    reference = [name for name in found if name.startswith("reference/")]
    assert len(reference) == 3  # the API pages were built (and checked)
    assert all('class="doc-signature' in pages(site)[name] for name in reference)


def test_no_inline_code_is_broken_across_lines(site):
    broken = {}
    for name, text in pages(site).items():
        prose = re.sub(r"<pre.*?</pre>", "", text, flags=re.S)
        spans = [m.group(1)[:60] for m in re.finditer(r"<code>(.*?)</code>", prose, re.S) if "\n" in m.group(1)]
        if spans:
            broken[name] = spans
    assert broken == {}


def test_signatures_in_running_text_are_short(site):
    """A call written into a sentence (``plan(history, goal, budget, ...)``) stays short enough not to wrap inside
    its code span; the full signatures are the API sections' own blocks."""
    long = {}
    for name, text in pages(site).items():
        prose = re.sub(r"<pre.*?</pre>", "", text, flags=re.S)
        spans = [html.unescape(re.sub(r"<[^>]+>", "", m.group(1))) for m in re.finditer(r"<code>(.*?)</code>", prose)]
        calls = [s for s in spans if re.match(r"[\w.]+\(.*\)", s) and len(s) > 56]
        if calls:
            long[name] = calls
    assert long == {}
    assert all("css/extra.css" in text for name, text in pages(site).items() if name.startswith("reference/"))


def test_every_contract_names_who_relies_on_it():
    text = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| contract")]
    assert len(rows) >= 15
    for row in rows:
        cells = [cell.strip() for cell in row.strip().strip("|").split(" | ")]
        assert len(cells) == 3 and all(cells), row
