"""Which task a ``--dataset`` reference names, and finding it again when a run resumes.

A reference is, in this order:

1. ``hf:NAME``: a dataset read with the ``datasets`` library (``open_dataset_task``);
2. a folder holding ``task.toml`` (``open_task_folder``);
3. one of the paper's datasets (``lawbench``, ``symptom2disease``, ``uspto``; ``metaharness.tasks.text``).

``settings`` (``-T`` on the command line, dotted keys) apply to the first two; ``data_dir`` to the third.

``task_origin`` is what a run directory records about its task (``settings.json``, key ``task_source``);
``reopen_task`` opens the same task from that record and refuses one whose train or val examples changed, since
the run's scores would no longer be comparable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from metaharness.errors import InputError
from metaharness.tasks.custom import CustomTask, open_dataset_task, open_task_folder
from metaharness.tasks.custom.data import HUB_PREFIX
from metaharness.tasks.custom.spec import TASK_FILE
from metaharness.tasks.custom.task import TaskSource
from metaharness.tasks.protocol import Task
from metaharness.tasks.text import TEXT_TASK_NAMES, get_text_task


def open_task(
    reference: str,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    settings: Mapping[str, object] | None = None,
) -> Task:
    """The task ``reference`` names (see the module docstring); InputError with what to do otherwise."""
    text = reference.strip()
    folder = Path(text).expanduser()
    own = text.startswith(HUB_PREFIX) or (folder / TASK_FILE).is_file()
    if own and data_dir is not None:
        raise InputError(f"--data-dir is for the paper's datasets; the task {text} reads its own data.")
    if text.startswith(HUB_PREFIX):
        return open_dataset_task(text, settings)
    if (folder / TASK_FILE).is_file():
        return open_task_folder(folder, settings)
    if settings:
        raise InputError(f"-T settings apply to a task folder or an hf: dataset, not to the built-in task {text}.")
    if text.lower() in TEXT_TASK_NAMES:
        return get_text_task(text, data_dir=data_dir)
    if folder.is_dir():
        raise InputError(f"{text} is a folder without {TASK_FILE}; write one (metaharness init DIR shows how).")
    raise InputError(
        f"Unknown task '{text}': use one of {', '.join(TEXT_TASK_NAMES)}. Your own task is a folder with {TASK_FILE} "
        "(metaharness init DIR writes one) or hf:OWNER/NAME."
    )


def task_origin(task: Task) -> TaskSource | None:
    """What a run records about where ``task`` came from; None for the paper's datasets (their name says it)."""
    return TaskSource(**task.origin) if isinstance(task, CustomTask) else None


def reopen_task(origin: TaskSource) -> CustomTask:
    """The task a run recorded (``task_origin``), checked to hold the same train and val examples."""
    task = open_task(str(origin["source"]), settings=dict(origin.get("settings") or {}))
    assert isinstance(task, CustomTask)
    if origin.get("fingerprint") and task.origin["fingerprint"] != origin["fingerprint"]:
        raise InputError(
            f"The train or val examples of the task {origin['source']} changed since the run started, so its scores "
            "would not be comparable: restore the data, or start a new run with another --run-dir."
        )
    return task
