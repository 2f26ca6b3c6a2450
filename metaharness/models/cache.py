"""A persistent response cache, so re-running the same evaluation makes no model call.

Only deterministic requests are cached: temperature 0, or an explicit seed. The key is a SHA-256 of the model spec
and every field of the ``ChatRequest``. SQLite in WAL mode with one connection per thread makes the cache
safe to share between threads and between processes (parallel evaluation workers).

The default file is ``$METAHARNESS_CACHE_DIR/responses.sqlite``, else ``$XDG_CACHE_HOME/metaharness/...``, else
``~/.cache/metaharness/responses.sqlite``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from metaharness.models.protocol import ChatRequest, ChatResult, Choice, TokenLogprob, ToolCall, Usage

# Bump when the stored format or the meaning of a request changes, so old entries are never misread.
FORMAT_VERSION = 1


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
    """SQLite-backed map from request key to stored ``ChatResult``."""

    def __init__(self, path: str | os.PathLike[str] | None = None):
        self.path = Path(path) if path is not None else default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self._connection() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, spec TEXT NOT NULL, "
                "result TEXT NOT NULL, created REAL NOT NULL)"
            )

    def _connection(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=60.0)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

    def get(self, key: str) -> ChatResult | None:
        row = self._connection().execute("SELECT result FROM responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else result_from_json(row[0])

    def put(self, key: str, spec: str, result: ChatResult) -> None:
        with self._connection() as db:
            db.execute(
                "INSERT OR REPLACE INTO responses (key, spec, result, created) VALUES (?, ?, ?, ?)",
                (key, spec, result_to_json(result), time.time()),
            )

    def __len__(self) -> int:
        return self._connection().execute("SELECT COUNT(*) FROM responses").fetchone()[0]
