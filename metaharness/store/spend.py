"""The run's spend journal (``spend.jsonl``): one line per model call, appended and fsynced as the call is counted.

A run's spend is the sum of its lines, over every session of the run, so a session killed at any moment leaves
everything it spent on record except the calls still in flight (sent, not yet answered). Each line is

    {"time": ..., "session": ..., "model": "openai:gpt-4.1", "role": "task", "input_tokens": 812,
     "output_tokens": 9, "cached_tokens": 0, "cache_write_tokens": 0, "tokens": 821, "usd": 0.00166,
     "key": "3f2a..."}

(``tokens`` is input plus output, what a token cap counts; ``key`` is the response cache's key of the request, so
a resumed run knows which calls it already paid for: a repeat is free, see ``metaharness.models.ledger``). A
run directory written before this journal existed gets one ``{"carried": true, ...}`` line holding the last
``spent`` its ``summary.jsonl`` recorded. Lines are written under a lock, so the threads of a parallel evaluation
may record at once.

A line that cannot be written stops the run (``StorageFailure``): the call is not answered, so nothing is used that
is not on record. A full disk is foreseen: ``spend.reserve`` holds ``RESERVE_BYTES`` on the journal's disk from the
moment a session opens the run, and is freed to journal the calls in flight when the disk fills.

A damaged line (torn, or garbled by a disk fault) is never dropped from the total, since the caps count what was
spent: when its ``tokens`` and ``usd`` can still be read it counts what they say (and ``SpendJournal.repair``
rewrites it whole, keeping the damaged text under ``"repaired"``); else reading the journal raises
``InputError`` naming the line, and the run does not continue until the line is restored
or its loss accepted (``python -m metaharness.store.repair RUN --accept-spend-loss``, ``SpendJournal.accept_loss``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from metaharness.errors import InputError, StorageFailure, space_for
from metaharness.store.crash import crash_point
from metaharness.store.files import append_jsonl, atomic_write_text

SPEND_FILE = "spend.jsonl"
RESERVE_FILE = "spend.reserve"
# Room for the journal lines of the calls in flight when the disk fills (a line is about 300 bytes).
RESERVE_BYTES = 256 << 10
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens")
# What a damaged line may still tell: the two fields a cap counts, each number ending where the next field begins.
_READABLE = {name: re.compile(rf'"{name}": (-?[0-9][0-9.eE+-]*)\s*[,}}]') for name in ("tokens", "usd")}


class SpendEntry(TypedDict, total=False):
    """One call as a session writes it (``_append`` adds its ``time`` and ``session``): a priced call's model, role,
    token counts, ``tokens`` (input plus output), ``usd`` and cache ``key``; or spend ``carried`` over from an older
    run's log (``usd`` and ``tokens`` only)."""

    model: str
    role: str
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    tokens: int
    usd: float
    key: str
    carried: bool


@dataclass
class JournalLine:
    """One non-empty line of the journal: what it counts (``record``; None when it is damaged beyond reading its
    cost) and whether it is ``damaged`` (not one whole JSON object)."""

    number: int
    text: str
    record: dict[str, Any] | None
    damaged: bool


