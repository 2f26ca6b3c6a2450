"""What a run will cost before it starts (metaharness.runner.estimate, optimize --dry-run): the counts follow the
settings, the seeds' prompts are read from what they really send, and a dry run touches nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from command_line import run_metaharness
from fakes import ToyTask

from metaharness.budget import Budget
from metaharness.runner.estimate import SeedRate, estimate_run, seed_rates
from metaharness.runner.optimize import run_config
from metaharness.runner.task import seeds_of
from metaharness.search.test_split import TestSplit
from metaharness.tasks import open_task


class ToyWithTest(ToyTask):
    SPLITS = {**ToyTask.SPLITS, "test": [(f"test-{i:04d}", "A fever.", "dengue") for i in range(20)]}


RATES = [SeedRate("short", 1.0, 200.0, 16.0, 0.5), SeedRate("long", 2.0, 1800.0, 48.0, 1.5)]


def test_the_estimate_counts_what_the_settings_allow():
    task = ToyWithTest()
    settings = run_config(task, proposer="offline", holdout=1, evals_per_iter=2, per_run=Budget(tokens=50_000))
    estimate = estimate_run(settings, task, [], iterations=3, test=TestSplit(limit=5), rates=RATES)
    parts = {p.what: p for p in estimate.parts}
    assert parts["seed short"].evals == 2 and parts["seed long"].calls == 4  # 3 val examples, 1 held out
    assert parts["seed long"].input_tokens == 3600 and parts["seed long"].seconds == 3.0
    assert parts["iterations 1-3"].evals == 12 and parts["iterations 1-3"].input_tokens == 12 * 1000  # the mean
    assert parts["held-out examples"].evals == 2  # 1 held out (to judge): the returned candidate and the best seed
    assert parts["test split"].evals == 5 and "the best on 5 of 20" in parts["test split"].bound
    total = estimate.total()
    assert total.evals == sum(p.evals for p in estimate.parts) and total.usd == 0.0  # the embedded model is free
    assert total.seconds == pytest.approx(sum(p.seconds or 0 for p in estimate.parts))
    assert "--max-tokens 50,000 allows it" in estimate.notes  # 39,400 tokens at most
    assert estimate.rows()[-1][0] == "whole run"


def test_a_resumed_run_counts_only_what_is_left_and_a_priced_model_its_dollars():
    task = ToyWithTest()
    settings = run_config(task, proposer="offline", task_model="openai:gpt-4.1-mini", per_run=Budget(usd=0.01))
    estimate = estimate_run(settings, task, [], iterations=4, done={0, 1, 2}, test=False, rates=RATES)
    assert [p.what for p in estimate.parts] == ["iterations 3-4"]  # no seeds, no test split
    assert estimate.parts[0].usd is not None and estimate.parts[0].usd > 0
    assert any(note.startswith("--max-cost $0.01") for note in estimate.notes)
    assert "the test split is not scored (--no-test)" in estimate.notes


def test_the_seeds_rates_are_read_from_the_requests_they_send(tmp_path):
    """The seeds run in the sandbox against a stand-in model: one call per example, prompts of the size the
    embedded model's tokenizer counts, nothing charged and no model loaded for the answers."""
    pytest.importorskip("llama_cpp")
    run_metaharness("init", str(tmp_path / "mytask"))
    task = open_task(str(tmp_path / "mytask"))
    rates = seed_rates(task, seeds_of(task), "local:smollm2-135m", sample=2, timed=False)
    assert [r.name for r in rates] == ["few_shot", "retrieval", "zero_shot"]
    assert all(r.calls == 1.0 and r.seconds is None for r in rates)
    by_name = {r.name: r for r in rates}
    assert by_name["zero_shot"].input_tokens < by_name["retrieval"].input_tokens < by_name["few_shot"].input_tokens


def test_a_dry_run_prints_the_estimate_and_touches_nothing(tmp_path):
    pytest.importorskip("llama_cpp")
    run_metaharness("init", str(tmp_path / "mytask"))
    run_dir = tmp_path / "runs" / "mine"
    done = run_metaharness(
        "optimize",
        "--dataset",
        str(tmp_path / "mytask"),
        "--iters",
        "2",
        "--run-dir",
        str(run_dir),
        "--dry-run",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "whole run" in done.stdout and "seed few_shot" in done.stdout and "exact count" in done.stdout
    assert "nothing was run or written" in done.stdout
    assert not run_dir.exists() and not Path(tmp_path / "runs").exists()
