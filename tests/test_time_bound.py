"""The time bound of a candidate's evaluation as a run setting: ``--harness-seconds``, kept in settings.json, given to
every evaluation of the run (the bound itself is tested from inside the sandbox in tests/test_hostile_harnesses.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from command_line import run_metaharness

from metaharness.errors import InputError
from metaharness.evaluation.sandbox import AVERAGE_SECONDS, SandboxLimits
from metaharness.runner.settings import RunSettings, SettingsChange

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_TASK = ROOT / "tasks" / "custom" / "example"
ZERO_SHOT = ROOT / "candidates" / "standard" / "zero_shot.py"


def new_run(harness_seconds: float | None = None) -> SettingsChange:
    return SettingsChange(
        dataset="symptom2disease", task_model="local:smollm2-135m", proposer="offline", harness_seconds=harness_seconds
    )


def test_the_bound_is_a_run_setting_with_a_default():
    default = RunSettings.resolve(new_run(), None)
    assert default.harness_seconds == AVERAGE_SECONDS == SandboxLimits().average_seconds
    assert default.to_json()["harness_seconds"] == AVERAGE_SECONDS
    tight = RunSettings.resolve(new_run(harness_seconds=2.5), None)
    assert RunSettings.from_json(tight.to_json()).harness_seconds == 2.5
    assert RunSettings.resolve(SettingsChange(), tight).harness_seconds == 2.5  # a resume keeps it
    with pytest.raises(InputError, match="started with --harness-seconds 2.5, not 3.0"):
        RunSettings.resolve(SettingsChange(harness_seconds=3.0), tight)
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(InputError, match="--harness-seconds must be a number of seconds > 0"):
            RunSettings.resolve(new_run(harness_seconds=bad), None)
    before = {k: v for k, v in default.to_json().items() if k != "harness_seconds"}
    assert RunSettings.from_json(before).harness_seconds == AVERAGE_SECONDS  # a run from before the setting


def test_the_bound_of_n_examples():
    limits = SandboxLimits(wall_seconds=120, average_seconds=10)
    assert [limits.time_bound(n) for n in (1, 12, 13, 212)] == [120, 120, 130, 2120]


def test_eval_and_optimize_take_harness_seconds(tmp_path):
    out = tmp_path / "eval"
    run = run_metaharness("eval", ZERO_SHOT, dataset=EXAMPLE_TASK, limit=1, out=out, harness_seconds=2.5)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads((out / "summary.json").read_text())["sandbox"]["limits"]["average_seconds"] == 2.5
    run_dir = tmp_path / "run"
    first = run_metaharness(
        "optimize", dataset=EXAMPLE_TASK, iters=0, val_limit=1, no_test=True, run_dir=run_dir, harness_seconds=2.5
    )
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads((run_dir / "settings.json").read_text())["harness_seconds"] == 2.5
    again = run_metaharness("optimize", run_dir=run_dir, resume=True, iters=0, harness_seconds=4)
    assert again.returncode == 2 and "started with --harness-seconds 2.5, not 4.0" in again.stderr
