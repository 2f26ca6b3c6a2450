"""Settings that last: the caps and search settings a run started with hold on every later session (a resume that
names none of them keeps them), a cap may only be tightened unless the session says ``raise_caps``, and a search
setting given again must match. The evaluator and proposer are the fakes of tests/fakes.py over the real loop,
store and settings (as in tests/test_own_task_optimize.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import FakeEvaluator, ScriptedProposer, program

from metaharness.errors import InputError
from metaharness.runner.optimize import optimize, run_config

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
    optimize(run_dir, settings, iterations=1, test=False, max_cost=1.0, max_tokens=5000)
    optimize(run_dir, iterations=2, test=False)  # a resume that names no setting
    first, resumed = starts(run_dir)
    for kept in (first, resumed):
        assert kept["run_budget"]["usd"] == 1.0 and kept["run_budget"]["tokens"] == 5000
        assert kept["evaluation"] == "greedy" and kept["seed"] == 7 and kept["proposer_options"] == {"probe_size": 2}

    optimize(run_dir, iterations=2, test=False, max_cost=0.5)  # tightening is allowed, and lasts
    assert starts(run_dir)[-1]["run_budget"]["usd"] == 0.5
    with pytest.raises(InputError, match="may only tighten it.*--raise-caps"):
        optimize(run_dir, iterations=2, test=False, max_cost=2.0)
    optimize(run_dir, iterations=2, test=False, max_cost=2.0, raise_caps=True)
    assert starts(run_dir)[-1]["run_budget"]["usd"] == 2.0
    optimize(run_dir, iterations=2, test=False)
    assert starts(run_dir)[-1]["run_budget"]["usd"] == 2.0  # the raised cap is the run's from then on


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
