"""The git candidate store and the run directory: commits, parents, notes, best, repair, journal, frontier."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest
from command_line import assert_fails_cleanly, run_metaharness
from git.exc import GitCommandError

from metaharness import frontier
from metaharness.candidate import Candidate, Evaluation, PlanEntry, Prediction
from metaharness.errors import InputError
from metaharness.store import BEST_REF, RunDirectory
from metaharness.store.files import append_jsonl, atomic_write_json, read_jsonl

CONFIG = {"dataset": "toy", "task_model": "fake", "val_limit": 3}


def git(path: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True, text=True).stdout


def record(cid: str, parent: str | None, score: float | None, ctx: float = 100.0, **kw) -> Candidate:
    evaluation = (
        None
        if score is None
        else Evaluation("val", {"primary": score, "f1": score / 2}, {"context_tokens": ctx, "usd": 0.01}, 3)
    )
    status = "failed" if score is None else "evaluated"
    return Candidate(
        cid,
        parent,
        1 if parent else 0,
        f"# {cid}\nclass Harness: pass\n",
        status=status,
        summary=f"make {cid}",
        evaluation=evaluation,
        **kw,
    )


@pytest.fixture
def run(tmp_path):
    rd = RunDirectory.open(tmp_path / "run", CONFIG)
    yield rd
    rd.close()


def test_candidates_are_commits_on_their_parents_with_scores_in_trailers_and_notes(run):
    run.commit(record("c001", None, 0.3))
    run.commit(record("c002", "c001", 0.5, hypothesis="labels help", prediction=Prediction(score=0.45)))
    run.commit(record("c003", "c001", None, error="ImportError: no module named foo"))
    path = run.path
    root = git(path, "rev-parse", "root").strip()
    assert git(path, "rev-parse", "c001^").strip() == root
    assert git(path, "rev-parse", "c002^").strip() == git(path, "rev-parse", "c001").strip()
    assert git(path, "rev-parse", "c003^").strip() == git(path, "rev-parse", "c001").strip()
    assert git(path, "rev-parse", "best").strip() == git(path, "rev-parse", "c002").strip()
    assert git(path, "show", "c002:harness.py").startswith("# c002")
    assert '"hypothesis": "labels help"' in git(path, "show", "c002:candidate.json")
    trailers = git(path, "log", "-1", "--format=%(trailers:key=Score,valueonly)", "c002").strip()
    assert trailers == "0.5000"
    assert "Predicted-Score: 0.4500" in git(path, "log", "-1", "--format=%B", "c002")
    assert git(path, "notes", "--ref=metaharness", "show", "c002").startswith("val 0.5000")
    assert "FAILED: ImportError" in git(path, "notes", "--ref=metaharness", "show", "c003")
    graph = git(path, "log", "--graph", "--all", "--oneline", "--notes=metaharness")
    assert "c002 [0.500] make c002" in graph and "c003 [failed]" in graph and "val 0.3000" in graph
    # the working tree holds the best candidate; everything beside the repository is ignored
    assert (path / "harness.py").read_text().startswith("# c002")
    assert git(path, "status", "--porcelain") == ""
    subprocess.run(["git", "-C", str(path), "fsck", "--strict"], check=True, capture_output=True)
    ids = [c.candidate.id for c in run.store.candidates()]
    assert ids == ["c001", "c002", "c003"]
    assert run.store.get("c002").candidate.prediction == Prediction(score=0.45)


def scored(examples: int, share: int, score: float) -> Evaluation:
    return Evaluation("val", {"primary": score}, {"context_tokens": 50.0}, examples, share=share)


def test_each_result_is_a_commit_that_plain_git_shows_with_its_score_and_status(run):
    """A candidate is committed checked (implemented); each stage of its evaluation adds a result commit on the
    parent of its own commit (results/cNNN moves to it), and best is the best's result commit, so git log shows
    scores and git show the revision's diff."""
    path = run.path
    for cid, parent in (("c001", None), ("c002", "c001")):
        run.commit(dataclasses.replace(record(cid, parent, None), status="implemented", error=None))
    assert git(path, "log", "-1", "--format=%s", "c001") == "c001 [implemented] make c001\n"
    run.store.record_evaluation("c001", scored(4, 4, 0.5))
    run.store.record_evaluation("c002", scored(3, 4, 0.667))  # partly scored: shows 3/4, never best
    assert git(path, "log", "-1", "--format=%s", "results/c002") == "c002 [0.667 (3/4)] make c002\n"
    body = git(path, "log", "-1", "--format=%B", "results/c002")
    assert "scored on 3 of the 4 search examples so far (partly scored: not a result yet)" in body
    assert "Examples: 3/4" in body and "Supported: no" in body and "Status: evaluated" in body
    assert "Result-Of: c002" in body
    assert git(path, "log", "-1", "--format=%s", "best") == "c001 [0.500] make c001\n"
    trailers = "%(trailers:key=Score,valueonly)%(trailers:key=Status,valueonly)"
    assert git(path, "log", "-1", f"--format={trailers}", "best").split() == ["0.5000", "evaluated"]
    assert '"status": "evaluated"' in git(path, "show", "best:candidate.json")
    assert json.loads(git(path, "show", "best:evaluation.json"))["examples"] == 4
    run.store.record_evaluation("c002", scored(4, 4, 0.75))  # the rest of its share: now the best
    assert git(path, "log", "--format=%s", "best").splitlines() == [
        "c002 [0.750] make c002",
        "c001 [implemented] make c001",  # c002 was committed before c001 was scored
        "metaharness run: toy with task model fake",
    ]
    assert git(path, "rev-parse", "best^") == git(path, "rev-parse", "c002^")  # a result is a sibling of its commit
    run.commit(dataclasses.replace(record("c003", "c002", None), status="implemented", error=None))
    assert git(path, "rev-parse", "c003^") == git(path, "rev-parse", "results/c002")  # off its parent's newest
    run.store.record_failure("c003", "Timeout: the harness ran past 60 s")
    assert git(path, "log", "-1", "--format=%s", "results/c003") == "c003 [failed] make c003\n"
    assert git(path, "rev-parse", "results/c003^") == git(path, "rev-parse", "results/c002")
    stored = {c.candidate.id: c for c in run.store.candidates()}
    assert stored["c002"].result == git(path, "rev-parse", "results/c002").strip()
    assert stored["c001"].commit == git(path, "rev-parse", "c001").strip()  # the tag stays on the own commit
    assert run.store.best().id == "c002" and stored["c003"].candidate.failed
    assert run.store.claimed() == {cid: s.commit for cid, s in stored.items()}  # result commits are not claims
    assert git(path, "status", "--porcelain") == "" and (path / "evaluation.json").exists()
    subprocess.run(["git", "-C", str(path), "fsck", "--strict"], check=True, capture_output=True)


