"""What users read is true: after a small run, plain git, report.html, SUMMARY.md, `history` and `show` name the same
best with the same score; a partly scored candidate shows its examples and never counts as a result; the commands
docs/run-directory.md gives print what it says; the files a user reads are readable (0644)."""

from __future__ import annotations

import re
import shlex
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from command_line import run_metaharness
from fakes import FakeEvaluator, ScriptedProposer, ToyTask, program

from metaharness.candidate import IMPLEMENTED, Candidate, Evaluation
from metaharness.report import write_summary_markdown
from metaharness.runner.optimize import optimize
from metaharness.store import RunDirectory

ROOT = Path(__file__).resolve().parents[1]


class ToyEvaluator(FakeEvaluator):
    """``FakeEvaluator`` where ``optimize()`` builds its evaluator (scores from each program's ``# score=``)."""

    def __init__(self, task: Any, model: Any, **given: Any) -> None:  # workers, limits: what TaskEvaluator takes
        super().__init__()


def git(run: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(run), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> tuple[Path, Candidate, Candidate]:
    """Two seeds and two iterations of the scripted proposer (best +0.1 each time), then a later candidate scored
    0.95 on 1 of its 4 examples, as a first stage of the staged evaluation leaves one: above the best, no result."""
    tmp = tmp_path_factory.mktemp("user-facing")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("metaharness.runner.optimize.TaskEvaluator", ToyEvaluator)
        patch.setattr("metaharness.runner.optimize.get_proposer", lambda name, **config: ScriptedProposer())
        seeds = []
        for name, score in (("low", 0.2), ("high", 0.4)):
            seeds.append(tmp / "seeds" / f"{name}.py")
            seeds[-1].parent.mkdir(exist_ok=True)
            seeds[-1].write_text(program(score))
        outcome = optimize(tmp / "run", task=ToyTask(), seed_files=seeds, iterations=2, test=False)
    assert outcome.best is not None and outcome.best.supported
    run = RunDirectory.open(tmp / "run", RunDirectory.browse(tmp / "run").settings())
    cid = run.next_id()
    partly = Candidate(cid, outcome.best.id, 2, program(0.95), status=IMPLEMENTED, summary="a bold revision")
    run.commit(partly)
    stage = Evaluation("val", {"primary": 0.95}, {"context_tokens": 95.0}, 1, example_ids=["1"], share=4)
    partly = run.record_evaluation(Candidate(**{**partly.__dict__, "status": "evaluated", "evaluation": stage}))
    write_summary_markdown(run)
    run.close()
    return tmp / "run", outcome.best, partly


def test_git_log_of_best_shows_its_score_and_status(small_run):
    path, best, _ = small_run
    assert git(path, "log", "-1", "--format=%s", "best") == f"{best.id} [{best.result()}] {best.summary}\n"
    trailers = "%(trailers:key=Candidate,valueonly)%(trailers:key=Score,valueonly)%(trailers:key=Status,valueonly)"
    assert git(path, "log", "-1", f"--format={trailers}", "best").split() == [best.id, f"{best.score:.4f}", "evaluated"]
    assert '"status": "evaluated"' in git(path, "show", "best:candidate.json")


def test_the_report_summary_history_and_show_agree_on_the_best(small_run, tmp_path):
    path, best, partly = small_run
    assert partly.score > best.score and partly.result() == "0.950 (1/4)"
    page_run = run_metaharness("report", "--run-dir", str(path))
    assert page_run.returncode == 0, page_run.stderr
    page = (path / "report.html").read_text()
    assert f"best {best.id}: val {best.result()}" in page
    curve = re.findall(r"best after iteration (\d+): (c\d+) ([0-9.]+)", page)
    assert curve and curve[-1][1:] == (best.id, best.result())  # the curve ends at the best
    assert all(float(score) <= best.score for _, _, score in curve)  # the partly scored 0.95 never counts
    assert f"{partly.id}: 0.950 (1/4) partly scored" in page and f"{partly.id} 0.950 (1/4)</text>" in page
    summary = (path / "SUMMARY.md").read_text()
    assert f"`{best.id}` val {best.result(4)}" in summary and f"- **Won:** {best.id}, val {best.result()}" in summary
    assert f"| {partly.id} | 2 | {best.id} | 0.950 (1/4) |" in summary
    shown = run_metaharness("show", "best", "--run-dir", str(path), "--no-source")
    assert shown.returncode == 0 and shown.stdout.startswith(f"{best.id}  val {best.result(4)}  (best)  (evaluated;")
    history = run_metaharness("history", "--run-dir", str(path))
    assert f"{best.id} *" in history.stdout and "0.9500 (1/4)" in history.stdout
    assert "0.9500 (1/4): partly scored, on 1 of 4 so far (no result yet)" in history.stdout


def test_the_commands_of_docs_run_directory_print_what_it_says(small_run):
    path, best, partly = small_run
    text = (ROOT / "docs" / "run-directory.md").read_text()
    section = text[text.index("## The repository") : text.index("## The program graph")]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    printed = {}
    names = {"runs/NAME": str(path), "c007": partly.id, "c003": str(partly.parent)}  # the page's examples, this run's
    for line in block.group(1).splitlines():
        command = shlex.split(re.sub("|".join(names), lambda m: names[m.group(0)], line.split("  #")[0]))
        assert command[:3] == ["git", "-C", str(path)], line
        printed[" ".join(command[3:])] = git(path, *command[3:])
    assert len(printed) == 7 and all(printed.values())
    shown = printed["show best"]
    assert f"{best.id} [{best.result()}]" in shown and "Status: evaluated" in shown and "Notes (metaharness)" in shown
    assert "diff --git a/harness.py b/harness.py" in shown  # the revision itself, against the program it revised
    assert printed["log -1 --format=%(trailers:key=Score,valueonly) best"].strip() == f"{best.score:.4f}"
    tree = printed["log --graph --oneline --branches --tags"]
    assert f"{partly.id} [0.950 (1/4)] a bold revision" in tree and f"{partly.id} [implemented]" in tree
    results = printed["branch --list results/* -v"]
    assert f"results/{best.id}" in results and f"{best.id} [{best.result()}]" in results
    assert printed[f"show {partly.id}:harness.py"] == partly.source
    assert f"+{partly.source.splitlines()[0]}" in printed[f"diff {partly.parent} {partly.id} -- harness.py"]
    note = printed[f"notes show {partly.id}"]
    assert "val 0.9500 (1/4)" in note and "scored on 1 of the 4 search examples so far (partly scored" in note


def test_the_files_a_user_reads_are_readable_by_others(small_run):
    path, _, _ = small_run
    run_metaharness("report", "--run-dir", str(path))
    for name in ("report.html", "SUMMARY.md", "settings.json", "program-graph.json", "summary.jsonl"):
        assert stat.S_IMODE((path / name).stat().st_mode) == 0o644, name
