"""Crash-safe file writes: a reader (or a run resumed after SIGKILL) sees the old file or the new one, never half.

Whole files are written to a temporary file in the same folder, flushed to disk and renamed over the target.
JSONL logs are appended one line per write; a line cut short by a kill is skipped when read back. A write that
fails (a full disk) leaves the old file, or the log without the line: the append is undone, so no half line is
left to be read back. Running out of space is the run's failure, not a bug: ``StorageFailure`` (one line, what to
do), which stops the run; ``free_bytes`` tells how much is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from metaharness.errors import space_for
from metaharness.text import json_text, utf8


def free_bytes(folder: Path) -> int:
    """Bytes an unprivileged writer may still use on the file system holding ``folder``."""
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    """The process's umask (read by setting it and setting it back: there is no call that only reads it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (temporary file + fsync + rename); ``StorageFailure`` when no
    space is left (the old file stays). The file gets the mode a plain ``open`` would give it (``0o666`` less the
    umask, so usually 0644), not the temporary file's private 0600."""
    path = Path(path)
    with space_for(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(handle.fileno(), 0o666 & ~_umask())
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    """``atomic_write_bytes`` of ``text`` as UTF-8 (``metaharness.text.utf8``: a lone surrogate is written escaped)."""
    atomic_write_bytes(path, utf8(text))


def atomic_write_json(path: Path, value: object) -> None:
    """``atomic_write_text`` of ``value`` as JSON (``metaharness.text.json_text``: any string reads back equal)."""
    atomic_write_text(path, json_text(value, indent=2, sort_keys=True) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def append_jsonl(path: Path, record: Mapping[str, object]) -> None:
    """Append one JSON line and fsync; a line left unterminated by an earlier kill is closed off first. A write that
    fails is undone (the file is cut back to its old length) and raised: ``StorageFailure`` when no space is left."""
    path = Path(path)
    data = (json_text(record, sort_keys=True) + "\n").encode("utf-8")
    with space_for(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            end = os.fstat(fd).st_size
            if end > 0 and os.pread(fd, 1, end - 1) != b"\n":
                data = b"\n" + data
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, end)
                raise
        finally:
            os.close(fd)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON object line of ``path`` (none when it does not exist); torn or garbled lines (a byte that
    is no UTF-8 included) are skipped."""
    path = Path(path)
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    return [record for line in text.splitlines() if (record := json_object(line)) is not None]


def json_object(line: str) -> dict[str, Any] | None:
    """The JSON object a line holds, or None for a torn line, other text or a JSON value that is not an object."""
    try:
        value = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def clean_temporaries(folder: Path) -> list[Path]:
    """Remove temporary files that a killed ``atomic_write_bytes`` left in ``folder`` (not recursive)."""
    removed = []
    if Path(folder).is_dir():
        for tmp in Path(folder).glob(".*.tmp"):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed
