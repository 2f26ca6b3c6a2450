"""Seed harness programs: the first nodes of every search (installed as ``metaharness.candidates``).

The files are harness programs (the contract: ``.protocol``) that run in the sandbox by path, never imported
here. Each of the paper's tasks has a folder holding ``zero_shot.py``, ``few_shot.py`` (training examples
up to a context cap) and ``retrieval.py`` (the most similar training examples by BM25). ``standard/`` holds the
same three for any task: ``standard_seeds`` writes the task's description and answer convention into them.

Which of them a search starts from is the runner's choice (``metaharness.runner.task.seed_sources``). This package
imports no task: the sandbox worker imports it for ``.protocol``.
"""

from __future__ import annotations

import re
from pathlib import Path

from metaharness.errors import InputError

ROOT = Path(__file__).resolve().parent
STANDARD = ROOT / "standard"
# The block of a standard seed that standard_seeds() rewrites from the task file.
_TASK_BLOCK = re.compile(r"# --- task \(written from the task file\) ---\n.*?# --- end of task ---\n", re.S)


def seed_names(task: str) -> list[str]:
    """The seed harnesses shipped for ``task`` (file stems), e.g. ``["few_shot", "retrieval", "zero_shot"]``."""
    return sorted(path.stem for path in (ROOT / task).glob("*.py"))


def seed_path(task: str, name: str) -> Path:
    """The file of seed ``name`` (``zero_shot``, ``zero-shot`` or ``zero_shot.py``) for ``task``."""
    stem = name.removesuffix(".py").replace("-", "_")
    path = ROOT / task / f"{stem}.py"
    if not path.is_file():
        available = ", ".join(seed_names(task)) or "none"
        raise InputError(f"No seed harness '{name}' for task {task} (seeds: {available}); or pass a .py file path.")
    return path


def task_block(description: str, instruction: str, template: str, choices: list[str] | tuple[str, ...]) -> str:
    """The lines a standard seed gets for a task: its description, answer instruction, template and choices."""
    return (
        "# --- task (written from the task file) ---\n"
        f"DESCRIPTION = {description!r}\n"
        f"INSTRUCTION = {instruction!r}\n"
        f"TEMPLATE = {template!r}\n"
        f"CHOICES: list[str] = {list(choices)!r}\n"
        "# --- end of task ---\n"
    )


def standard_seeds(
    description: str, instruction: str, template: str, choices: list[str] | tuple[str, ...]
) -> dict[str, str]:
    """The standard seeds (``few_shot``, ``retrieval``, ``zero_shot``) as sources, written for a task."""
    block = task_block(description, instruction, template, choices)
    return {
        path.stem: _TASK_BLOCK.sub(lambda _: block, path.read_text(encoding="utf-8"), count=1)
        for path in sorted(STANDARD.glob("*.py"))
    }
