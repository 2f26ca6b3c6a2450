"""The command line as a user runs it: version, help, usage errors, and each command's run and clean failures.

``history``, ``show``, ``diff`` and ``report`` are in test_history_cli.py, ``plan solve`` in test_planner_cli.py,
a ``plan serve`` MCP session in test_planner_tool.py and whole ``optimize`` runs (kill, rerun, ``--resume``) in
test_loop_e2e.py (slow).
"""

from __future__ import annotations

import json
import re

import pytest
from command_line import assert_fails_cleanly, assert_usage_error, error_lines, run_metaharness

import metaharness
from metaharness.agents.environments.puzzle_instances import load_instance_set


def test_version():
    out = run_metaharness("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"metaharness {metaharness.__version__}"
    assert metaharness.__version__ != "0+unknown"


def test_help_lists_every_command():
    out = run_metaharness("--help")
    assert out.returncode == 0 and "Usage: metaharness" in out.stdout
    for command in ("optimize", "history", "show", "diff", "report", "eval", "plan", "bench"):
        assert f" {command} " in out.stdout, command


def test_unknown_command_is_a_usage_error():
    assert_usage_error(run_metaharness("no-such-command"), "No such command 'no-such-command'")


def test_an_error_stays_one_line_when_stderr_is_a_pipe():
    out = run_metaharness("optimize", env={"COLUMNS": None})
    assert error_lines(out) == [
        "error: Name the task with --dataset (lawbench, symptom2disease, uspto, a task folder or hf:OWNER/NAME), "
        "or --resume a run."
    ]


# ---------------------------------------------------------------- optimize


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dataset": "symptom2disease", "iters": -1}, "Invalid value for '--iters'"),
        ({"dataset": "symptom2disease", "evals_per_iter": 0}, "Invalid value for '--evals-per-iter'"),
        ({"dataset": "symptom2disease", "val_limit": "many"}, "Invalid value for '--val-limit'"),
    ],
    ids=["negative iterations", "no evaluations", "a word for a number"],
)
def test_optimize_bad_options_are_usage_errors(tmp_path, options, message):
    assert_usage_error(run_metaharness("optimize", cwd=tmp_path, **options), message)
    assert list(tmp_path.iterdir()) == []  # no run directory was started


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "Name the task with --dataset"),
        ({"dataset": "mmlu", "iters": 0}, "Unknown task 'mmlu': use one of lawbench, symptom2disease, uspto."),
        ({"dataset": "symptom2disease", "proposer_option": ["probe_size"]}, "--proposer-option takes KEY=VALUE"),
        ({"resume": True}, "No run found in runs/; start one with: metaharness optimize --dataset NAME"),
        ({"resume": True, "run_dir": "nowhere"}, "--resume: no run at nowhere; start one with"),
    ],
    ids=["no dataset", "unknown dataset", "bad proposer option", "resume without runs", "resume a missing run"],
)
def test_optimize_refuses_what_it_cannot_run_in_one_line(tmp_path, options, message):
    out = run_metaharness("optimize", cwd=tmp_path, **options)
    assert_fails_cleanly(out, message)
    assert list(tmp_path.iterdir()) == []  # no run directory was started


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_cost": -1}, "--max-cost takes an amount of USD >= 0 (e.g. --max-cost 5), got '-1'."),
        ({"max_cost": "lots"}, "--max-cost takes an amount of USD >= 0 (e.g. --max-cost 5), got 'lots'."),
        ({"max_cost": "inf"}, "got 'inf'"),
        (
            {"proposer_option": ["prob_size=4"]},
            "Unknown proposer option 'prob_size'; known: seed, workers, probe_size, plans, operators, frontier, "
            "extend, depth (did you mean probe_size?).",
        ),
        ({"proposer_option": ["task=uspto"]}, "Unknown proposer option 'task'; known: seed, workers"),
        ({"iter_budget": "tokens=lots"}, "--iter-budget takes KEY=NUMBER entries separated by commas"),
        ({"iter_budget": "steps=3"}, "--iter-budget: Unknown budget entry steps: use evals, tokens, usd."),
        ({"iter_budget": "usd=-1"}, "--iter-budget: Budget entry usd must be a number >= 0, got -1.0."),
        ({"iter_budget": "evals=0"}, "The per-iteration budget's evals must be at least 1 example-evaluation."),
        ({"budget": "usd=2", "max_cost": 3}, "--budget usd= and --max-cost disagree: give one of them."),
        ({"iter_budget": "evals=30", "evals_per_iter": 2}, "--iter-budget evals= and --evals-per-iter both say"),
        ({"val_limit": 3, "limit": 3}, "--limit is the old name of --val-limit: give one of them."),
        ({"evaluation": "magic"}, "Unknown --evaluation 'magic'; use one of planner, greedy, best-of-n, halving"),
        ({"proposer_option": ["max_steps=3"]}, "Proposer option 'max_steps' does not apply to the offline proposer"),
        ({"proposer_option": ["probe_size=-1"]}, "Proposer option probe_size must be an integer >= 0, got -1."),
        ({"proposer_option": ["plans=many"]}, "Proposer option plans must be an integer >= 1, got 'many'."),
        ({"proposer_option": ["operators=snap_to_labels,foo"]}, "Unknown operator(s) foo: use one of snap_to_labels,"),
        ({"task_model": "gpt-4"}, "Model spec 'gpt-4' is not PROVIDER:MODEL"),
        ({"task_model": "foo:bar"}, "Unknown model provider 'foo' in 'foo:bar'"),
        (
            {"proposer": "tps", "proposer_model": "openai:m@ftp://host"},
            "Base URL 'ftp://host' in 'openai:m@ftp://host'",
        ),
        ({"proposer": "coding"}, "The coding proposer drives a coding agent and needs a proposer model"),
        ({"proposer": "base"}, "The coding proposer drives a coding agent and needs a proposer model"),
        (
            {"proposer": "tps", "proposer_model": "local:smollm2-135m", "proposer_option": ["context_tokens=-1"]},
            "must be an integer >= 256",
        ),
        ({"proposer": "nope"}, "Unknown proposer 'nope': use one of offline, coding, tps"),
    ],
    ids=[
        "negative budget",
        "a word for a budget",
        "an infinite budget",
        "a misspelt proposer option",
        "a loop setting as a proposer option",
        "a word for an iteration budget",
        "an unknown iteration budget entry",
        "a negative iteration budget",
        "no evaluation in an iteration",
        "two dollar caps",
        "two limits on an iteration's example-evaluations",
        "a flag and its old name",
        "an unknown evaluation policy",
        "an option of another proposer",
        "a zero probe",
        "a word for a number",
        "an unknown operator",
        "a spec without a provider",
        "an unknown provider",
        "a bad base URL",
        "a coding proposer without a model",
        "the coding proposer by its old name, without a model",
        "a bad context window",
        "an unknown proposer",
    ],
)
def test_optimize_validates_every_setting_in_one_line_before_starting(tmp_path, options, message):
    out = run_metaharness("optimize", cwd=tmp_path, dataset="symptom2disease", iters=1, **options)
    assert_fails_cleanly(out, message)
    assert list(tmp_path.iterdir()) == []  # no run directory was started