def test_git_show_best_shows_the_revision_its_score_and_its_note(run):
    """Plain git, as a newcomer types it: git show best (and git log -p best) shows the harness diff against the
    revised program and the score; git notes show best prints the readable note (the run names its notes ref)."""
    path = run.path
    run.commit(Candidate("c001", None, 0, "class Harness:\n    pass\n", status="implemented", summary="seed"))
    run.store.record_evaluation("c001", scored(4, 4, 0.25))
    source = "class Harness:\n    votes = 9\n"
    run.commit(Candidate("c002", "c001", 1, source, status="implemented", summary="vote over 9 neighbours"))
    run.store.record_evaluation("c002", scored(2, 4, 0.5))
    run.store.record_evaluation("c002", scored(4, 4, 0.75))
    shown = git(path, "show", "best")
    assert "c002 [0.750] vote over 9 neighbours" in shown and "Score: 0.7500" in shown
    assert "-    pass\n+    votes = 9" in shown
    assert shown.index("diff --git a/harness.py") < shown.index("diff --git a/evaluation.json")  # the program first
    assert "Notes (metaharness):\n    val 0.7500" in shown and "evaluation-json" not in shown
    assert git(path, "notes", "show", "best").startswith("val 0.7500\nscored on 4 of the 4 search examples")
    history = git(path, "log", "-p", "--format=%s", "best")
    assert history.index("c002 [0.750]") < history.index("c001 [0.250]") and "+    votes = 9" in history
    run.store.annotate("c002", run.store.get("c002").note + "test 0.6000  (10 test examples, 0 with errors)\n")
    assert "test 0.6000" in git(path, "notes", "show", "best")  # the test result reaches best's note too
    assert run.store.get("c002").candidate.evaluation.primary == 0.75  # the own commit's note still reads back


