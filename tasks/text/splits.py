"""Where a split's JSONL file comes from, and proof that it is the paper's file.

Order of sources for ``<folder>/<split>.jsonl``:

1. a local folder with the layout of the upstream ``data/`` folder (``crime_prediction/``, ``symptom_diagnosis/``,
   ``uspto/``): the ``data_dir`` argument, else the environment variable ``METAHARNESS_DATA_DIR``. When a local
   folder is named, nothing is downloaded; a split it lacks is an error.
2. otherwise the pinned upstream commit (``UPSTREAM_COMMIT`` of stanford-iris-lab/meta-harness), downloaded
   once into the cache folder (``METAHARNESS_CACHE_DIR``, else ``$XDG_CACHE_HOME/metaharness``, else
   ``~/.cache/metaharness``).

Every train and val file is checked against the sha256 pinned in ``PINNED_SHA256``. The test splits were not
available where this was written, so their sums could not be pinned: the first download records the sum in
``SHA256SUMS`` beside the cached file and every later load is checked against that record (trust on first use).
The rows are parsed by the ``datasets`` library.
"""

from __future__ import annotations

import codecs
import hashlib
import os
from pathlib import Path
from typing import Any

from metaharness.errors import ConfigurationError, InputError, MetaharnessError

UPSTREAM_REPO = "stanford-iris-lab/meta-harness"
UPSTREAM_COMMIT = "95175f70c758dd1145b395edfe8b67e6f9d80fbd"
UPSTREAM_DATA = "reference_examples/text_classification/data"
DATA_DIR_ENV = "METAHARNESS_DATA_DIR"
CACHE_DIR_ENV = "METAHARNESS_CACHE_DIR"

# sha256 of the paper's train/val files at UPSTREAM_COMMIT. Test sums: see the module docstring.
PINNED_SHA256: dict[str, str] = {
    "crime_prediction/train.jsonl": "36ead48b5e88e02f6bf5944d1c00c561f6592e5573f9ecf05c23affc111c386c",
    "crime_prediction/val.jsonl": "c5d900d64a7be5359579e4c2fc0b499f18ebbe9a96fee1ff43879d511bc992ea",
    "symptom_diagnosis/train.jsonl": "b41e494b40bf971a1eadd79ed4dda527640916abe0a2dc94e047e13ef293ee4c",
    "symptom_diagnosis/val.jsonl": "f6ad74bea9fb59f4a3abf930668042c33fbb7519bc9e2568a9758c2a0b1277e8",
    "uspto/train.jsonl": "5049890cd908a5bbed4f635a2a68c51a8756d50fc09e7648ad4ebc36a295f6d6",
    "uspto/val.jsonl": "824579221c59d1e71895620f539a05f978d8832e067a7956562612eebcdef2ed",
}


class DataError(MetaharnessError):
    """A split is missing, cannot be downloaded, or is not the paper's file."""


def upstream_url(relpath: str) -> str:
    return f"https://raw.githubusercontent.com/{UPSTREAM_REPO}/{UPSTREAM_COMMIT}/{UPSTREAM_DATA}/{relpath}"


def cache_dir() -> Path:
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "metaharness"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _recorded_sums(folder: Path) -> dict[str, str]:
    sums_file = folder / "SHA256SUMS"
    if not sums_file.is_file():
        return {}
    pairs = (line.split(maxsplit=1) for line in sums_file.read_text().splitlines() if line.strip())
    return {name.strip(): digest for digest, name in pairs}


def _record_sum(folder: Path, relpath: str, digest: str) -> None:
    sums = _recorded_sums(folder)
    sums[relpath] = digest
    (folder / "SHA256SUMS").write_text("".join(f"{d}  {n}\n" for n, d in sorted(sums.items())))


def verify(path: Path, relpath: str, expected: str | None) -> None:
    """Raise ``DataError`` when ``path`` does not hash to ``expected`` (``None``: nothing to check)."""
    if expected is None:
        return
    actual = sha256_file(path)
    if actual != expected:
        raise DataError(
            f"{path} is not the paper's {relpath}: sha256 {actual}, expected {expected}. "
            f"Replace it with the file from {upstream_url(relpath)}"
            + (" (or delete it to download again)." if path.is_relative_to(cache_dir()) else ".")
        )


