"""``metaharness init DIR``: write a working task folder (the example task) to start your own from.

The folder is a copy of the example in ``metaharness.tasks.custom`` (``task.toml``, ``README.md`` and the three
splits under ``data/``); ``optimize`` and ``eval`` run it as it is. The docs page ``docs/own-task.md`` walks
through adapting it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import typer

from metaharness.cli.output import console
from metaharness.errors import InputError
from metaharness.tasks.custom import open_task_folder
from metaharness.tasks.custom.task import EXAMPLE


def init(
    folder: Path = typer.Argument(..., help="The task folder to create (it must not exist, or be empty)."),
) -> None:
    """Write a working task folder: a task file, train/val/test splits and a README to adapt to your own task."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise InputError(f"{folder} already exists and is not empty; choose a new folder for the task.")
    shutil.copytree(EXAMPLE, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("task.toml", "README.md"):
        path = folder / name
        path.write_text(path.read_text(encoding="utf-8").replace("THIS_FOLDER", str(folder)), encoding="utf-8")
    task = open_task_folder(folder)
    out = console()
    sizes = ", ".join(f"{split} {len(task.load(split))}" for split in ("train", "val", "test"))
    out.print(f"wrote the task [bold]{task.name}[/] to {folder}: task.toml, README.md, data/ ({sizes} examples)")
    for note in task.notes:
        out.print(f"[yellow]note: {note}[/]")
    out.print("next: adapt task.toml and data/ to your task (docs/own-task.md); score a standard seed, then search:")
    for command in (f"eval zero_shot --dataset {folder}", f"optimize --dataset {folder} --iters 2"):
        out.print(f"  metaharness {command}", soft_wrap=True, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("init")(init)
