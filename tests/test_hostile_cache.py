"""A damaged response cache: a row that is not what was written, a file that is not a database.

The cache must check what it reads: a damaged row is dropped and the model asked again (said once, and never scored
as the harness's failure); a damaged file is set aside with a one-line warning and a new one started. Neither may
stop an evaluation or end in a traceback. ``python benchmarks/hostile_harnesses.py`` prints what each attempt met.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import textwrap
from pathlib import Path

import pytest
from command_line import run_metaharness
from fakes import ScriptedModel, ToyTask
from test_hostile_harnesses import current_test

from metaharness.evaluation import evaluate
from metaharness.models.cache import ResponseCache
from metaharness.models.client import Client
from metaharness.models.ledger import Ledger
from metaharness.models.protocol import ChatResult, Choice, Usage

TESTS = Path(__file__).resolve().parent
EXAMPLE_TASK = TESTS.parent / "tasks" / "custom" / "example"
# What each test's attempts met: {test: {attempt: outcome}} (benchmarks/hostile_harnesses.py prints it).
OBSERVED: dict[str, dict[str, str]] = {}
ANSWER = ChatResult([Choice("[DIAGNOSIS]dengue[/DIAGNOSIS]")], Usage(10, 5), 0.1, "m")


def observed(attempt: str, outcome: str) -> None:
    OBSERVED.setdefault(current_test(), {})[attempt] = " ".join(outcome.split())[:300]


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "metaharness.models" and r.levelno >= logging.WARNING]


def damage_rows(path: Path, how: str) -> None:
    """Change every stored result behind the cache's back."""
    with sqlite3.connect(path) as db:
        if how == "not JSON":
            db.execute('UPDATE responses SET result = \'{"choices": [{"text": \'')
        elif how == "another answer":  # still a valid result: only its digest tells
            db.execute("UPDATE responses SET result = replace(result, 'dengue', 'psoriasis')")
        elif how == "a blob":
            db.execute("UPDATE responses SET result = x'00ff00ff'")
        elif how == "JSON of another shape":
            db.execute("UPDATE responses SET result = '[1, 2, 3]', digest = NULL")
        else:
            raise AssertionError(how)


@pytest.mark.parametrize("how", ["not JSON", "another answer", "a blob", "JSON of another shape"])
def test_a_damaged_row_is_dropped_and_asked_again_said_once(tmp_path, caplog, how):
    path = tmp_path / "responses.sqlite"
    cache = ResponseCache(path)
    for key in ("k1", "k2"):
        cache.put(key, "s", ANSWER)
    damage_rows(path, how)
    caplog.set_level(logging.WARNING, logger="metaharness.models")
    assert cache.get("k1") is None and cache.get("k2") is None  # both dropped
    said = warnings_of(caplog)
    observed(how, said[0] if said else "nothing said")
    assert len(said) == 1 and "damaged answer" in said[0] and "asked again" in said[0], said
    assert len(cache) == 0 and cache.dropped == 2
    cache.put("k1", "s", ANSWER)
    assert ResponseCache(path).get("k1") == ANSWER


def test_a_row_written_before_rows_had_digests_still_reads(tmp_path):
    path = tmp_path / "responses.sqlite"
    with sqlite3.connect(path) as db:  # the schema before this change
        db.execute(
            "CREATE TABLE responses (key TEXT PRIMARY KEY, spec TEXT NOT NULL, result TEXT NOT NULL, "
            "created REAL NOT NULL)"
        )
    ResponseCache(tmp_path / "new.sqlite").put("k", "s", ANSWER)
    with sqlite3.connect(tmp_path / "new.sqlite") as db:
        text = db.execute("SELECT result FROM responses").fetchone()[0]
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO responses VALUES ('k', 's', ?, 0)", (text,))
    assert ResponseCache(path).get("k") == ANSWER


def garble(path: Path, keep: int) -> None:
    """Overwrite everything after the first ``keep`` bytes of ``path`` with bytes that are no SQLite page."""
    data = path.read_bytes()
    path.write_bytes(data[:keep] + bytes((i * 7 + 3) % 256 for i in range(max(len(data) - keep, 8192))))