def _download(relpath: str, target: Path) -> None:
    # Start-up (about 50 ms): only a download needs it.
    import httpx

    url = upstream_url(relpath)
    try:
        response = httpx.get(url, timeout=60.0, follow_redirects=True)
    except httpx.HTTPError as exc:
        raise ConfigurationError(
            f"Could not download {url} ({exc}). Check the network, or pass --data-dir / set {DATA_DIR_ENV} to a "
            "folder holding the splits."
        ) from exc
    if response.status_code == 404:
        raise DataError(f"The split {relpath} does not exist upstream ({url} returned 404).")
    if response.status_code != 200:
        raise ConfigurationError(f"Downloading {url} failed with HTTP {response.status_code}; try again later.")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.write_bytes(response.content)
    partial.replace(target)


def locate(relpath: str, data_dir: str | os.PathLike | None = None) -> Path:
    """Path of a verified copy of ``relpath`` (``<folder>/<split>.jsonl``), downloading it when needed."""
    local = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV) or None
    if local is not None:
        folder = Path(local).expanduser()
        path = folder / relpath
        if not folder.is_dir():
            raise InputError(f"Data folder {folder} does not exist; pass an existing folder or omit it to download.")
        if not path.is_file():
            raise DataError(
                f"Split file {relpath} is missing from the data folder {folder}. Add it (from "
                f"{upstream_url(relpath)}), or omit --data-dir / unset {DATA_DIR_ENV} to download the splits."
            )
        verify(path, relpath, PINNED_SHA256.get(relpath) or _recorded_sums(folder).get(relpath))
        return path

    folder = cache_dir() / "data" / UPSTREAM_COMMIT
    path = folder / relpath
    if not path.is_file():
        _download(relpath, path)
        if relpath not in PINNED_SHA256:
            _record_sum(folder, relpath, sha256_file(path))
    verify(path, relpath, PINNED_SHA256.get(relpath) or _recorded_sums(folder).get(relpath))
    return path


def check_text(path: Path, split: str) -> None:
    """Raise ``DataError`` (one line naming the file and the reason) when ``path``, a text file of the ``split``
    split, is empty (or blank) or is not UTF-8 (read in chunks: a file of any size costs little memory)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = lines = 0
    blank = True
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                # exc.object is the chunk after the bytes of a character the previous chunk began (no newline)
                where = lines + exc.object.count(b"\n", 0, exc.start) + 1
                at = offset - (len(exc.object) - len(chunk)) + exc.start
                byte = f"byte 0x{exc.object[exc.start]:02x} at line {where} (byte {at})"
                raise DataError(
                    f"{path} is not UTF-8 text: {byte} cannot be decoded; save the {split} split as UTF-8."
                ) from None
            offset, lines = offset + len(chunk), lines + chunk.count(b"\n")
            blank = blank and not chunk.strip()
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise DataError(f"{path} is not UTF-8 text: it ends inside a character; save it as UTF-8.") from None
    if blank:
        raise DataError(f"{path} is empty: the {split} split needs at least one example.")


# What datasets says of a file that holds no row (a CSV with its header only, JSON lines that are all blank).
NO_DATA = "corresponds to no data"


def no_rows(path: str, split: str) -> DataError:
    """The one-line failure of a split that holds no example."""
    return DataError(f"{path} holds no example: the {split} split needs at least one.")


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Parse a JSONL split with the ``datasets`` library (its Arrow cache lives in our cache folder); an empty
    file, bytes that are no UTF-8 or a file without a row is ``DataError`` naming the file and the reason."""
    # datasets is heavy: loaded on first use.
    import datasets

    split = path.stem
    check_text(path, split)
    datasets.disable_progress_bars()
    try:
        table = datasets.Dataset.from_json(str(path), cache_dir=str(cache_dir() / "datasets"), keep_in_memory=True)
        rows = table.to_list()
    except Exception as exc:  # datasets raises several types for malformed JSON
        if NO_DATA in str(exc):
            raise no_rows(str(path), split) from None
        raise DataError(f"{path} is not valid JSONL: {str(exc) or type(exc).__name__}") from exc
    if not rows:
        raise no_rows(str(path), split)
    return rows
