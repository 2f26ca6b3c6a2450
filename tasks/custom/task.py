"""Your own task as a ``Task``: a folder with ``task.toml``, or a dataset ``hf:NAME``.

``open_task_folder`` and ``open_dataset_task`` read the task file (``.spec``) and the splits
(``.data``) once, bind the metric (``.metrics``) and return a ``CustomTask``. Everything is read and
checked when the task is opened (a missing column, an unknown metric, a broken metric function: one
``InputError``), so a run never starts on a task it cannot score.

A task folder may hold seed harnesses in ``candidates/*.py``; without them the search starts from the standard
seeds written from the task's description and answer convention (``metaharness.candidates.standard_seeds``).

``CustomTask.origin`` is what a run directory records about where the task came from (the folder or dataset,
the settings given on the command line, the val carve's seed and size, and a fingerprint of the train and val
examples), so that ``metaharness.tasks.open_task`` finds the same task again on resume and a changed task is
noticed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from metaharness.errors import InputError
from metaharness.tasks.custom import data as splits
from metaharness.tasks.custom.metrics import Answer, Metric, make_metric
from metaharness.tasks.custom.spec import TaskSpec, apply_settings, read_task_file
from metaharness.tasks.protocol import Example


class TaskSource(TypedDict, total=False):
    """Where a run's task came from (``settings.json``, key ``task_source``): the task folder, ``hf:`` dataset or
    Python class (``source``), its ``-T`` settings with the val carve's seed and size (``settings``), and a
    ``fingerprint`` of its train and val examples."""

    source: str
    settings: dict[str, Any]
    fingerprint: str


SEEDS_FOLDER = "candidates"
# The working example task `metaharness init DIR` copies.
EXAMPLE = Path(__file__).resolve().parent / "example"
SMALL_VAL = 30  # below this many val examples, one example moves the score by more than 3 points


@dataclass
class CustomTask:
    """A task read from a task file and its splits (the module docstring says how)."""

    name: str
    description: str
    answer: Answer
    metric: Metric
    examples: dict[str, list[Example]]
    origin: TaskSource
    folder: Path | None = None
    notes: list[str] = field(default_factory=list)

    def load(self, split: str) -> list[Example]:
        if split not in splits.SPLITS:
            raise InputError(f"Unknown split '{split}' for task {self.name}: use one of {', '.join(splits.SPLITS)}.")
        if split not in self.examples:
            raise splits.DataError(f"Task {self.name} has no {split} split; add one to its data to evaluate on it.")
        return list(self.examples[split])

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        if not isinstance(prediction, str) or not prediction.strip():
            return self.metric.zeros()
        text = self.answer.read(prediction) if self.metric.reads_answer else prediction
        return self.metric.score(text, example)

    def metric_names(self) -> list[str]:
        return list(self.metric.names)

    @property
    def seed_folder(self) -> Path | None:
        """The folder of the task's own seed harnesses (``candidates/`` beside ``task.toml``), when it has any."""
        if self.folder is None:
            return None
        folder = self.folder / SEEDS_FOLDER
        return folder if folder.is_dir() and any(folder.glob("*.py")) else None


def fingerprint(examples: dict[str, list[Example]]) -> str:
    """sha256 over the train and val examples (ids, inputs, targets): what a resumed run must find again."""
    digest = hashlib.sha256()
    for split in ("train", "val"):
        for example in examples.get(split, []):
            digest.update(json.dumps([split, example.id, example.input, example.target]).encode())
    return digest.hexdigest()


def _checks(task: CustomTask) -> list[str]:
    """Notes on what makes a search on this task unreliable: a small val split, test inputs also in train or val,
    gold answers the metric does not score 1 (a metric or answer convention that does not fit the data)."""
    notes = []
    val = task.examples.get("val", [])
    if len(val) < SMALL_VAL:
        notes.append(
            f"the val split has {len(val)} examples: too few to rank candidates (one example moves the score by "
            f"{1 / max(len(val), 1):.2f}); aim for 100 or more (docs/own-task.md, Pitfalls)"
        )
    seen = {e.input.strip() for split in ("train", "val") for e in task.examples.get(split, [])}
    leaked = [e.id for e in task.examples.get("test", []) if e.input.strip() in seen]
    if leaked:
        notes.append(
            f"{len(leaked)} test example(s) also appear in train or val (first: {leaked[0]}): their test score "
            "measures memory, not the harness; remove them from one side"
        )
    if val:
        gold = [task.score(task.answer.write(e.target), e)["primary"] for e in val]
        if sum(gold) < len(gold):
            notes.append(
                f"the metric gives the val split's own targets (written with answer.template) a mean of "
                f"{sum(gold) / len(gold):.2f}, not 1: check [metric] and [answer] against the data"
            )
    return notes


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "task"


