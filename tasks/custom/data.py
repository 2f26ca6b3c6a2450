"""The splits of your own task: read with the ``datasets`` library, a missing val split carved from train.

Where the rows come from (``[data]`` of the task file, ``.spec``):

- **files** (no ``source``): each split's files (``train = "data/train.jsonl"``, a glob or a list; by default the
  first of ``SPLIT.jsonl``, ``.json``, ``.csv``, ``.tsv``, ``.parquet``, ``.arrow`` in the folder or its ``data/``
  subfolder, val also under the names valid, validation and dev), read by ``datasets.load_dataset`` with the
  builder of the files' extension;
- **a dataset** (``source = "hf:OWNER/NAME"``, or a path relative to the folder): a folder written by
  ``save_to_disk`` is read with ``datasets.load_from_disk``; anything else goes to
  ``datasets.load_dataset(NAME, config, revision=...)`` as it is: a dataset on the Hugging Face hub (downloaded and
  cached the way the library caches, ``HF_HOME``), or a local folder in the hub's layout. ``train``, ``val`` and
  ``test`` then name the dataset's splits (default ``train``; ``validation``, ``val``, ``valid`` or ``dev``;
  ``test``).

A task needs a train split. Without a val split, ``val_size`` examples of train (default a fifth, at most 100; a
number below 1 is a fraction) are carved out: the examples whose sha256 of ``"<split_seed>:<row index>"`` is
smallest, kept in their order, so the same seed gives the same split on every machine and every resume. The test
split is never carved from and never read by the search; a task without one simply has no test evaluation.

Rows become ``Example`` objects: ``input`` is a column (or a ``str.format`` template
over the row's columns), ``target`` a column (a class-label number becomes its name; a number with
``answer.choices`` declared, the choice at that index; a list, its items one per line), ``id`` a column or
``SPLIT-NNNN``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from metaharness.errors import InputError, MetaharnessError
from metaharness.tasks.protocol import Example
from metaharness.tasks.text.splits import NO_DATA, cache_dir, check_text, no_rows

if TYPE_CHECKING:  # datasets is heavy: imported on first use
    from datasets import Dataset

Row = TypeVar("Row")

SPLITS = ("train", "val", "test")
SPLIT_ALIASES = {"train": ("train",), "val": ("val", "valid", "validation", "dev"), "test": ("test",)}
HUB_SPLIT_ALIASES = {"train": ("train",), "val": ("validation", "val", "valid", "dev"), "test": ("test",)}
BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".tsv": "csv", ".parquet": "parquet", ".arrow": "arrow"}
TEXT_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv")  # checked to be UTF-8 and not empty before datasets reads them
INPUT_COLUMNS = ("input", "question", "prompt", "text", "problem", "query", "sentence")
TARGET_COLUMNS = ("target", "answer", "label", "output", "solution", "completion")
HUB_PREFIX = "hf:"
MAX_CARVED = 100


class DataError(MetaharnessError):
    """A split cannot be read (a missing file, a dataset that does not load)."""


@dataclass(frozen=True)
class Table:
    """One split's rows as read, with the names of class-label columns' values (``{"label": ["neg", "pos"]}``)."""

    rows: list[dict[str, Any]]
    labels: dict[str, list[str]]


def _table(dataset: Dataset) -> Table:
    # datasets is heavy: loaded on first use.
    from datasets import ClassLabel

    labels = {
        name: list(feature.names) for name, feature in dataset.features.items() if isinstance(feature, ClassLabel)
    }
    return Table(dataset.to_list(), labels)


def _cache() -> str:
    return str(cache_dir() / "datasets")


# ---------------------------------------------------------------- files


def _discover(folder: Path, split: str) -> list[Path]:
    for base in (folder, folder / "data"):
        for stem in SPLIT_ALIASES[split]:
            for suffix in BUILDERS:
                if (base / f"{stem}{suffix}").is_file():
                    return [base / f"{stem}{suffix}"]
    return []


def _files(folder: Path, split: str, given: object) -> list[Path]:
    if given is None:
        return _discover(folder, split)
    given_list = given if isinstance(given, list) else [given]
    patterns = [p for p in given_list if isinstance(p, str) and p]
    if not patterns or len(patterns) != len(given_list):
        raise InputError(f"data.{split} must be a file name, a glob or a list of them, got {given!r}.")
    found: list[Path] = []
    for pattern in patterns:
        matches = sorted(folder.glob(pattern)) if any(ch in pattern for ch in "*?[") else [folder / pattern]
        missing = [m for m in matches if not m.is_file()]
        if not matches or missing:
            raise DataError(f"data.{split} names {pattern!r}, but no such file is in {folder}.")
        found.extend(matches)
    return found


def _read_files(files: list[Path], split: str) -> Table:
    # datasets is heavy: loaded on first use.
    import datasets

    suffixes = {path.suffix.lower() for path in files}
    if len(suffixes) != 1 or next(iter(suffixes)) not in BUILDERS:
        raise InputError(
            f"The {split} files {', '.join(p.name for p in files)} must share one of the extensions "
            f"{', '.join(BUILDERS)}."
        )
    suffix = suffixes.pop()
    options = {"delimiter": "\t"} if suffix == ".tsv" else {}
    if suffix in TEXT_SUFFIXES:
        for path in files:
            check_text(path, split)
    datasets.disable_progress_bars()
    named = ", ".join(map(str, files))
    try:
        dataset = datasets.load_dataset(
            BUILDERS[suffix],
            data_files=[str(p) for p in files],
            split="train",
            cache_dir=_cache(),
            keep_in_memory=True,
            **options,
        )
        table = _table(dataset)
    except Exception as exc:  # datasets raises many types for a malformed file
        if NO_DATA in str(exc):
            raise no_rows(named, split) from None
        raise DataError(f"Reading the {split} split from {named} failed: {str(exc) or type(exc).__name__}") from exc
    if not table.rows:
        raise no_rows(named, split)
    return table


def file_tables(folder: Path, data: Mapping[str, object]) -> dict[str, Table]:
    """The splits found as files in ``folder`` (see the module docstring)."""
    tables = {}
    for split in SPLITS:
        files = _files(folder, split, data.get(split))
        if files:
            tables[split] = _read_files(files, split)
    return tables


# ---------------------------------------------------------------- a dataset (the hub, or saved with datasets)


def is_saved_to_disk(path: Path) -> bool:
    """True for a folder written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``."""
    return (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()


def load_source(name: str, config: str | None = None, revision: str | None = None) -> Any:
    """The ``datasets`` object a source names: ``load_from_disk`` for a saved folder, else ``load_dataset`` (the
    hub, or a local folder in the hub's layout), downloaded and cached as the library does."""
    # datasets is heavy: loaded on first use.
    import datasets

    datasets.disable_progress_bars()
    path = Path(name).expanduser()
    try:
        if path.is_dir() and is_saved_to_disk(path):
            return datasets.load_from_disk(str(path), keep_in_memory=True)
        return datasets.load_dataset(name, config, revision=revision)
    except Exception as exc:  # missing dataset, no network, bad config: all end up here
        where = f"{name}" + (f" (config {config})" if config else "") + (f" at revision {revision}" if revision else "")
        raise DataError(
            f"Loading the dataset {where} with the datasets library failed: {type(exc).__name__}: {exc}. Check the "
            "name (and data.config), the network or HF_HUB_OFFLINE, or point data.source at a local copy."
        ) from exc


def source_tables(loaded: Any, data: Mapping[str, object]) -> dict[str, Table]:
    """The train/val/test splits of a loaded dataset (a DatasetDict, or one Dataset taken as train)."""
    # datasets is heavy: loaded on first use.
    import datasets

    if isinstance(loaded, datasets.Dataset):
        available: dict[str, Any] = {"train": loaded}
    else:
        available = dict(loaded)
    tables = {}
    for split in SPLITS:
        given = data.get(split)
        if given is not None:
            if not isinstance(given, str) or given not in available:
                raise InputError(
                    f"data.{split} = {given!r} is not a split of the dataset; it has: {', '.join(available)}."
                )
            tables[split] = _table(available[given])
            continue
        name = next((alias for alias in HUB_SPLIT_ALIASES[split] if alias in available), None)
        if name is not None:
            tables[split] = _table(available[name])
    if "train" not in tables:
        raise InputError(
            f"The dataset has no train split (it has: {', '.join(available)}); name the one to use with data.train."
        )
    return tables


# ---------------------------------------------------------------- carving val, rows to examples


def carve_size(data: Mapping[str, object], train_size: int) -> int:
    """How many train examples become val: ``val_size`` (a count, or a fraction below 1), by default a fifth of
    train, at most ``MAX_CARVED``; always leaving at least one train example."""
    given = data.get("val_size")
    if given is None:
        size = min(MAX_CARVED, max(1, round(train_size / 5)))
    elif isinstance(given, bool) or not isinstance(given, (int, float)) or given <= 0:
        raise InputError(f"data.val_size must be a count >= 1 or a fraction between 0 and 1, got {given!r}.")
    else:
        size = round(given * train_size) if given < 1 else int(given)
    if size < 1 or size >= train_size:
        raise InputError(
            f"Cannot carve {size} val examples out of {train_size} train examples: set data.val_size between 1 and "
            f"{train_size - 1}, or add a val split."
        )
    return size


def carve(rows: list[Row], size: int, seed: int) -> tuple[list[Row], list[Row]]:
    """(the rest, the carved ``size`` rows), both in their original order (see the module docstring)."""
    order = sorted(range(len(rows)), key=lambda i: hashlib.sha256(f"{seed}:{i}".encode()).hexdigest())
    chosen = set(order[:size])
    return [r for i, r in enumerate(rows) if i not in chosen], [r for i, r in enumerate(rows) if i in chosen]


def default_column(columns: list[str], wanted: tuple[str, ...], key: str, split: str) -> str:
    found = next((name for name in wanted if name in columns), None)
    if found is None:
        raise InputError(
            f"Name the {key} column with data.{key} (e.g. -T {key}={columns[0] if columns else 'COLUMN'}): the "
            f"{split} split's columns are {', '.join(columns) or 'none'}."
        )
    return found


def _text(value: object, column: str, labels: dict[str, list[str]], choices: tuple[str, ...]) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        names = labels.get(column) or list(choices)
        if names and 0 <= value < len(names):
            return names[value]
    if isinstance(value, list):
        return "\n".join(_text(item, column, {}, ()) for item in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def examples_of(
    table: Table, split: str, data: Mapping[str, object], choices: tuple[str, ...], *, start: int = 0
) -> list[Example]:
    """The rows of ``table`` as examples (see the module docstring); ids ``SPLIT-NNNN`` count from ``start``."""
    columns = list(table.rows[0]) if table.rows else []
    template = str(data.get("input") or default_column(columns, INPUT_COLUMNS, "input", split))
    target = str(data.get("target") or default_column(columns, TARGET_COLUMNS, "target", split))
    id_column = str(data["id"]) if data.get("id") else None
    for name in [target, *([id_column] if id_column else [])] + ([] if "{" in template else [template]):
        if table.rows and name not in columns:
            raise InputError(f"The {split} split has no column '{name}'; its columns are {', '.join(columns)}.")
    examples = []
    for index, row in enumerate(table.rows):
        if "{" in template:
            try:
                text = template.format_map({k: _text(v, k, table.labels, ()) for k, v in row.items()})
            except (KeyError, IndexError, ValueError) as exc:
                raise InputError(
                    f"data.input template {template!r} does not fit the {split} split (columns: "
                    f"{', '.join(columns)}): {exc}."
                ) from None
        else:
            text = _text(row[template], template, table.labels, ())
        example_id = str(row[id_column]) if id_column else f"{split}-{start + index:04d}"
        examples.append(Example(example_id, text, _text(row[target], target, table.labels, choices), row))
    ids = [e.id for e in examples]
    if len(set(ids)) != len(ids):
        raise InputError(f"The {split} split's ids (column {id_column}) are not unique.")
    return examples
