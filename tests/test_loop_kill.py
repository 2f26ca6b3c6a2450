"""SIGKILL a run at named points (inside an evaluation, inside a commit, between the steps around it): the
repository stays consistent (git fsck) and a resumed run completes with every earlier candidate kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from metaharness.store import RunDirectory

TESTS = Path(__file__).resolve().parent

# A run of the real loop and store with the scripted proposer and evaluator (tests/fakes.py), in its own process.
DRIVER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from fakes import FakeEvaluator, ScriptedProposer, program
    from test_loop import CONFIG
    from metaharness.loop import LoopSettings, Optimizer, Seed
    from metaharness.store import RunDirectory

    run = RunDirectory.open(Path(sys.argv[1]), CONFIG)
    seeds = [Seed("zero", program(0.2)), Seed("few", program(0.3))]
    outcome = Optimizer(run, LoopSettings("toy", 2, 2), ScriptedProposer(), FakeEvaluator(), seeds).run()
    print("best", outcome.best.id, outcome.iterations_done)
    """
)

POINTS = [
    "evaluation:example#3",  # in the middle of the second seed's evaluation
    "commit:journaled#4",  # in the journal, not in git
    "commit:objects-written#2",  # git objects written, refs not moved
    "commit:refs-updated#3",  # committed, working tree not yet synced
    "iteration:planned#2",  # proposals journaled, none evaluated
]


def _run(run_dir: Path, crash: str | None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    env.pop("METAHARNESS_CRASH_AT", None)
    if crash:
        env["METAHARNESS_CRASH_AT"] = crash
    return subprocess.run(
        [sys.executable, "-c", DRIVER, str(run_dir)], env=env, capture_output=True, text=True, timeout=120
    )


def _commits(run_dir: Path) -> dict[str, str]:
    return {c.candidate.id: c.commit for c in RunDirectory.browse(run_dir).store.candidates()}


def _fsck(run_dir: Path) -> None:
    out = subprocess.run(["git", "-C", str(run_dir), "fsck", "--strict"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "error" not in out.stderr.lower() and "missing" not in out.stdout


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_at_any_point_loses_nothing(tmp_path, point):
    run_dir = tmp_path / "run"
    killed = _run(run_dir, point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    _fsck(run_dir)
    before = _commits(run_dir)
    done = _run(run_dir, None)
    assert done.returncode == 0, done.stderr
    _fsck(run_dir)
    after = _commits(run_dir)
    assert {cid: after.get(cid) for cid in before} == before  # every earlier candidate kept, unchanged
    assert list(after) == ["c001", "c002", "c003", "c004"]  # 2 seeds + 1 per iteration, no duplicates
    run = RunDirectory.browse(run_dir)
    assert run.store.best().id == "c004" and run.completed_iterations() == {0, 1, 2}
    assert not list((run_dir / "journal").iterdir())
    assert (
        subprocess.run(["git", "-C", str(run_dir), "status", "--porcelain"], capture_output=True, text=True).stdout
        == ""
    )
