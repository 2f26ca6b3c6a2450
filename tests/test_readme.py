"""What a newcomer reads holds together: the README is short, every link of the README and of docs/ resolves (the
file, and the heading an anchor names), every page of docs/ is on the reference site, and the README's install,
test and lint commands are the ones CI runs (.ci/run)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"(?<!!)\[[^\]]+\]\(([^)\s]+)\)")


def prose(path: Path) -> str:
    """The page without its fenced blocks (a link in an example is not a link)."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def slug(heading: str) -> str:
    """The anchor of a heading, as GitHub and mkdocs' toc both make it for the headings these pages use."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[-\s]+", "-", text).strip("-")


def anchors(path: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} +(.+?) *$", prose(path), re.M)}


def test_the_readme_reads_in_five_minutes():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250
    assert "## Datasets" in lines and any(line.startswith("**TPS**") for line in lines)  # both asked for by name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(page: Path):
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z]+:", target):  # http:, mailto:: not checked offline
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target} (no {resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved})")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no heading #{anchor})")
    assert broken == []


def test_every_docs_page_is_on_the_site():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config[config.index("\nnav:\n") : config.index("\nplugins:\n")]
    assert {p.name for p in PAGES[1:]} <= set(re.findall(r"^ *- (?:[^:]+: )?(\S+\.md)$", nav, re.M))


def test_the_readme_installs_tests_and_lints_as_ci_does():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)
    commands = {line.strip() for block in blocks for line in block.splitlines()}
    install = 'CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF" pip install -e ".[local,dev]"'
    assert install in commands and install in ci.splitlines()
    assert "pytest" in commands and "\npytest\n" in ci
    assert "ruff check . && ruff format --check . && python .ci/typecheck.py" in commands
    for step in ("ruff check .", "ruff format --check .", "python .ci/typecheck.py"):
        assert step in ci.splitlines()