def _read_line(number: int, text: str) -> JournalLine:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if isinstance(value, dict):
        return JournalLine(number, text, value, False)
    usd, tokens = _READABLE["usd"].search(text), _READABLE["tokens"].search(text)
    if usd is None or tokens is None:
        return JournalLine(number, text, None, True)
    try:
        record: dict[str, Any] = {"repaired": text, "usd": float(usd.group(1)), "tokens": int(tokens.group(1))}
    except ValueError:  # a number garbled inside
        return JournalLine(number, text, None, True)
    if '"carried": true' in text:
        record["carried"] = True
    key = re.search(r'"key": "([0-9a-f]+)"', text)
    if key:
        record["key"] = key.group(1)
    return JournalLine(number, text, record, True)


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
        count = {k: int(tokens.get(k, 0)) for k in TOKEN_FIELDS}
        entry: SpendEntry = {
            "model": model,
            "role": role,
            "input_tokens": count["input_tokens"],
            "output_tokens": count["output_tokens"],
            "cached_tokens": count["cached_tokens"],
            "cache_write_tokens": count["cache_write_tokens"],
            "tokens": count["input_tokens"] + count["output_tokens"],
            "usd": float(usd),
        }
        if key:
            entry["key"] = key
        self._append(entry)
        crash_point("spend:recorded")

    def carry(self, usd: float, tokens: int) -> None:
        """Record spend from before the journal existed (the ``spent`` of an older run's ``summary.jsonl``)."""
        self._append({"carried": True, "usd": float(usd), "tokens": int(tokens)})

    def _append(self, entry: SpendEntry) -> None:
        """Append one line; a line that cannot be written stops the run (``StorageFailure``). With the disk full, the
        reserve (``keep_reserve``) is freed first, so the line is written all the same: nothing spent goes unrecorded
        unless the journal cannot be written at all."""
        line = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "session": self.session, **entry}
        with self._lock:
            try:
                append_jsonl(self.path, line)
                return
            except StorageFailure:
                if not self.reserve.exists():
                    raise self._unrecorded(entry, "no space left on its disk") from None
            except OSError as exc:
                raise self._unrecorded(entry, str(exc)) from None
            self.reserve.unlink()
            try:
                append_jsonl(self.path, line)
            except OSError as exc:
                raise self._unrecorded(entry, str(exc)) from None
        raise StorageFailure(
            f"The disk holding {self.path.parent} is full: the last model call was journaled in {SPEND_FILE} with the "
            "space kept in reserve, and the run stopped. Free space on that disk, then rerun the same command to "
            "continue."
        )

    def _unrecorded(self, entry: SpendEntry, why: str) -> StorageFailure:
        return StorageFailure(
            f"A model call could not be journaled in {self.path} ({why}); the run stopped. It cost "
            f"{entry.get('tokens', 0)} tokens (${float(entry.get('usd', 0.0)):g}), which the run's caps no longer see: "
            "fix the disk, then rerun the same command."
        )

    @property
    def reserve(self) -> Path:
        return self.path.with_name(RESERVE_FILE)

    def keep_reserve(self) -> None:
        """Hold ``RESERVE_BYTES`` on the journal's disk in ``spend.reserve``, freed to journal the calls in flight
        when that disk fills up. ``StorageFailure`` when there is not even that much space."""
        if self.reserve.exists() and self.reserve.stat().st_size >= RESERVE_BYTES:
            return
        with space_for(self.reserve):
            fd = os.open(self.reserve, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.posix_fallocate(fd, 0, RESERVE_BYTES)
                os.fsync(fd)
            except OSError:
                self.reserve.unlink(missing_ok=True)
                raise
            finally:
                os.close(fd)

    def exists(self) -> bool:
        return self.path.exists()

    def lines(self) -> list[JournalLine]:
        if not self.path.exists():
            return []
        text = self.path.read_text(encoding="utf-8", errors="replace")
        return [_read_line(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]

    def records(self) -> list[dict[str, Any]]:
        """Every call on record. A damaged line whose cost cannot be read raises ``InputError`` (which line, and
        how to go on): a total without it would let the caps pass what was spent."""
        records = []
        for line in self.lines():
            if line.record is None:
                raise InputError(
                    f"{self.path} line {line.number} is damaged ({line.text[:60]!r}), so the run's spend cannot be "
                    "totalled and its caps cannot hold. Restore that line (from a backup), or accept losing what "
                    f"that call cost with: python -m metaharness.store.repair {self.path.parent} --accept-spend-loss"
                )
            records.append(line.record)
        return records

    def repair(self) -> list[str]:
        """Rewrite each damaged line whose cost could be read as a whole line (its text kept under ``"repaired"``);
        one note per line. Call only while holding the run lock."""
        fixed = {line.number: line.record for line in self.lines() if line.damaged and line.record is not None}
        return self._rewrite(fixed, "its call is counted from the fields still readable")

    def accept_loss(self) -> list[str]:
        """Record each damaged line whose cost cannot be read as a call that cost nothing, at the user's word (its
        text kept under ``"accepted_loss"``); one note per line. Call only while holding the run lock."""
        fixed = {
            line.number: {"accepted_loss": line.text, "usd": 0.0, "tokens": 0}
            for line in self.lines()
            if line.record is None
        }
        return self._rewrite(fixed, "its loss accepted, the call counted as $0 and 0 tokens")

    def _rewrite(self, fixed: dict[int, dict[str, Any]], how: str) -> list[str]:
        """Replace the lines numbered in ``fixed`` (atomically); a note per line."""
        if not fixed:
            return []
        with self._lock:
            lines = self.lines()
            text = "".join(
                (
                    json.dumps(fixed[line.number], ensure_ascii=False, sort_keys=True)
                    if line.number in fixed
                    else line.text
                )
                + "\n"
                for line in lines
            )
            atomic_write_text(self.path, text)
        damaged = {line.number: line.text for line in lines}
        return [
            f"repaired spend.jsonl line {n}, which was damaged ({damaged[n][:60]!r}): {how} "
            f"(${float(record['usd']):g}, {int(record['tokens'])} tokens)"
            for n, record in sorted(fixed.items())
        ]

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