def test_optimize_refuses_a_holdout_larger_than_the_split_before_starting(tmp_path, shared_data_dir):
    out = run_metaharness(
        "optimize", cwd=tmp_path, dataset="symptom2disease", iters=1, holdout=500, data_dir=shared_data_dir
    )
    assert_fails_cleanly(out, "--holdout 500 leaves no validation example to search")
    assert list(tmp_path.iterdir()) == []  # no run directory was started


# ---------------------------------------------------------------- eval


def test_eval_scores_a_seed_with_the_embedded_model(tmp_path, shared_data_dir):
    out = run_metaharness(
        "eval",
        "zero_shot",
        dataset="symptom2disease",
        limit=1,
        data_dir=shared_data_dir,
        out=tmp_path / "run",
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "primary (paper metric)" in out.stdout and "local:smollm2-135m" in out.stdout
    assert f"summary: {tmp_path / 'run' / 'summary.json'}" in out.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["examples"], summary["errors"], summary["model"]) == (1, 0, "local:smollm2-135m")
    assert 0.0 <= summary["scores"]["primary"] <= 1.0 and summary["harness"].endswith("symptom2disease/zero_shot.py")
    (record,) = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert record["id"] == "val-0000" and record["error"] is None and record["scores"] == summary["scores"]
    response, prediction = record["calls"][0]["response"], record["prediction"]
    # the seed keeps the model's response, or tags the first label it names
    assert response and (prediction == response or re.fullmatch(r"\[DIAGNOSIS\][a-z ]+\[/DIAGNOSIS\]", prediction))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["zero_shot", "--dataset", "mmlu"], "Unknown task 'mmlu'"),
        (["no_such_seed", "--dataset", "uspto"], "No seed harness 'no_such_seed' for task uspto"),
        (["missing.py", "--dataset", "uspto"], "Harness file missing.py does not exist"),
        (["zero_shot", "--dataset", "uspto", "--task-model", "llama"], "Model spec 'llama' is not PROVIDER:MODEL"),
        (["zero_shot", "--dataset", "uspto", "--workers", "0"], "--workers must be at least 1, got 0."),
    ],
    ids=["unknown dataset", "unknown seed", "missing file", "bad model spec", "no workers"],
)
def test_eval_refuses_an_unknown_task_seed_or_file(tmp_path, args, message):
    assert_fails_cleanly(run_metaharness("eval", *args, cwd=tmp_path), message)


