"""Seed harness programs: the first nodes of every search (installed as ``metaharness.candidates``).

The files are harness programs (the contract: ``.protocol``) that run in the sandbox by path, never imported
here. Each of the paper's tasks has a folder holding ``zero_shot.py``, ``few_shot.py`` (training examples
up to a context cap) and ``retrieval.py`` (the most similar training examples by BM25). ``standard/`` holds the
same three for any task: ``standard_seeds`` writes the task's description and answer convention into them.

Which seeds a search starts from (``seed_sources``): a task folder's own ``candidates/*.py`` when it has any,
else the paper task's folder, else the standard seeds written for the task (for a ``Task`` object of your own,
from its description); or the files given by path (``optimize(..., seeds=[...])``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from metaharness.errors import InputError

if TYPE_CHECKING:  # the sandbox worker imports this package (for .protocol) and must not load every task
    from metaharness.tasks.protocol import Task

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


def _read(folder: Path) -> dict[str, str]:
    return {path.stem: path.read_text(encoding="utf-8") for path in sorted(folder.glob("*.py"))}


def seed_sources(task: Task, names: list[str] | None = None) -> dict[str, str]:
    """The seeds a search of ``task`` starts from, ``{name: source}`` in name order (the module docstring says
    which); ``names`` keeps only those, in that order (InputError for an unknown one)."""
    # Here: the sandbox worker imports this package (for .protocol) and must not load the tasks.
    from metaharness.tasks.custom import CustomTask

    if isinstance(task, CustomTask):
        if task.seed_folder is not None:
            available, where = _read(task.seed_folder), str(task.seed_folder)
        else:
            answer = task.answer
            available = standard_seeds(task.description, answer.instruction, answer.template, answer.choices)
            where = "the standard seeds"
    elif (ROOT / task.name).is_dir():
        available, where = _read(ROOT / task.name), str(ROOT / task.name)
    else:  # a Task object of your own: its description is all the seeds can be told
        available, where = standard_seeds(task.description, "", "{target}", ()), "the standard seeds"
    if not available:
        raise InputError(f"No seed harnesses for {task.name} in {where}.")
    unknown = [n for n in names or [] if n not in available]
    if unknown:
        raise InputError(f"Unknown seed(s) {', '.join(unknown)} for {task.name}: choose from {', '.join(available)}.")
    return {name: available[name] for name in names} if names else available