def build_task(
    spec: TaskSpec, default_name: str, origin: TaskSource, read: Callable[[dict[str, Any]], dict]
) -> CustomTask:
    """A task from checked settings: ``read(data_settings)`` gives the split tables; val is carved when missing."""
    data = spec.data
    answer = Answer.from_settings(**spec.answer)
    tables = read(data)
    if "train" not in tables:
        raise InputError(f"Task {default_name} has no train split: add train.jsonl (or set data.train).")
    carved = "val" not in tables
    if carved:
        seed = data.get("split_seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InputError(f"data.split_seed must be an integer, got {seed!r}.")
        size = splits.carve_size(data, len(tables["train"].rows))
        rest, val = splits.carve(tables["train"].rows, size, seed)
        labels = tables["train"].labels
        tables["train"], tables["val"] = splits.Table(rest, labels), splits.Table(val, labels)
        origin["settings"] = {**origin["settings"], "data.split_seed": seed, "data.val_size": size}
    examples = {
        split: splits.examples_of(table, split, data, answer.choices) for split, table in sorted(tables.items())
    }
    probe = next(iter(examples["val"] or examples["train"]), None)
    metric = make_metric(spec.metric, answer, spec.folder, probe)
    name = _safe_name(str(spec.settings.get("name") or default_name))
    description = str(spec.settings.get("description", "")).strip()
    origin["fingerprint"] = fingerprint(examples)
    task = CustomTask(name, description, answer, metric, examples, origin, spec.folder)
    task.notes = _checks(task)
    if carved:
        task.notes.append(f"val carved from train: {len(examples['val'])} examples, split_seed {seed}")
    if not task.description:
        task.notes.append("the task has no description: the proposer and the standard seeds work better with one")
    return task


def open_task_folder(folder: str | Path, settings: Mapping[str, object] | None = None) -> CustomTask:
    """The task in ``folder`` (its ``task.toml``), with ``settings`` (dotted keys, as ``-T`` gives them) applied."""
    path = Path(folder).expanduser().resolve()
    if not path.is_dir():
        raise InputError(f"Task folder {folder} does not exist; create one with: metaharness init {folder}")
    given = dict(settings or {})
    spec = TaskSpec(apply_settings(read_task_file(path), given), path)
    origin = TaskSource(source=str(path), settings=given)

    def read(data: dict[str, Any]) -> dict[str, splits.Table]:
        source = data.get("source")
        if not source:
            return splits.file_tables(path, data)
        name = str(source)
        if name.startswith(splits.HUB_PREFIX):
            name = name[len(splits.HUB_PREFIX) :]
        elif not Path(name).is_absolute():
            name = str(path / name)
        return splits.source_tables(splits.load_source(name, data.get("config"), data.get("revision")), data)

    return build_task(spec, path.name, origin, read)


def open_dataset_task(reference: str, settings: Mapping[str, object] | None = None) -> CustomTask:
    """The task ``hf:NAME`` (a hub dataset, a folder saved with ``save_to_disk``, or a local folder in the hub's
    layout) with ``settings`` (dotted keys) for columns, splits, answer convention and metric."""
    name = reference[len(splits.HUB_PREFIX) :].strip()
    if not name:
        raise InputError("hf: names no dataset; use hf:OWNER/NAME (e.g. hf:openai/gsm8k -T data.config=main).")
    local = Path(name).expanduser()
    if local.exists():  # a local dataset is recorded by its absolute path, so a resume elsewhere finds it
        name = str(local.resolve())
        reference = splits.HUB_PREFIX + name
    given = dict(settings or {})
    spec = TaskSpec(apply_settings({"data": {"source": reference}}, given), None)
    origin = TaskSource(source=reference, settings=given)

    def read(data: dict[str, Any]) -> dict[str, splits.Table]:
        return splits.source_tables(splits.load_source(name, data.get("config"), data.get("revision")), data)

    return build_task(spec, Path(name.rstrip("/")).name, origin, read)
