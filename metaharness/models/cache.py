"""A persistent response cache, so re-running the same evaluation makes no model call.

Only deterministic requests are cached: temperature 0, or an explicit seed. The key is a SHA-256 of the model spec
and every field of the ``ChatRequest``. SQLite in WAL mode with one connection per thread makes the cache
safe to share between threads and between processes (parallel evaluation workers).

The default file is ``$METAHARNESS_CACHE_DIR/responses.sqlite``, else ``$XDG_CACHE_HOME/metaharness/...``, else
``~/.cache/metaharness/responses.sqlite``.

The cache checks what it reads, since a wrong answer from it would be scored as the harness's: each row carries
the SHA-256 of its key and result (``digest``; rows written before it existed are checked by reading them), and a
row that does not match or does not read as a result is dropped and asked again, said once. A file SQLite finds
damaged (not a database, or malformed) is renamed ``responses.sqlite.damaged-YYYYmmdd-HHMMSS`` with a one-line
warning, and a new file is started.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

from metaharness.models.protocol import ChatRequest, ChatResult, Choice, TokenLogprob, ToolCall, Usage

# Bump when the stored format or the meaning of a request changes, so old entries are never misread. 2: the
# embedded model runs as Q8_0 (``metaharness.models.local``), whose answers are not all its Q4_1 ones.
FORMAT_VERSION = 2
log = logging.getLogger("metaharness.models")
_T = TypeVar("_T")


def default_cache_path() -> Path:
    if os.environ.get("METAHARNESS_CACHE_DIR"):
        return Path(os.environ["METAHARNESS_CACHE_DIR"]).expanduser() / "responses.sqlite"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "metaharness" / "responses.sqlite"


def is_cacheable(request: ChatRequest) -> bool:
    """Deterministic requests only: temperature 0 or an explicit seed."""
    return request.temperature == 0 or request.seed is not None


def request_key(spec: str, request: ChatRequest) -> str:
    payload = {"v": FORMAT_VERSION, "spec": spec, "request": asdict(request)}
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def result_to_json(result: ChatResult) -> str:
    data = asdict(result)
    data.pop("cached", None)
    return json.dumps(data, ensure_ascii=False)


def result_from_json(text: str) -> ChatResult:
    data: dict[str, Any] = json.loads(text)
    choices = [
        Choice(
            text=c["text"],
            parsed=c["parsed"],
            tool_calls=[ToolCall(**t) for t in c["tool_calls"]],
            logprobs=None
            if c["logprobs"] is None
            else [TokenLogprob(t["token"], t["logprob"], tuple((a, b) for a, b in t["top"])) for t in c["logprobs"]],
            finish_reason=c["finish_reason"],
        )
        for c in data["choices"]
    ]
    return ChatResult(
        choices=choices,
        usage=Usage(**data["usage"]),
        latency_s=data["latency_s"],
        model=data["model"],
        raw_id=data["raw_id"],
    )


class ResponseCache:
    """SQLite-backed map from request key to stored ``ChatResult``.

    What it reads is checked (the module docstring): ``get`` returns None for a row that is damaged (not a
    result, or not the one written under its key), which it drops, so the caller asks the model again and ``put``
    writes the answer anew; a damaged file is set aside and a new one started. Each is said once, as a warning of
    the ``metaharness.models`` logger. Other SQLite errors (a full disk, a locked or unreadable file) are raised.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None):
        self.path = Path(path) if path is not None else default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._generation = 0  # moves on each time a damaged file is set aside: every thread then reconnects
        self.dropped = 0  # damaged rows dropped by this instance
        self._checked(self._create)

    def _create(self, db: sqlite3.Connection) -> None:
        with db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, spec TEXT NOT NULL, "
                "result TEXT NOT NULL, created REAL NOT NULL)"
            )
            columns = [row[1] for row in db.execute("PRAGMA table_info(responses)")]
            if "digest" not in columns:  # a cache written before rows carried their digest
                db.execute("ALTER TABLE responses ADD COLUMN digest TEXT")

    def _connection(self) -> sqlite3.Connection:
        local = self._local
        if getattr(local, "db", None) is None or local.generation != self._generation:
            if getattr(local, "db", None) is not None:
                local.db.close()
            local.db = sqlite3.connect(self.path, timeout=60.0)
            local.generation = self._generation
            local.inode = os.stat(self.path).st_ino  # the file this connection reads, to set aside only that one
            local.db.execute("PRAGMA journal_mode=WAL")
            local.db.execute("PRAGMA synchronous=NORMAL")
        db: sqlite3.Connection = local.db
        return db

    def _checked(self, operation: Callable[[sqlite3.Connection], _T]) -> _T:
        """``operation`` on this thread's connection; on a damaged file, set it aside and run it on a new one."""
        try:
            return operation(self._connection())
        except sqlite3.DatabaseError as exc:
            if not _damaged(exc):
                raise
            self._set_aside(exc)
        self._create(self._connection())
        return operation(self._connection())

    def _set_aside(self, exc: sqlite3.DatabaseError) -> None:
        """Move the damaged file (and its WAL files) beside itself, unless another thread or process already has;
        the next connection starts a new file."""
        with self._lock:
            local = self._local
            stale = getattr(local, "generation", None) != self._generation
            try:
                replaced = stale or os.stat(self.path).st_ino != getattr(local, "inode", None)
            except FileNotFoundError:
                replaced = True
            if getattr(local, "db", None) is not None:
                local.db.close()
                local.db = None
            self._generation += 1
            if replaced:
                return
            aside = _aside_name(self.path)
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(f"{self.path}{suffix}", f"{aside}{suffix}")
        log.warning(
            "The response cache %s is damaged (%s): it is kept as %s and a new one is started; the answers it held "
            "will be asked of the model again.",
            self.path,
            exc,
            aside.name,
        )

    def get(self, key: str) -> ChatResult | None:
        """The result stored under ``key``; None when there is none, or when its row is damaged (then dropped)."""
        row = self._checked(
            lambda db: db.execute("SELECT result, digest FROM responses WHERE key = ?", (key,)).fetchone()
        )
        if row is None:
            return None
        text, digest = row
        try:
            if not isinstance(text, str) or (digest is not None and digest != _digest(key, text)):
                raise ValueError("its digest does not match what it holds")
            return result_from_json(text)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            self._drop(key, exc)
            return None

    def _drop(self, key: str, exc: Exception) -> None:
        def delete(db: sqlite3.Connection) -> None:
            with db:
                db.execute("DELETE FROM responses WHERE key = ?", (key,))

        self._checked(delete)
        with self._lock:
            self.dropped += 1
            first = self.dropped == 1
        if first:  # said once: the answers are asked again, and no example is charged for the damage
            log.warning(
                "The response cache %s held a damaged answer (%s: %s): it is dropped and the model is asked again "
                "(further damaged answers are dropped without a word).",
                self.path,
                type(exc).__name__,
                str(exc)[:200],
            )

    def put(self, key: str, spec: str, result: ChatResult) -> None:
        text = result_to_json(result)

        def insert(db: sqlite3.Connection) -> None:
            with db:
                db.execute(
                    "INSERT OR REPLACE INTO responses (key, spec, result, created, digest) VALUES (?, ?, ?, ?, ?)",
                    (key, spec, text, time.time(), _digest(key, text)),
                )

        self._checked(insert)

    def close(self) -> None:
        """Close this thread's connection (SQLite folds the WAL file into the database when the last one closes)."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    def __len__(self) -> int:
        count: int = self._checked(lambda db: db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])
        return count


def _aside_name(path: Path) -> Path:
    """Where a damaged cache file goes: ``NAME.damaged-YYYYmmdd-HHMMSS`` beside it (``-1``, ``-2``, ... if taken)."""
    stem = f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}"
    taken = {p.name for p in path.parent.glob(f"{stem}*")}
    return path.with_name(next(name for n in itertools.count() if (name := f"{stem}-{n}" if n else stem) not in taken))


def _digest(key: str, text: str) -> str:
    """What a row's ``digest`` holds: the SHA-256 of its key and its result, so a row changed on disk, or moved under
    another key, is found out."""
    return hashlib.sha256(f"{key}\n{text}".encode()).hexdigest()


# SQLite's primary result codes for a file that is not a database, or whose content is damaged.
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


def _damaged(exc: sqlite3.DatabaseError) -> bool:
    """Whether SQLite says the file is damaged (not a full disk, a lock or a missing permission)."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python >= 3.11
    if isinstance(code, int):
        return code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text
