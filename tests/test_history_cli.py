"""`metaharness history`, `show`, `diff` and `report` on a run directory: git underneath, scores added."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from command_line import assert_fails_cleanly
from command_line import run_metaharness as _cli

from metaharness.candidate import Candidate, Evaluation, Prediction
from metaharness.store import RunDirectory


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "toy-offline"
    run = RunDirectory.open(path, {"dataset": "toy", "task_model": "fake", "val_limit": 3, "proposer": "offline"})
    base = "class Harness:\n    def __init__(self, lm, train):\n        self.lm = lm\n"
    run.commit(
        Candidate(
            "c001",
            None,
            0,
            base,
            summary="seed: zero_shot",
            evaluation=Evaluation("val", {"primary": 0.25}, {"context_tokens": 120}, 3),
        )
    )
    run.commit(
        Candidate(
            "c002",
            "c001",
            1,
            base + "    # label list\n",
            summary="add the label list",
            hypothesis="the model stops inventing labels",
            prediction=Prediction(score=0.4),
            evaluation=Evaluation("val", {"primary": 0.5}, {"context_tokens": 300}, 3),
            trace="traces/c002.val.jsonl",
        )
    )
    run.commit(
        Candidate(
            "c003", "c002", 2, "oops(", summary="broken edit", status="failed", error="SyntaxError: invalid syntax"
        )
    )
    run.close()
    return path


def test_history_lists_candidates_with_scores_and_the_git_graph(run_dir):
    out = _cli("history", "--run-dir", str(run_dir), "--graph")
    assert out.returncode == 0, out.stderr
    assert "c002 *" in out.stdout and "0.5000" in out.stdout and "failed" in out.stdout
    assert "c002 [0.500] add the label list" in out.stdout  # the git graph part
    assert "SyntaxError" in out.stdout
    assert "partly scored" not in out.stdout and "implemented:" not in out.stdout  # the legend says what is there


def test_history_defaults_to_the_latest_run_under_runs(run_dir, tmp_path):
    assert_fails_cleanly(_cli("history", cwd=tmp_path), "No run found in runs/")  # no runs/ folder here
    out = _cli("history", cwd=run_dir)  # inside a run directory
    assert out.returncode == 0 and "c003" in out.stdout
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "toy").symlink_to(run_dir)
    for args in ((), ("--run-dir", "toy")):  # the latest run under runs/, and a run named by its folder there
        out = _cli("history", *args, cwd=tmp_path)
        assert out.returncode == 0 and "c002 *" in out.stdout and "runs/toy" in out.stdout, out.stderr
    (tmp_path / "runs" / "older").symlink_to(run_dir)
    os.utime(run_dir / "summary.jsonl")
    out = _cli("show", "best", "--no-source", cwd=tmp_path)  # several runs: the one chosen is named
    assert out.returncode == 0 and "the latest of 2 runs under runs/ (name another with --run-dir)" in out.stderr
    assert "run: runs/" in out.stderr and _cli("show", "best", "--run-dir", "toy", cwd=tmp_path).stderr == ""


def test_show_prints_metadata_note_and_program(run_dir):
    out = _cli("show", "c002", "--run-dir", str(run_dir))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("c002  val 0.5000  (best)  (evaluated; iteration 1, parent c001)\n")
    assert "scored on 3 val examples, 0 with errors" in out.stdout and "predicted val 0.4000" in out.stdout
    assert "{" not in out.stdout.split("class Harness")[0]  # no raw JSON before the program
    for text in (
        "parent c001",
        "add the label list",
        "the model stops inventing labels",
        "val 0.5000",
        "# label list",
        "traces/c002.val.jsonl",
    ):
        assert text in out.stdout
    best = _cli("show", "best", "--run-dir", str(run_dir), "--no-source")
    assert best.returncode == 0 and best.stdout.startswith("c002  val 0.5000  (best)")
    assert "add the label list" in best.stdout and "# label list" not in best.stdout  # no program


def test_show_unknown_candidate_is_a_clear_error(run_dir):
    out = _cli("show", "c099", "--run-dir", str(run_dir))
    assert_fails_cleanly(out, "No candidate 'c099'")
    assert "c001, c002, c003" in out.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["diff", "c001", "c099"], "No candidate 'c099'"),
        (["show", "c001", "--run-dir", "nowhere"], "No run at nowhere (nor runs/nowhere)"),
        (["show", "c001", "--run-dir", "/no/where"], "No run at /no/where; list runs with"),
        (["diff", "c001", "c002", "--run-dir", "nowhere"], "No run at nowhere"),
        (["report", "--run-dir", "nowhere"], "No run at nowhere"),
        (["history", "--run-dir", "nowhere"], "No run at nowhere"),
    ],
    ids=[
        "diff unknown candidate",
        "show in a missing run",
        "an absolute path",
        "diff in a missing run",
        "report",
        "history",
    ],
)
def test_browsing_what_is_not_there_fails_in_one_line(run_dir, tmp_path, args, message):
    run = ["--run-dir", str(run_dir)] if args[0] == "diff" and "--run-dir" not in args else []
    assert_fails_cleanly(_cli(*args, *run, cwd=tmp_path), message)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_diff_shows_the_change_and_both_scores(run_dir):
    out = _cli("diff", "c001", "c002", "--run-dir", str(run_dir))
    assert out.returncode == 0, out.stderr
    assert "c001 val 0.2500  ->  c002 val 0.5000  (+0.2500)" in out.stdout
    assert "+    # label list" in out.stdout
    failed = _cli("diff", "c002", "c003", "--run-dir", str(run_dir))  # a failed candidate has no score to compare
    assert failed.returncode == 0 and "c002 val 0.5000  ->  c003 val failed\n" in failed.stdout
    assert "+oops(" in failed.stdout


def test_report_writes_the_html_page(run_dir, tmp_path):
    out = _cli("report", "--run-dir", str(run_dir), "--out", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    assert f"wrote {tmp_path / 'r.html'}" in out.stdout
    page = (tmp_path / "r.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "c002" in page


@pytest.mark.parametrize(
    "args",
    [["history", "{run}"], ["report", "{run}", "--out", "{tmp}/r.html"], ["show", "c001", "--run", "{run}"]],
    ids=["history RUN", "report RUN", "show --run"],
)
def test_the_older_ways_to_name_the_run_still_work_and_say_so(run_dir, tmp_path, args):
    out = _cli(*(a.format(run=run_dir, tmp=tmp_path) for a in args))
    assert out.returncode == 0, out.stderr
    assert f"is deprecated; every subcommand takes --run-dir {run_dir}" in out.stderr
    both = _cli(*(a.format(run=run_dir, tmp=tmp_path) for a in args), "--run-dir", str(tmp_path))
    assert_fails_cleanly(both, "Name the run once")


def test_defaults_without_a_key_are_the_embedded_model_and_the_offline_proposer(monkeypatch):
    from metaharness.models import DEFAULT_TASK_MODEL_SPEC
    from metaharness.runner.models import default_models

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    task_model, proposer, proposer_model, notice = default_models(None, None, None)
    assert (task_model, proposer, proposer_model) == (DEFAULT_TASK_MODEL_SPEC, "offline", None)
    assert notice is not None and "No API key configured" in notice and "--proposer-model" in notice
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    task_model, proposer, proposer_model, notice = default_models(None, None, None)
    assert (proposer, proposer_model) == ("tps", "anthropic:claude-sonnet-4-5") and notice is None
    assert default_models("openai:m@http://127.0.0.1:1/v1", "offline", None)[1:] == ("offline", None, None)


def test_help_shows_no_type_beside_a_plain_flag():
    for command in (["optimize"], ["history"], ["bench", "harness"], []):
        out = _cli(*command, "--help")
        assert out.returncode == 0 and "<bool>" not in out.stdout, out.stdout
    assert "--run-dir" in _cli("show", "--help").stdout and "--seed-harnesses" in _cli("optimize", "--help").stdout
