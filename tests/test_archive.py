"""A finished run archived as committable files and restored: every command reads it as the original."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeEvaluator, ScriptedProposer, program

from metaharness.budget import SearchBudget
from metaharness.errors import InputError
from metaharness.search.loop import LoopSettings, Optimizer, Seed
from metaharness.search.settings import SearchSettings
from metaharness.store import RunDirectory
from metaharness.store.archive import BUNDLE, archive, restore

CONFIG = {"dataset": "toy", "task_model": "fake", "val_limit": 4, "proposer": "scripted", "evals_per_iter": 2}


def test_an_archived_run_restores_with_its_candidates_scores_refs_and_log(tmp_path: Path) -> None:
    run = RunDirectory.open(tmp_path / "run", CONFIG)
    settings = SearchSettings(evaluation="greedy", budget=SearchBudget(evals_per_iter=2))
    Optimizer(
        run, LoopSettings("toy", settings, 2), ScriptedProposer(), FakeEvaluator(), [Seed("zero", program(0.2))]
    ).run()
    run.close()
    written = archive(tmp_path / "run", tmp_path / "kept")
    assert (tmp_path / "kept" / BUNDLE) in written and not (tmp_path / "kept" / ".git").exists()
    assert (tmp_path / "kept" / "summary.jsonl").read_text() == (tmp_path / "run" / "summary.jsonl").read_text()
    restored = RunDirectory.browse(restore(tmp_path / "kept", tmp_path / "again"))
    original = RunDirectory.browse(tmp_path / "run")
    assert [c.id for c in restored.candidates()] == [c.id for c in original.candidates()]
    assert [c.evaluation for c in restored.candidates()] == [c.evaluation for c in original.candidates()]
    assert restored.log_records("iteration") == original.log_records("iteration")
    assert (tmp_path / "again" / "harness.py").read_text() == (tmp_path / "run" / "harness.py").read_text()
    with pytest.raises(InputError, match="not empty"):
        archive(tmp_path / "run", tmp_path / "kept")
    with pytest.raises(InputError, match="no repository.bundle"):
        restore(tmp_path / "run", tmp_path / "third")
