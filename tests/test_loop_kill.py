"""SIGKILL a run at every named crash point (in the proposer's planning and probe, inside an evaluation, inside a
commit, between a commit and its log line, in the test-split step, ...): the process kills itself (its own pid,
no wrapper), then a resumed run completes. After each kill and each resume: git is consistent (fsck), no candidate
is lost or changed, summary.jsonl has every line exactly once, everything spent before the kill is in the spend
journal (none forgotten), and a dollar cap holds over both sessions. The run: tests/loop_driver.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from loop_driver import CALL_USD

from metaharness.store import RunDirectory, program_graph

TESTS = Path(__file__).resolve().parent
SOURCES = TESTS.parent / "metaharness"

# The run's model calls, in order (a crash point's #N counts its hits):
#   1-8 the seeds' evaluations (4 examples each), 9-11 iteration 1's planning call and two probe calls,
#   12-15 its candidate's evaluation (after its intermediate, checked only), 16-18 and 19-22 the same in iteration 2,
#   23-38 the test split (best and front).
POINTS = [
    "evaluation:example#3",  # in the middle of the first seed's evaluation
    "spend:recorded#10",  # during the proposer's probe in iteration 1
    "spend:recorded#16",  # the proposer's planning call in iteration 2
    "spend:recorded#30",  # in the test-split step
    "iteration:proposed#2",  # iteration 1: proposals returned, not yet journaled
    "iteration:planned#2",  # proposals journaled, none evaluated
    "candidate:evaluated#3",  # evaluated, not yet journaled
    "commit:journaled#4",  # in the journal, not in git
    "commit:objects-written#4",  # iteration 1's candidate: git objects written, refs not moved
    "commit:refs-updated#3",  # committed, its summary.jsonl line not yet written
    "commit:logged#4",  # logged, its journal entry not yet removed
    "evaluation:journaled#3",  # a candidate's evaluation journaled, not yet in its git note
    "evaluation:recorded#2",  # an evaluation in the note, its summary.jsonl line not yet written
    "iteration:logged#2",  # iteration 1 logged, its plan not yet removed
    "graph:saved#6",  # iteration 1's predictions in the program graph, its plan not yet journaled
    "graph:saved#7",  # the intermediate committed (implemented) and in the graph, its child not yet committed
    "test:evaluated#2",  # a test-split evaluation done, not saved
    "test:saved#1",  # a test result saved, its line not yet written
]
ALL_CALLS = 38
CANDIDATES = ["c001", "c002", "c003", "c004", "c005"]  # 2 seeds, iteration 1's chain (c003 -> c004), iteration 2's
EVALUATED = ["c001", "c002", "c004", "c005"]


def _run(tmp_path: Path, crash: str | None = None, max_cost: float | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    env.pop("METAHARNESS_CRASH_AT", None)
    if crash:
        env["METAHARNESS_CRASH_AT"] = crash
    args = [sys.executable, str(TESTS / "loop_driver.py"), str(tmp_path / "run")]
    args += [] if max_cost is None else [str(max_cost)]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)


def _outcome(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _commits(run_dir: Path) -> dict[str, str]:
    return {c.candidate.id: c.commit for c in RunDirectory.browse(run_dir).store.candidates()}


def _fsck(run_dir: Path) -> None:
    out = subprocess.run(["git", "-C", str(run_dir), "fsck", "--strict"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "error" not in out.stderr.lower() and "missing" not in out.stdout


def _calls_made(tmp_path: Path) -> int:
    """Model calls answered so far, as the models themselves logged them."""
    log = tmp_path / "calls.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def _journaled(run_dir: Path) -> dict[str, float]:
    return RunDirectory.browse(run_dir).spent()


def _assert_nothing_forgotten(tmp_path: Path) -> dict[str, float]:
    spent = _journaled(tmp_path / "run")
    assert spent["calls"] == _calls_made(tmp_path)  # every answered call is in the journal
    assert spent["usd"] == pytest.approx(CALL_USD * spent["calls"]) and spent["tokens"] == 15 * spent["calls"]
    return spent


def _assert_log_complete(run_dir: Path) -> RunDirectory:
    """Every committed candidate and saved test result has exactly one line; no iteration is logged twice."""
    run = RunDirectory.browse(run_dir)
    logged = [r["id"] for r in run.log_records("candidate")]
    assert sorted(logged) == [c.id for c in run.candidates()] and len(set(logged)) == len(logged)
    iterations = [r["iteration"] for r in run.log_records("iteration")]
    assert len(set(iterations)) == len(iterations)
    tested = [r["id"] for r in run.log_records("test")]
    saved = sorted(p.name.split(".")[0] for p in (run_dir / "evals").glob("c*.test.json"))
    assert sorted(tested) == saved and len(set(tested)) == len(tested)
    return run


def _assert_clean(run_dir: Path) -> None:
    assert not list((run_dir / "journal").iterdir())
    status = subprocess.run(["git", "-C", str(run_dir), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == ""


def _assert_the_chain_and_the_graph(run: RunDirectory) -> None:
    """Iteration 1's chain is two commits (c003 implemented, c004 its child); the graph holds every candidate under
    its id and the unchosen prediction, once."""
    stored = {c.candidate.id: c for c in run.store.candidates()}
    assert stored["c003"].candidate.implemented and stored["c004"].candidate.parent == "c003"
    assert run.store.repo.commit(stored["c004"].commit).parents[0].hexsha == stored["c003"].commit
    assert run.store.repo.commit(stored["c003"].commit).parents[0].hexsha == stored["c002"].result  # c002 was scored
    graph = program_graph.load(run.path)
    assert graph is not None and [n.id for n in graph.nodes if n.status == "predicted"] == ["later"]
    assert {n.id: n.status for n in graph.nodes if n.id != "later"} == {
        "c001": "evaluated",
        "c002": "evaluated",
        "c003": "implemented",
        "c004": "evaluated",
        "c005": "evaluated",
    }
    assert sorted(e.id for e in graph.edges) == ["c001->later", "c002->step", "c004->c005", "step->goal"]
    assert program_graph.sync(program_graph.load(run.path), run.candidates()).to_json() == graph.to_json()


def test_the_points_cover_every_crash_point_in_the_code():
    named = set()
    for source in SOURCES.rglob("*.py"):
        named |= set(re.findall(r'crash_point\("([^"]+)"\)', source.read_text(encoding="utf-8")))
    assert named and named == {p.split("#")[0] for p in POINTS}


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_at_any_point_loses_nothing_and_forgets_no_spend(tmp_path, point):
    run_dir = tmp_path / "run"
    killed = _run(tmp_path, point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr  # the run's own process died at the point
    _fsck(run_dir)
    before = _commits(run_dir)
    spent_before = _assert_nothing_forgotten(tmp_path)
    assert 0 < spent_before["calls"] < ALL_CALLS
    done = _outcome(_run(tmp_path))
    _fsck(run_dir)
    after = _commits(run_dir)
    assert {cid: after.get(cid) for cid in before} == before  # every earlier candidate kept, unchanged
    assert list(after) == CANDIDATES  # no duplicates, none lost
    run = _assert_log_complete(run_dir)
    best = run.store.best()
    assert best is not None and best.id == "c005" and run.completed_iterations() == {0, 1, 2}
    assert sorted(r["id"] for r in run.log_records("test")) == EVALUATED  # the best and the front, once each
    _assert_the_chain_and_the_graph(run)
    _assert_clean(run_dir)
    spent_after = _assert_nothing_forgotten(tmp_path)
    assert spent_after["usd"] >= spent_before["usd"]
    assert spent_after["calls"] == spent_before["calls"] + done["calls"]  # the resumed session added its own
    assert spent_after["calls"] >= ALL_CALLS  # the whole run was paid for, some of it twice
    assert run.log_records("iteration")[-1]["spent"]["usd"] <= spent_after["usd"]


@pytest.mark.parametrize("point", ["spend:recorded#10", "spend:recorded#15", "commit:refs-updated#3"])
def test_a_dollar_cap_holds_across_a_kill_mid_iteration(tmp_path, point):
    cap = 0.0205  # 21 calls of $0.001: the run stops in iteration 2, short of its 38 calls
    run_dir = tmp_path / "run"
    killed = _run(tmp_path, point, max_cost=cap)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    spent_before = _assert_nothing_forgotten(tmp_path)
    # Mid-iteration: the last spend summary.jsonl recorded (the seeds' iteration line) is less than what was spent.
    logged = [r["spent"]["usd"] for r in RunDirectory.browse(run_dir).log_records() if "spent" in r]
    assert logged and logged[-1] < spent_before["usd"]
    done = _outcome(_run(tmp_path, max_cost=cap))
    assert done["stopped"].startswith("cost cap reached")
    spent = _assert_nothing_forgotten(tmp_path)
    assert cap <= spent["usd"] <= cap + CALL_USD  # reached, and passed by at most the call that crossed it
    _fsck(run_dir)
    _assert_log_complete(run_dir)
    # Once reached, the cap refuses the next session's first call before it is sent.
    again = _outcome(_run(tmp_path, max_cost=cap))
    assert again["calls"] == 0 and again["stopped"].startswith("cost cap reached")
    assert _calls_made(tmp_path) == spent["calls"]
