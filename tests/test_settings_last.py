"""Settings that last: the caps and search settings a run started with hold on every later session (a resume that
names none of them keeps them), a cap may only be tightened unless the session says ``raise_caps``, and a search
setting given again must match. The evaluator and proposer are the fakes of tests/fakes.py over the real loop,
store and settings (as in tests/test_own_task_optimize.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import FakeEvaluator, ScriptedProposer, program

from metaharness.budget import Budget
from metaharness.errors import InputError
from metaharness.runner.optimize import optimize, run_config
from metaharness.runner.settings import SETTINGS, RunSettings, SettingsChange

FAKE_MODEL = "openai:fake@http://127.0.0.1:9/v1"  # never called: the fake evaluator makes no model call


@pytest.fixture(autouse=True)
def fakes(monkeypatch):
    monkeypatch.setattr("metaharness.runner.optimize.TaskEvaluator", lambda task, model, **kw: FakeEvaluator())
    monkeypatch.setattr("metaharness.runner.optimize.get_proposer", lambda name, **config: ScriptedProposer())


def task_folder(root: Path) -> Path:
    folder = root / "arith"
    (folder / "data").mkdir(parents=True)
    (folder / "task.toml").write_text(
        '[data]\ninput = "q"\ntarget = "a"\nval_size = 6\n[metric]\nname = "exact"\n', encoding="utf-8"
    )
    rows = [{"q": f"{i}+{i}", "a": str(2 * i)} for i in range(30)]
    (folder / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "candidates").mkdir()
    (folder / "candidates" / "seed.py").write_text(program(0.3))
    return folder


def starts(run_dir: Path) -> list[dict]:
    lines = [json.loads(x) for x in (run_dir / "summary.jsonl").read_text().splitlines()]
    return [r["settings"] for r in lines if r.get("type") == "start"]


def test_a_resume_without_the_cap_flags_keeps_the_caps_and_a_larger_cap_needs_raise_caps(tmp_path):
    folder, run_dir = task_folder(tmp_path), tmp_path / "run"
    settings = run_config(
        str(folder), task_model=FAKE_MODEL, evaluation="greedy", proposer_options={"probe_size": 2}, seed=7
    )
    optimize(run_dir, settings, iterations=1, test=False, per_run=Budget(usd=1.0, tokens=5000))
    optimize(run_dir, iterations=2, test=False)  # a resume that names no setting
    first, resumed = starts(run_dir)
    for kept in (first, resumed):
        assert kept["per_run"]["usd"] == 1.0 and kept["per_run"]["tokens"] == 5000
        assert kept["evaluation"] == "greedy" and kept["seed"] == 7 and kept["proposer_options"] == {"probe_size": 2}

    optimize(run_dir, iterations=2, test=False, per_run=Budget(usd=0.5))  # tightening is allowed, and lasts
    assert starts(run_dir)[-1]["per_run"]["usd"] == 0.5
    with pytest.raises(InputError, match="may only tighten it.*--raise-caps"):
        optimize(run_dir, iterations=2, test=False, per_run=Budget(usd=2.0))
    optimize(run_dir, iterations=2, test=False, per_run=Budget(usd=2.0), raise_caps=True)
    assert starts(run_dir)[-1]["per_run"]["usd"] == 2.0
    optimize(run_dir, iterations=2, test=False)
    assert starts(run_dir)[-1]["per_run"]["usd"] == 2.0  # the raised cap is the run's from then on


def test_a_search_setting_given_again_must_match(tmp_path):
    folder, run_dir = task_folder(tmp_path), tmp_path / "run"
    optimize(run_dir, run_config(str(folder), task_model=FAKE_MODEL, evaluation="planner"), iterations=1, test=False)
    with pytest.raises(InputError, match="started with --evaluation 'planner', not 'gate'"):
        optimize(run_dir, run_config(str(folder), task_model=FAKE_MODEL, evaluation="gate"), iterations=2, test=False)
    with pytest.raises(InputError, match="--seed"):
        optimize(
            run_dir,
            run_config(str(folder), task_model=FAKE_MODEL, evaluation="planner", seed=3),
            iterations=2,
            test=False,
        )


def test_every_setting_is_a_settings_json_key_and_an_argument_of_the_api(tmp_path):
    """Declared once (metaharness.setting): settings.json holds one key per declared setting, named as the Python
    API's keyword, and a stored run's settings read back as they were."""
    folder, run_dir = task_folder(tmp_path), tmp_path / "run"
    settings = run_config(str(folder), task_model=FAKE_MODEL, evaluation="greedy", per_iteration=Budget(evals=5))
    stored = settings.to_json()
    assert set(stored) == {*SETTINGS, "metaharness", "created"}
    assert RunSettings.from_json(stored) == settings
    optimize(run_dir, settings, iterations=0, test=False)
    assert json.loads((run_dir / "settings.json").read_text())["per_iteration"]["evals"] == 5


def test_the_settings_of_a_run_from_before_the_renames_still_load():
    """settings.json of an older run: the budgets under iteration_budget and run_budget, the coding proposer
    called base, the offline proposer called offline-greedy."""
    now = run_config("symptom2disease", task_model=FAKE_MODEL, proposer="offline", per_run=Budget(usd=2.0))
    old = now.to_json()
    old["iteration_budget"], old["run_budget"] = old.pop("per_iteration"), old.pop("per_run")
    assert RunSettings.from_json(old) == now
    old["proposer"] = "offline-greedy"
    assert RunSettings.from_json(old).proposer == "offline"
    coding = {**old, "proposer": "base", "proposer_model": FAKE_MODEL}
    assert RunSettings.from_json(coding).proposer == "coding"


def test_two_settings_that_disagree_are_an_error_not_an_override(tmp_path):
    folder = task_folder(tmp_path)
    with pytest.raises(InputError, match="--iter-budget evals= and --evals-per-iter .* give one of them"):
        run_config(str(folder), task_model=FAKE_MODEL, evals_per_iter=2, per_iteration=Budget(evals=30))
    with pytest.raises(InputError, match="Unknown run setting"):
        SettingsChange(val_limt=3)
    # a resume that gives --evals-per-iter to a run whose --iter-budget caps its evals: refused, not ignored
    stored = run_config(str(folder), task_model=FAKE_MODEL, per_iteration=Budget(evals=6))
    with pytest.raises(InputError, match="caps an iteration at evals=6, so --evals-per-iter would change nothing"):
        RunSettings.resolve(SettingsChange(evals_per_iter=2), stored)
    assert (
        RunSettings.resolve(SettingsChange(per_iteration=Budget(evals=4)), stored).search.budget.per_iteration.evals
        == 4
    )


def test_the_api_s_old_argument_names_still_work_with_a_deprecation_warning(tmp_path):
    folder, run_dir = task_folder(tmp_path), tmp_path / "run"
    seed = folder / "candidates" / "seed.py"
    with pytest.warns(DeprecationWarning, match="seeds= is now seed_files="):
        optimize(run_dir, run_config(str(folder), task_model=FAKE_MODEL), iterations=0, test=False, seeds=[seed])
    with pytest.warns(DeprecationWarning, match="max_cost= and max_tokens= are now per_run"):
        optimize(run_dir, iterations=0, test=False, max_cost=1.0)
    assert starts(run_dir)[-1]["per_run"]["usd"] == 1.0 and starts(run_dir)[-1]["seed_files"] == [str(seed)]
