"""A run's task and seed harnesses: where a task came from (``task_source``), opening it again (``run_task``),
and the programs a search starts from (``seeds_of``).

The task is one of the paper's datasets by name, a task folder (``task.toml``), ``hf:OWNER/NAME`` (with its
``-T`` settings) or any ``Task`` object; the run records where it came from (``task_source``), so that continuing
the run needs only its directory, and a resumed run opens the same task, with the same carved val split, and the
same seeds.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from metaharness.candidates import ROOT as SEEDS
from metaharness.candidates import standard_seeds
from metaharness.errors import InputError
from metaharness.search.loop import Seed
from metaharness.tasks import CustomTask, get_task, open_task, reopen_task, task_origin
from metaharness.tasks.custom.data import HUB_PREFIX
from metaharness.tasks.custom.task import TaskSource, fingerprint
from metaharness.tasks.protocol import Task
from metaharness.tasks.text import TextTask

# How a run records a Task object of the caller's (no file to open it from): its class, after this prefix.
PYTHON_SOURCE = "python:"


def task_source(task: Task) -> TaskSource | None:
    """What a run records about where ``task`` came from, to open it again on resume: None for the paper's
    datasets (the name says it); for your own task its origin (``origin``: the
    folder or ``hf:`` dataset, its settings with the val carve's seed and size, a fingerprint of train and val); for
    any other Task object its class and that fingerprint (such a run is continued by passing the object again)."""
    if isinstance(task, TextTask):
        return None
    origin = task_origin(task)
    if origin is not None:
        return origin
    kind = type(task)
    examples = {split: task.load(split) for split in ("train", "val")}
    return TaskSource(source=f"{PYTHON_SOURCE}{kind.__module__}.{kind.__qualname__}", fingerprint=fingerprint(examples))


def run_task(dataset: str, origin: TaskSource | None, data_dir: str | Path | None = None) -> Task:
    """The task of a run (its ``dataset`` and ``task_source``): a paper dataset by its name, else opened again from
    where the run recorded it came from, checked to hold the same train and val examples (so a carved val split is
    the same one)."""
    if origin is None:
        return get_task(dataset, data_dir=data_dir)
    source = str(origin.get("source", ""))
    if source.startswith(PYTHON_SOURCE):
        raise InputError(
            f"This run's task is a Python object ({source.removeprefix(PYTHON_SOURCE)}): pass it again, "
            "optimize(run_dir, task=...)."
        )
    if data_dir is not None:
        raise InputError(f"--data-dir is for the paper's datasets; the task {source} reads its own data.")
    if not source.startswith(HUB_PREFIX) and not Path(source).is_dir():
        raise InputError(
            f"This run's task folder {source} is missing: restore it there (a run opens its task where it started), "
            "or start a new run with another --run-dir."
        )
    return reopen_task(TaskSource(**origin))


def seeds_of(
    task: str | Task, names: list[str] | None = None, *, files: Sequence[str | os.PathLike[str]] | None = None
) -> list[Seed]:
    """The seed harnesses a search of ``task`` (a Task, or a task's name or folder) starts from: ``files`` when
    given, else the task's own (``seed_sources``: a task folder's ``candidates/*.py``, the paper task's, else the
    standard seeds written for the task); ``names`` keeps only those, in that order."""
    if not files:
        chosen = seed_sources(open_task(task) if isinstance(task, str) else task, names)
        return [Seed(name, source) for name, source in chosen.items()]
    paths = [Path(f) for f in files]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise InputError(f"No seed harness file {', '.join(missing)}: pass .py files that define class Harness.")
    available: dict[str, str] = {}
    for path in paths:
        if path.stem in available:
            raise InputError(f"Two seed files are named {path.stem}: give each seed file its own name.")
        available[path.stem] = path.read_text(encoding="utf-8")
    unknown = [n for n in names or [] if n not in available]
    if unknown:
        raise InputError(f"Unknown seed(s) {', '.join(unknown)}: the seed files are {', '.join(available)}.")
    return [Seed(name, available[name]) for name in names or available]


def _read(folder: Path) -> dict[str, str]:
    return {path.stem: path.read_text(encoding="utf-8") for path in sorted(folder.glob("*.py"))}


def seed_sources(task: Task, names: list[str] | None = None) -> dict[str, str]:
    """The seeds a search of ``task`` starts from, ``{name: source}`` in name order: a task folder's own
    ``candidates/*.py`` when it has any, else the paper task's folder (``metaharness.candidates``), else the
    standard seeds written for the task (for a ``Task`` object of your own, from its description); ``names`` keeps
    only those, in that order (InputError for an unknown one)."""
    if isinstance(task, CustomTask):
        if task.seed_folder is not None:
            available, where = _read(task.seed_folder), str(task.seed_folder)
        else:
            answer = task.answer
            available = standard_seeds(task.description, answer.instruction, answer.template, answer.choices)
            where = "the standard seeds"
    elif (SEEDS / task.name).is_dir():
        available, where = _read(SEEDS / task.name), str(SEEDS / task.name)
    else:  # a Task object of your own: its description is all the seeds can be told
        available, where = standard_seeds(task.description, "", "{target}", ()), "the standard seeds"
    if not available:
        raise InputError(f"No seed harnesses for {task.name} in {where}.")
    unknown = [n for n in names or [] if n not in available]
    if unknown:
        raise InputError(f"Unknown seed(s) {', '.join(unknown)} for {task.name}: choose from {', '.join(available)}.")
    return {name: available[name] for name in names} if names else available