@pytest.mark.parametrize("keep", [100, 0], ids=["garbage after the header", "garbage from the first byte"])
def test_a_damaged_cache_file_is_set_aside_and_a_new_one_started(tmp_path, caplog, keep):
    path = tmp_path / "responses.sqlite"
    written = ResponseCache(path)
    written.put("k", "s", ANSWER)
    written.close()
    garble(path, keep)
    caplog.set_level(logging.WARNING, logger="metaharness.models")
    cache = ResponseCache(path)  # no sqlite3.DatabaseError
    said = warnings_of(caplog)
    observed(f"a cache file with {keep} bytes kept, then garbage", said[0] if said else "nothing said")
    assert len(said) == 1 and "is damaged" in said[0] and "a new one is started" in said[0], said
    assert "\n" not in said[0]
    aside = list(tmp_path.glob("responses.sqlite.damaged-*"))
    assert [p.name for p in aside if not p.name.endswith(("-wal", "-shm"))] == [aside[0].name.split("-wal")[0]]
    assert cache.get("k") is None
    cache.put("k", "s", ANSWER)
    assert ResponseCache(path).get("k") == ANSWER and warnings_of(caplog) == said


def test_a_file_damaged_under_two_open_handles_is_set_aside_once(tmp_path, caplog):
    """Two handles on one file (as two processes would have): the first to read the damage sets the file aside, the
    other finds a new file at the path and only reconnects to it."""
    path = tmp_path / "responses.sqlite"
    writer = ResponseCache(path)
    for i in range(200):  # several pages: the damage is read from disk, not from a connection's page cache
        writer.put(f"k{i}", "s", ANSWER)
    writer.close()
    first, second = ResponseCache(path), ResponseCache(path)
    garble(path, 100)
    caplog.set_level(logging.WARNING, logger="metaharness.models")
    assert first.get("k5") is None and second.get("k7") is None
    second.put("k7", "s", ANSWER)
    assert first.get("k7") == ANSWER and len(first) == 1
    said = [m for m in warnings_of(caplog) if "is damaged" in m]
    observed("a file damaged under two open handles", f"{len(said)} warning: {said[0] if said else ''}")
    assert len(said) == 1 and len(list(tmp_path.glob("responses.sqlite.damaged-*[0-9]"))) == 1


HARNESS = textwrap.dedent(
    """
    class Harness:
        def __init__(self, lm, train):
            self.lm = lm

        def predict(self, x):
            return self.lm(x)
    """
)


def test_an_evaluation_over_a_damaged_cache_scores_as_over_a_sound_one(tmp_path, caplog):
    """The issue's case: a damaged row made every example hitting it score 0, blamed on the harness, run after run."""
    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)
    path = tmp_path / "responses.sqlite"

    def run() -> tuple[list[float], list[str | None], ScriptedModel]:
        backend = ScriptedModel("[DIAGNOSIS]dengue[/DIAGNOSIS]")
        client = Client("openai:scripted", backend, cache=ResponseCache(path), ledger=Ledger())
        report = evaluate(harness, ToyTask(), "val", model=client, workers=1)
        return [r.scores["primary"] for r in report.records], [r.error for r in report.records], backend

    scores, errors, first = run()
    assert errors == [None, None, None] and len(first.requests) == 3
    damage_rows(path, "not JSON")
    caplog.set_level(logging.WARNING, logger="metaharness.models")
    again, errors, second = run()
    observed("every cached answer damaged, the evaluation run again", f"scores {again}, errors {errors}")
    assert again == scores and errors == [None, None, None]
    assert len(second.requests) == 3 and len(warnings_of(caplog)) == 1  # asked again, said once
    third, _, backend = run()
    assert third == scores and backend.requests == []  # the answers were written anew


def test_eval_over_a_damaged_cache_file_goes_on_with_one_line(tmp_path):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / "responses.sqlite").write_bytes(b"SQLite format 3\x00" + b"\xa5" * 8192)
    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)
    run = run_metaharness(
        "eval",
        harness,
        dataset=EXAMPLE_TASK,
        limit=2,
        out=tmp_path / "out",
        env={"METAHARNESS_CACHE_DIR": str(cache_dir)},
    )
    said = [line for line in run.stderr.splitlines() if "response cache" in line]
    observed("eval with a cache file of garbage after its header", f"exit {run.returncode}: {said}")
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert len(said) == 1 and "is damaged" in said[0]
    records = [json.loads(line) for line in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    assert [r["error"] for r in records] == [None, None]
