"""End to end, offline: `metaharness optimize` on symptom2disease with the embedded model and the offline proposer,
the git record it leaves, resume to one more iteration, and a SIGKILL in the middle of an evaluation."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from command_line import optimize

from metaharness.store.run_dir import RunDirectory

pytestmark = pytest.mark.slow


def _optimize(tmp_path: Path, data: Path, iters: int, crash_at: str | None = None, **more) -> CompletedProcess:
    # Kept small for CI: one seed, one validation example, one evaluation per iteration, a one-example probe.
    env = {"METAHARNESS_CACHE_DIR": str(tmp_path / "cache")} | ({"METAHARNESS_CRASH_AT": crash_at} if crash_at else {})
    return optimize(
        tmp_path / "run",
        iters,
        env=env,
        data_dir=data,
        val_limit=1,
        seed_harnesses="retrieval",
        proposer_option=["probe_size=1", "plans=1"],
        **more,
    )


def git(run: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(run), *args], check=True, capture_output=True, text=True).stdout.strip()


def _candidates(run: Path) -> dict[str, str]:
    tags = git(run, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/tags").splitlines()
    return dict(line.split() for line in tags if line.startswith("c"))


def test_optimize_killed_then_rerun_then_resumed(tmp_path, shared_data_dir):
    run = tmp_path / "run"
    # SIGKILL in the middle of the seed's evaluation: its example is done, the evaluation has not returned
    killed = _optimize(tmp_path, shared_data_dir, 2, crash_at="evaluation:example#1")
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:] + killed.stderr[-3000:]
    assert "No API key configured" in killed.stdout and "local:smollm2-135m" in killed.stdout
    subprocess.run(["git", "-C", str(run), "fsck", "--strict"], check=True, capture_output=True)
    # The seed was committed once checked, unscored; the kill came before its evaluation was recorded.
    assert list(_candidates(run)) == ["c001"]
    assert git(run, "notes", "--ref=metaharness", "show", "c001").startswith("implemented, not evaluated yet")

    first = _optimize(tmp_path, shared_data_dir, 2)  # rerunning into the run directory continues it
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    cands = _candidates(run)
    subprocess.run(["git", "-C", str(run), "fsck", "--strict"], check=True, capture_output=True)

    root = git(run, "rev-parse", "root")
    meta = {cid: json.loads(git(run, "show", f"{cid}:candidate.json")) for cid in cands}
    assert [m["summary"] for m in meta.values() if m["iteration"] == 0] == ["seed: retrieval"]
    assert {m["iteration"] for m in meta.values()} <= {0, 1, 2}
    now = {c.id: c for c in RunDirectory.browse(run).candidates()}  # commits as checked, notes as scored since
    for cid, m in meta.items():
        parent_sha = git(run, "rev-parse", f"{cid}^")  # the parent's own commit or one of its result commits
        assert (
            parent_sha == root
            if m["parent"] is None
            else git(run, "log", "-1", "--format=%(trailers:key=Candidate,valueonly)", parent_sha) == m["parent"]
        ), cid
        note = git(run, "notes", "--ref=metaharness", "show", cid)
        expected = {"failed": "FAILED", "implemented": "implemented, not evaluated"}.get(now[cid].status, "val ")
        assert note.startswith(expected), note
        if now[cid].evaluated:
            assert 0.0 <= now[cid].score <= 1.0 and f"val {now[cid].score:.4f}" in note
            assert (run / str(now[cid].trace)).is_file()  # traces beside the repository, not in it
    supported = {c.id: c.score for c in now.values() if c.supported}
    best = git(run, "log", "-1", "--format=%(trailers:key=Candidate,valueonly)%(trailers:key=Score,valueonly)", "best")
    assert best.split() == [
        max(supported, key=lambda cid: (supported[cid], -int(cid[1:]))),
        f"{max(supported.values()):.4f}",
    ]
    log = [json.loads(line) for line in (run / "summary.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in log if r["type"] == "iteration"] == [0, 1, 2]
    assert any(r["type"] == "test_skipped" for r in log)  # the shared data folder holds no test split
    assert "## Best" in (run / "SUMMARY.md").read_text()
    assert "c001 [" in git(run, "log", "--graph", "--all", "--oneline", "--notes=metaharness")

    resumed = _optimize(tmp_path, shared_data_dir, 3, resume=True)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    after = _candidates(run)
    assert {cid: after[cid] for cid in cands} == cands  # nothing re-done, nothing lost
    added = [cid for cid in after if cid not in cands]
    assert all(json.loads(git(run, "show", f"{c}:candidate.json"))["iteration"] == 3 for c in added)
    log = [json.loads(line) for line in (run / "summary.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in log if r["type"] == "iteration"] == [0, 1, 2, 3]