# ---------------------------------------------------------------- plan serve (plan solve: test_planner_cli.py)


def test_plan_serve_help_and_a_bad_solver():
    usage = run_metaharness("plan", "serve", "--help")
    assert usage.returncode == 0
    assert all(option in usage.stdout for option in ("--model", "--plans", "--solver", "--max-tokens"))
    assert_fails_cleanly(run_metaharness("plan", "serve", solver="magic"), "Unknown solver 'magic'")


# ---------------------------------------------------------------- bench


@pytest.mark.parametrize(("env", "agent"), [("sokoban", "random"), ("blocksworld", "greedy")])
def test_bench_plays_an_episode_per_bin_and_a_rerun_resumes(tmp_path, env, agent):
    out = tmp_path / "episodes.jsonl"
    bins = list(load_instance_set(f"{env}_v1").bins)
    first = run_metaharness("bench", env, agent=agent, episodes=1, out=out)
    assert first.returncode == 0, first.stderr
    assert f"{env} · {agent} · no model · slack 2" in first.stdout and f"episodes: {out}" in first.stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["bin"] for r in rows] == bins and all(r["agent"] == agent for r in rows)
    again = run_metaharness("bench", env, agent=agent, episodes=1, out=out)  # nothing left to play
    assert again.returncode == 0 and out.read_text().count("\n") == len(bins)
    more = run_metaharness("bench", env, agent=agent, episodes=2, out=out)  # one more per bin, the first ones kept
    assert more.returncode == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 2 * len(bins) and [json.loads(line) for line in lines[: len(bins)]] == rows


def test_bench_sokoban_with_oracle_subagents(tmp_path):
    out = tmp_path / "tape.jsonl"
    run = run_metaharness("bench", "sokoban", agent="tape", oracle_subagents=True, episodes=1, bins="easy", out=out)
    assert run.returncode == 0, run.stderr
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["agent"] == "tape" and row["bin"] == "easy" and "oracle subagents" in run.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sokoban", "--agent", "react"], "--model"),
        (["blocksworld", "--agent", "random", "--slack", "-1"], "--slack must be >= 0"),
        (["tools", "--agent", "egb", "--uncertainty", "maybe"], "--uncertainty must be 'sample' or 'logprobs'"),
        (["tools", "--agent", "oracle"], "Unknown agent 'oracle'"),
    ],
    ids=["react without a model", "negative slack", "bad uncertainty", "unknown tools agent"],
)
def test_bench_refuses_bad_settings(tmp_path, args, message):
    out = run_metaharness("bench", *args, cwd=tmp_path)
    assert_fails_cleanly(out, message)
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.slow
def test_bench_tools_runs_a_task_with_the_embedded_model_and_a_rerun_resumes(tmp_path):
    out = tmp_path / "majority.jsonl"
    options = {"agent": "majority", "tasks": 1, "samples": 1, "min_steps": 4, "candidates": 3, "out": out}
    first = run_metaharness("bench", "tools", **options)
    assert first.returncode == 0, first.stderr
    assert "ToolWorld: majority on local:smollm2-135m (1 tasks, seed 0)" in first.stdout
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["agent"] == "majority" and record["calls"] >= record["steps"] >= 4
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["tasks"] == 1 and summary["success_rate"] == float(record["success"])
    again = run_metaharness("bench", "tools", **options)  # the task is done: kept, not run again
    assert again.returncode == 0 and [json.loads(line) for line in out.read_text().splitlines()] == [record]
