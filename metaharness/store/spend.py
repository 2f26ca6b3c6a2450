"""The run's spend journal (``spend.jsonl``): one line per model call, appended and fsynced as the call is counted.

A run's spend is the sum of its lines, over every session of the run, so a session killed at any moment leaves
everything it spent on record except the calls still in flight (sent, not yet answered). Each line is

    {"time": ..., "session": ..., "model": "openai:gpt-4.1", "role": "task", "input_tokens": 812,
     "output_tokens": 9, "cached_tokens": 0, "cache_write_tokens": 0, "tokens": 821, "usd": 0.00166,
     "key": "3f2a..."}

(``tokens`` is input plus output, what a token cap counts; ``key`` is the response cache's key of the request, so
a resumed run knows which calls it already paid for: a repeat is free, see :mod:`metaharness.models.ledger`). A
run directory written before this journal existed gets one ``{"carried": true, ...}`` line holding the last
``spent`` its ``summary.jsonl`` recorded. Lines are written under a lock, so the threads of a parallel evaluation
may record at once; a line torn by a kill is skipped when read back (:mod:`metaharness.store.files`).
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any

from metaharness.store.crash import crash_point
from metaharness.store.files import append_jsonl, read_jsonl

SPEND_FILE = "spend.jsonl"
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens")


class SpendJournal:
    """``spend.jsonl`` of a run directory (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        # Tells the sessions of a run apart: when the journal was opened, by which process, and a random tag.
        self.session = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + f"/{os.getpid()}/{secrets.token_hex(3)}"
        self._lock = threading.Lock()

    def record(self, model: str, role: str, usd: float, *, key: str = "", **tokens: int) -> None:
        """Append one call (``input_tokens``, ``output_tokens``, ... as keywords; ``key``: its request's cache key)
        and fsync it."""
        entry: dict[str, Any] = {"model": model, "role": role, **{k: int(tokens.get(k, 0)) for k in TOKEN_FIELDS}}
        entry["tokens"] = entry["input_tokens"] + entry["output_tokens"]
        entry["usd"] = float(usd)
        if key:
            entry["key"] = key
        self._append(entry)
        crash_point("spend:recorded")

    def carry(self, usd: float, tokens: int) -> None:
        """Record spend from before the journal existed (the ``spent`` of an older run's ``summary.jsonl``)."""
        self._append({"carried": True, "usd": float(usd), "tokens": int(tokens)})

    def _append(self, entry: dict[str, Any]) -> None:
        line = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "session": self.session, **entry}
        with self._lock:
            append_jsonl(self.path, line)

    def exists(self) -> bool:
        return self.path.exists()

    def records(self) -> list[dict[str, Any]]:
        return read_jsonl(self.path)

    def keys(self) -> list[str]:
        """The cache keys of every journaled call (the requests this run paid for)."""
        return [str(entry["key"]) for entry in self.records() if entry.get("key")]

    def totals(self) -> dict[str, float]:
        """What the run has spent so far: ``{"usd": ..., "tokens": ..., "calls": ...}`` (calls: journaled calls)."""
        usd, tokens, calls = 0.0, 0, 0
        for entry in self.records():
            usd += float(entry.get("usd", 0.0))
            tokens += int(entry.get("tokens", 0))
            calls += 0 if entry.get("carried") else 1
        return {"usd": round(usd, 9), "tokens": tokens, "calls": calls}
