"""A run's choices do not depend on ``PYTHONHASHSEED``: the same command under two hash seeds makes the same
candidates (the same programs, so the same git trees), scores them on the same examples with the same scores, and
returns the same best. End to end with the embedded model and the offline proposer under the planner's staged
evaluation; the second run is answered by the first one's response cache, which returns what the model answered
(temperature 0), so it checks the choices, not the model."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from command_line import optimize

from metaharness.store.run_dir import RunDirectory

pytestmark = pytest.mark.slow


def _record(run: Path) -> dict[str, tuple[str, str, float, tuple[str, ...]]]:
    """Per candidate: its git tree, status, score and the validation examples it was scored on."""
    record = {}
    for candidate in RunDirectory.browse(run).candidates():
        tree = subprocess.run(
            ["git", "-C", str(run), "rev-parse", f"{candidate.id}^{{tree}}"], check=True, capture_output=True, text=True
        ).stdout.strip()
        ids = tuple(candidate.evaluation.example_ids) if candidate.evaluation else ()
        record[candidate.id] = (tree, candidate.status, round(candidate.score, 6), ids)
    return record


def test_two_hash_seeds_give_the_same_candidates_commits_and_scores(tmp_path, shared_data_dir):
    runs = []
    for hash_seed in ("1", "2"):
        run = tmp_path / f"run-{hash_seed}"
        env = {"PYTHONHASHSEED": hash_seed, "METAHARNESS_CACHE_DIR": str(tmp_path / "cache")}
        out = optimize(
            run,
            1,
            env=env,
            data_dir=shared_data_dir,
            val_limit=4,
            seeds="retrieval,zero_shot",
            proposals=4,
            proposer_option=["probe_size=2"],
            evaluation="planner",
        )
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        runs.append(_record(run))
    assert runs[0] == runs[1]
    assert len(runs[0]) >= 3  # the seeds and at least one proposal
