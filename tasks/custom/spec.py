"""The task file (``task.toml``) of a task folder, and the ``-T KEY=VALUE`` settings that add to or override it.

A complete file (every key but ``[data] input`` / ``target`` and ``[metric] name`` may be left out)::

    name = "sentiment"               # identifier for run directories and records (default: the folder's name)
    description = "..."              # the task in words: what the proposer reads and the standard seeds show

    [data]
    train = "data/train.jsonl"       # files the datasets library reads: .jsonl .json .csv .tsv .parquet .arrow;
    val = "data/val.jsonl"           # globs and lists allowed, relative to the folder. Default: train.*, val.*
    test = "data/test.jsonl"         # (or valid/validation/dev), test.* in the folder or its data/ subfolder
    # source = "hf:OWNER/NAME"       # instead of files: a dataset on the hub (or a folder saved with save_to_disk);
    # config = "main"                #   its configuration and revision; train/val/test then name its splits
    # revision = "main"              #   (default train, validation/val/valid/dev, test)
    input = "review"                 # the column a harness receives, or a template over columns: "{q}\n{options}"
    target = "label"                 # the column of the gold answer
    # id = "uid"                     # a column of unique ids (default: val-0000, val-0001, ...)
    # val_size = 50                  # without a val split: how many train examples to carve out (or a fraction)
    # split_seed = 0                 # and the seed of that carve (recorded in the run)

    [answer]                         # the answer convention (metaharness.tasks.custom.metrics.Answer)
    instruction = "Answer with one word: positive or negative."
    choices = ["positive", "negative"]
    # template = "<answer>{target}</answer>"   # a gold target written as an answer
    # pattern = "<answer>(.*?)</answer>"       # how an answer is read out of a prediction

    [metric]
    name = "choice"                  # exact, normalized_exact, regex, set_f1, jaccard, numeric, choice
    # file = "metric.py"             # or your own function: score(prediction, target[, row]) -> [0, 1]
    # function = "score"

A setting given on the command line (``-T data.config=main``) is a line of this file: a dotted key and a TOML value
(text that is not valid TOML is taken as a string). The data keys may drop their ``data.`` prefix
(``-T input=question``) and ``-T metric=numeric`` names the metric. Unknown keys are refused with the closest known
one.
"""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metaharness.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

TASK_FILE = "task.toml"
TOP_KEYS = ("name", "description", "data", "answer", "metric")
DATA_KEYS = (
    "source",
    "config",
    "revision",
    "train",
    "val",
    "test",
    "input",
    "target",
    "id",
    "val_size",
    "split_seed",
)
ANSWER_KEYS = ("instruction", "template", "pattern", "choices")
# [metric] keys: name, file, function, and the options of the built-ins (checked by the metric itself).
METRIC_KEYS = ("name", "file", "function", "pattern", "separator", "abs_tol", "rel_tol", "choices")
SECTIONS = {"data": DATA_KEYS, "answer": ANSWER_KEYS, "metric": METRIC_KEYS}


@dataclass(frozen=True)
class TaskSpec:
    """A task file read and checked: ``settings`` as nested dicts (the keys above), ``folder`` where relative paths
    start (None for a task named only by ``hf:...``)."""

    settings: dict[str, Any]
    folder: Path | None

    @property
    def data(self) -> dict[str, object]:
        return dict(self.settings.get("data", {}))

    @property
    def answer(self) -> dict[str, Any]:
        return dict(self.settings.get("answer", {}))

    @property
    def metric(self) -> dict[str, object]:
        return dict(self.settings.get("metric", {}))


def _unknown(key: str, known: tuple[str, ...], where: str) -> InputError:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return InputError(f"Unknown key '{key}' in {where}{hint}; known: {', '.join(known)}.")


def check_settings(settings: dict[str, Any], where: str) -> dict[str, Any]:
    """``settings`` with every key known and every section a table; InputError naming the first problem."""
    for key, value in settings.items():
        if key not in TOP_KEYS:
            raise _unknown(key, TOP_KEYS, where)
        if key in SECTIONS:
            if not isinstance(value, dict):
                raise InputError(f"'{key}' in {where} must be a table ([{key}]), got {value!r}.")
            for inner in value:
                if inner not in SECTIONS[key]:
                    raise _unknown(inner, SECTIONS[key], f"[{key}] of {where}")
        elif not isinstance(value, str):
            raise InputError(f"'{key}' in {where} must be text, got {value!r}.")
    return settings


def read_task_file(folder: Path) -> dict[str, Any]:
    """The settings in ``folder/task.toml``, checked; InputError with the TOML error's line otherwise."""
    path = folder / TASK_FILE
    try:
        settings = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{folder} has no {TASK_FILE}; create one with: metaharness init {folder}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path} is not valid TOML: {exc}.") from None
    return check_settings(settings, str(path))


def _shorthand(key: str) -> str:
    if key in DATA_KEYS:
        return f"data.{key}"
    if key == "metric":
        return "metric.name"
    return key


def parse_assignment(text: str) -> tuple[list[str], object]:
    """``KEY=VALUE`` (one line of the task file, see the module docstring) as (key path, value)."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise InputError(f"-T takes KEY=VALUE (e.g. -T data.config=main or -T metric=numeric), got '{text}'.")
    try:
        parsed: object = tomllib.loads(f"value = {value.strip()}")["value"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()
    return _shorthand(key).split("."), parsed


def apply_settings(settings: dict[str, Any], assignments: list[str] | dict[str, Any]) -> dict[str, Any]:
    """A copy of ``settings`` with ``assignments`` (``-T`` strings, or a dict of dotted keys to values) applied."""
    merged = {k: dict(v) if isinstance(v, dict) else v for k, v in settings.items()}
    pairs = (
        [parse_assignment(a) for a in assignments]
        if isinstance(assignments, list)
        else [(_shorthand(k).split("."), v) for k, v in assignments.items()]
    )
    for path, value in pairs:
        if len(path) == 1:
            merged[path[0]] = value
        elif len(path) == 2:
            section = merged.setdefault(path[0], {})
            if not isinstance(section, dict):
                raise InputError(f"'{path[0]}' is a table of the task file; set {path[0]}.KEY=VALUE.")
            section[path[1]] = value
        else:
            raise InputError(f"Task setting {'.'.join(path)} has too many parts: use SECTION.KEY (e.g. data.config).")
    return check_settings(merged, "the task settings")


def flat_settings(assignments: list[str]) -> dict[str, Any]:
    """``-T`` strings as a dict of dotted keys to values (the form a run directory records)."""
    return {".".join(path): value for path, value in (parse_assignment(a) for a in assignments)}