def test_a_run_made_before_the_notes_ref_was_named_gets_it_when_opened(run, tmp_path):
    path = run.path
    run.commit(record("c001", None, 0.3))
    run.close()
    git(path, "config", "--unset", "core.notesRef")
    git(path, "config", "--unset", "diff.orderFile")
    RunDirectory.browse(path)
    assert git(path, "config", "core.notesRef").strip() == "refs/notes/metaharness"
    assert git(path, "notes", "show", "c001").startswith("val 0.3000")


def test_a_candidate_commit_whose_files_cannot_be_read_is_refused_in_one_line(run):
    run.commit(record("c001", None, 0.4))
    path = run.path
    # a commit of c001 whose candidate.json is damaged, put in place of its own by hand
    git(path, "checkout", "-q", "-b", "edit", "c001")
    (path / "candidate.json").write_text('{"id": "c001", "parent": nu')
    git(path, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qam", "edit\n\nCandidate: c001")
    git(path, "tag", "-f", "c001", "edit")
    run.close()
    again = RunDirectory.browse(path)
    with pytest.raises(InputError) as caught:
        again.candidates()
    message = str(caught.value)
    assert "c001" in message and "candidate.json" in message and "tag -f c001" in message
    assert "\n" not in message
    assert_fails_cleanly(run_metaharness("history", "--run-dir", str(path)), "of c001 in")  # no traceback


def test_best_moves_only_on_a_strictly_better_evaluated_candidate(run):
    run.commit(record("c001", None, 0.4))
    run.commit(record("c002", "c001", 0.4))
    run.commit(record("c003", "c001", None, error="boom"))
    assert run.store.best().id == "c001"
    run.commit(record("c004", "c002", 0.41))
    assert run.store.best().id == "c004"


def test_unknown_parent_and_duplicate_id_are_refused_without_trace(run):
    run.commit(record("c001", None, 0.4))
    with pytest.raises(ValueError):
        run.store.commit(record("c002", "c077", 0.5))
    with pytest.raises(GitCommandError, match="reference already exists"):
        run.store.commit(record("c001", None, 0.9))  # the ref transaction refuses to overwrite
    assert [c.candidate.id for c in run.store.candidates()] == ["c001"]
    assert run.store.best().id == "c001"


def test_recover_cleans_stale_locks_and_worktree_and_commits_the_journal(run):
    run.commit(record("c001", None, 0.4))
    git_dir = run.path / ".git"
    (git_dir / "index.lock").write_text("")
    (git_dir / "refs" / "heads" / "best.lock").write_text("")
    (run.path / "harness.py").write_text("half written")
    run.journal.save_result(record("c002", "c001", 0.6))
    actions = run.recover()
    assert any("index.lock" in a for a in actions) and any("working tree" in a for a in actions)
    assert any("c002" in a for a in actions)
    assert run.store.best().id == "c002" and not list(run.journal.folder.glob("c*.json"))
    assert (run.path / "harness.py").read_text().startswith("# c002")
    assert [r["id"] for r in run.log_records("candidate")] == ["c001", "c002"]
    subprocess.run(["git", "-C", str(run.path), "fsck"], check=True, capture_output=True)


def test_reopening_checks_settings_and_the_lock(run, tmp_path):
    with pytest.raises(InputError, match="Another metaharness process"):
        RunDirectory.open(run.path, CONFIG)
    run.commit(record("c001", None, 0.4))  # a run that did something (one that did nothing is reused afresh)
    run.close()
    with pytest.raises(InputError, match="val_limit"):
        RunDirectory.open(run.path, {**CONFIG, "val_limit": 10})
    again = RunDirectory.open(run.path, {**CONFIG, "proposer": "other"})
    again.close()
    with pytest.raises(InputError, match="No run"):
        RunDirectory.open(tmp_path / "nothing")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(InputError, match="not a metaharness run"):
        RunDirectory.open(tmp_path / "full", CONFIG)


def test_next_id_skips_planned_and_journaled_ids(run):
    run.commit(record("c001", None, 0.4))
    run.journal.save_plan(1, [PlanEntry("c002", None, ""), PlanEntry("c003", None, "")])
    run.journal.save_result(record("c004", "c001", 0.1))
    assert run.next_id() == "c005"


def test_test_result_is_added_to_the_note(run):
    run.commit(record("c001", None, 0.4))
    run.save_split_result("c001", "test", Evaluation("test", {"primary": 0.35}, {}, 100))
    assert "test 0.3500  (100 test examples" in git(run.path, "notes", "--ref=metaharness", "show", "c001")
    assert run.test_result("c001").primary == 0.35


def test_jsonl_tolerates_a_line_torn_by_a_kill(tmp_path):
    path = tmp_path / "log.jsonl"
    append_jsonl(path, {"a": 1})
    with open(path, "a") as handle:
        handle.write('{"b": 2, "tor')
    append_jsonl(path, {"c": 3})
    assert read_jsonl(path) == [{"a": 1}, {"c": 3}]


def test_pareto_front_of_score_context_and_cost():
    a = record("c001", None, 0.3, ctx=100)
    b = record("c002", "c001", 0.5, ctx=900)
    c = record("c003", "c001", 0.2, ctx=500)  # dominated by a
    d = record("c004", "c001", None)  # failed: never on the front
    e = record("c005", "c001", 0.5, ctx=900)  # ties b: both stay
    assert [r.id for r in frontier.pareto_front([a, b, c, d, e])] == ["c001", "c002", "c005"]
    best = frontier.best([a, b, c, d, e])
    assert best is not None and best.id == "c002"
    assert frontier.best([d]) is None
    assert BEST_REF == "refs/heads/best"


def test_recover_logs_a_candidate_committed_just_before_a_kill(run):
    run.commit(record("c001", None, 0.4))
    late = record("c002", "c001", 0.6)
    run.journal.save_result(late)
    run.store.commit(late)  # committed; the kill came before its summary.jsonl line
    assert [r["id"] for r in run.log_records("candidate")] == ["c001"]
    actions = run.recover()
    assert any("logged c002" in a for a in actions)
    line = run.log_records("candidate")[-1]
    assert line["id"] == "c002" and line["score"] == 0.6 and line["parent"] == "c001"
    assert not list(run.journal.folder.glob("c*.json"))
    assert run.recover() == [] and [r["id"] for r in run.log_records("candidate")] == ["c001", "c002"]


def test_recover_drops_the_plan_of_a_finished_iteration_only(run):
    run.commit(record("c001", None, 0.4))
    run.journal.save_plan(1, [PlanEntry("c002", None, "")])
    # logged; the kill came before the plan's removal
    append_jsonl(run.summary_path, {"type": "iteration", "iteration": 1})
    run.journal.save_plan(2, [PlanEntry("c003", None, "")])  # an open iteration: kept for the resumed run
    actions = run.recover()
    assert any("plan of iteration 1" in a for a in actions)
    assert run.journal.plan(1) is None and run.journal.plan(2) == [PlanEntry("c003", None, "")]
    assert run.next_id() == "c004"


def test_recover_logs_a_test_result_saved_just_before_a_kill(run):
    run.commit(record("c001", None, 0.4))
    run.save_split_result("c001", "test", Evaluation("test", {"primary": 0.35}, {}, 100))
    assert [r["id"] for r in run.log_records("test")] == ["c001"]  # saving logs the line...
    run.commit(record("c002", "c001", 0.5))
    evaluation = Evaluation("test", {"primary": 0.45}, {}, 100)
    atomic_write_json(run.path / "evals" / "c002.test.json", evaluation.to_dict())  # ...a kill came before it
    actions = run.recover()
    assert any("test result of c002" in a for a in actions)
    assert [(r["id"], r["evaluation"]["scores"]["primary"]) for r in run.log_records("test")] == [
        ("c001", 0.35),
        ("c002", 0.45),
    ]
    assert run.recover() == []
