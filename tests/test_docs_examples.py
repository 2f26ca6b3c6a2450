"""Every example in docs/ runs as written.

A page's fenced blocks run in order, in one temporary working directory per page, each ``python`` block in a fresh
interpreter (so a block may read a file an earlier block of the page wrote). A ``python`` block whose first line
is ``# needs: model`` uses the embedded model (``local:smollm2-135m``); those run only in the slow test, which
runs every page again with them. Such a block is followed by a ``text`` block showing what it prints on the embedded
model (a page never leaves a reader with an example that shows nothing); the slow test checks that it prints that:
something, starting and ending with the lines shown, compared by their first word (the model's own words may differ
from one machine to another). A ``python`` block whose first line is ``# not run here: REASON`` (a search that takes
minutes, a cluster, a hosted model's key) is only compiled. In ``bash`` blocks the cheap lines run:
``metaharness plan solve FILE``. A ``json`` plan graph followed by a ``json`` result is solved and must give that
result (``seconds`` aside). docs/own-task.md is checked by its own tests.

The blocks run with ``METAHARNESS_EXAMPLES_PYTHON`` when it is set (an interpreter, e.g. a fresh virtual environment's
with only ``pip install .``: ``.ci/core_install.sh`` runs the model-free examples so), else with this one.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from metaharness.planner import PlanGraph, solve

ROOT = Path(__file__).resolve().parents[1]
NEEDS_MODEL = "# needs: model"
NOT_RUN = "# not run here:"
CHEAP_COMMAND = re.compile(r"^metaharness plan solve \S+")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
PYTHON = os.environ.get("METAHARNESS_EXAMPLES_PYTHON") or sys.executable


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    language: str
    text: str

    @property
    def needs_model(self) -> bool:
        return self.text.startswith(NEEDS_MODEL)

    @property
    def not_run(self) -> bool:
        return self.text.startswith(NOT_RUN)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> dict[str, tuple[str, int]]:
    found = {}
    for path in sorted((ROOT / "docs").glob("*.md")):
        if path.name != "own-task.md":
            found[f"docs/{path.name}"] = (path.read_text(), 1)
    return found


def blocks(page: str) -> list[Block]:
    text, first_line = pages()[page]
    return [
        Block(page, first_line + text[: m.start()].count("\n"), m.group(1), m.group(2)) for m in FENCE.finditer(text)
    ]


PAGES = sorted(pages())


def run_python(block: Block, cwd: Path, timeout: float) -> str:
    """Run the block; returns what it printed."""
    script = cwd / f"example_{block.line}.py"
    script.write_text(block.text)
    env = {**os.environ, "METAHARNESS_CACHE_DIR": str(cwd / ".cache")}
    done = subprocess.run([PYTHON, script.name], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{block.where} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def shown_output(page_blocks: list[Block], block: Block) -> str | None:
    """The ``text`` block right after ``block`` on its page: what the page says it prints."""
    following = page_blocks[page_blocks.index(block) + 1 :]
    return following[0].text if following and following[0].language == "text" else None


def first_words(text: str) -> list[str]:
    return [line.split()[0] for line in text.strip().splitlines() if line.strip()]


def check_printed(block: Block, printed: str, shown: str) -> None:
    """The block printed something, beginning and ending as the page shows (first words of the lines)."""
    got, expected = first_words(printed), first_words(shown)
    assert got, f"{block.where} printed nothing; the page shows:\n{shown}"
    assert (got[0], got[-1]) == (expected[0], expected[-1]), f"{block.where} printed:\n{printed}\npage shows:\n{shown}"


def run_bash(block: Block, cwd: Path) -> int:
    """Run the block's cheap lines (``metaharness plan solve FILE``); returns how many ran."""
    ran = 0
    for line in block.text.splitlines():
        command = CHEAP_COMMAND.match(line.strip())
        if command is None:
            continue
        argv = [PYTHON, "-m", "metaharness", *shlex.split(command.group(0))[1:]]
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{block.where}: {command.group(0)} failed:\n{done.stderr[-2000:]}"
        json.loads(done.stdout)
        ran += 1
    return ran


def close(actual: Any, expected: Any) -> bool:
    """Equal JSON, numbers to the digits the page shows."""
    if isinstance(expected, float) or (isinstance(expected, int) and isinstance(actual, float)):
        return isinstance(actual, (int, float)) and math.isclose(actual, expected, rel_tol=1e-3, abs_tol=1e-4)
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and expected.keys() <= actual.keys()
            and all(close(actual[k], v) for k, v in expected.items())
        )
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(map(close, actual, expected))
    return actual == expected


def check_json(page_blocks: list[Block]) -> None:
    """Graphs on a page must load; a graph followed by a result must solve to it."""
    data = [(b, json.loads(b.text)) for b in page_blocks if b.language == "json"]
    followers = [value for _, value in data[1:]] + [None]
    for (block, value), following in zip(data, followers, strict=False):
        if not (isinstance(value, dict) and "edges" in value):
            continue
        graph = PlanGraph.from_json(value)
        if isinstance(following, dict) and "status" in following:
            result = solve(graph).to_json()
            shown = {k: v for k, v in following.items() if k != "seconds"}
            assert close(result, shown), f"{block.where}: solves to {result}, the page shows {following}"


def run_page(page: str, cwd: Path, *, with_model: bool) -> None:
    page_blocks = blocks(page)
    check_json(page_blocks)
    for block in page_blocks:
        if block.language == "python" and block.not_run:
            compile(block.text, block.where, "exec")
        elif block.language == "python" and (with_model or not block.needs_model):
            printed = run_python(block, cwd, timeout=1800 if block.needs_model else 120)
            shown = shown_output(page_blocks, block)
            if block.needs_model and shown is not None:
                check_printed(block, printed, shown)
        elif block.language == "bash":
            run_bash(block, cwd)


@pytest.mark.parametrize("page", PAGES)
def test_examples_run_without_a_model(page: str, tmp_path: Path) -> None:
    run_page(page, tmp_path, with_model=False)


def test_the_pages_have_examples_of_every_kind() -> None:
    """The extraction finds what the pages hold (a broken fence would silently skip examples)."""
    every = [b for page in PAGES for b in blocks(page)]
    python = [b for b in every if b.language == "python"]
    assert sum(b.needs_model for b in python) >= 2 and sum(not b.needs_model for b in python) >= 4
    assert sum(CHEAP_COMMAND.match(line.strip()) is not None for b in every for line in b.text.splitlines()) >= 2
    agent_loops = [b for b in python if "while session.step is not None" in b.text]
    assert {b.needs_model for b in agent_loops} == {False, True}
    for page in PAGES:  # every example that needs a model shows what it prints on the embedded model
        page_blocks = blocks(page)
        silent = [b.where for b in page_blocks if b.needs_model and shown_output(page_blocks, b) is None]
        assert silent == [], f"no output shown after {silent}"


@pytest.mark.slow
def test_examples_run_with_the_embedded_model(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    for page in PAGES:
        if any(b.needs_model for b in blocks(page)):
            folder = tmp_path / page.replace("/", "_")
            folder.mkdir()
            run_page(page, folder, with_model=True)
