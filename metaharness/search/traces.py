"""A candidate's trace file on one split (``traces/<id>.<split>.jsonl``), grown stage by stage: each stage's records
are written to a part file, then merged into the trace in one atomic write (``merge_trace``)."""

from __future__ import annotations

import json
from pathlib import Path

from metaharness.store.files import atomic_write_text


def merge_trace(trace: Path, part: Path, *, keep: list[str]) -> None:
    """Append the records of ``part`` (a stage's) to ``trace``, keeping only the records of ``keep`` already there
    (a stage cut short by a kill left others), atomically; then remove ``part``."""
    kept = set(keep)
    lines = []
    if trace.exists():
        for line in trace.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("id") in kept:
                    lines.append(line)
            except json.JSONDecodeError:
                continue  # a torn line: its example is scored again if needed
    lines += [line for line in part.read_text(encoding="utf-8").splitlines() if line.strip()]
    atomic_write_text(trace, "".join(line + "\n" for line in lines))
    part.unlink(missing_ok=True)
