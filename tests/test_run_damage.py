"""Damage a kill cannot cause (a file cut or deleted by hand, a tag removed, a garbled line): a resumed run checks
before it trusts, and each case ends repaired with a note saying what was repaired, or refused in one line saying
what to do; never a traceback, never an iteration run twice, never an id handed out twice. ``history`` on each
damaged directory prints its table or one clear line. The run: the real loop, store and spend journal with the
priced fakes of tests/loop_driver.py (2 seeds, 2 iterations, then the test split; every call costs $0.001)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from command_line import assert_fails_cleanly
from command_line import run_metaharness as cli
from fakes import program
from loop_driver import BEST_OF_N, CONFIG, PRICES, PROPOSER, TASK, CountedModel, PricedEvaluator, PricedProposer

from metaharness.errors import InputError
from metaharness.models.client import Client
from metaharness.report import write_summary_markdown
from metaharness.runner.ledger import run_ledger
from metaharness.search.loop import LoopEvents, LoopSettings, Optimizer, Seed
from metaharness.store import RunDirectory
from metaharness.store.files import append_jsonl
from metaharness.store.program_graph import GRAPH_FILE

CANDIDATES = ["c001", "c002", "c003", "c004", "c005"]  # 2 seeds, iteration 1's chain (c003 -> c004), iteration 2's


@dataclass
class Session:
    """What one session of the run did: its notes, the model calls it paid for, what it evaluated."""

    notes: list[str] = field(default_factory=list)
    calls: int = 0
    evaluated: list[tuple[str, str]] = field(default_factory=list)
    proposed: list[int] = field(default_factory=list)


class Notes(LoopEvents):
    def __init__(self, session: Session) -> None:
        self.session = session

    def note(self, text: str) -> None:
        self.session.notes.append(text)


def session(run_dir: Path, iterations: int = 2) -> Session:
    """One session of the run in ``run_dir``, wired as ``optimize()`` wires it (the run ledger over the journal)."""
    done = Session()
    run = RunDirectory.open(run_dir, CONFIG)
    try:
        costs = run_ledger(run, prices=PRICES)
        calls = run_dir.parent / "calls.log"
        task_model = Client(TASK, CountedModel(calls), cache=None, ledger=costs.ledger)
        evaluator = PricedEvaluator(task_model)
        evaluator.test_available = True
        proposer = PricedProposer(Client(PROPOSER, CountedModel(calls), cache=None, ledger=costs.ledger), task_model)
        Optimizer(
            run,
            LoopSettings("toy", BEST_OF_N, iterations),
            proposer,
            evaluator,
            [Seed("zero", program(0.2)), Seed("few", program(0.3))],
            events=Notes(done),
            spending=costs,
            write_summary=lambda: write_summary_markdown(run),
        ).run()
        done.calls = int(costs.ledger.totals()["calls"])
        done.evaluated = evaluator.evaluated
        done.proposed = [s.iteration for s in proposer.states]
    finally:
        run.close()
    return done


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished run (the seeds, 2 iterations, the test split); each test damages a copy."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    first = session(run_dir)
    assert first.calls == 38 and first.proposed == [1, 2]
    return run_dir


@pytest.fixture
def run_dir(finished, tmp_path) -> Path:
    copy = tmp_path / "run"
    subprocess.run(["cp", "-a", str(finished), str(copy)], check=True)
    return copy


def commits(run_dir: Path) -> dict[str, str]:
    return {c.candidate.id: c.commit for c in RunDirectory.browse(run_dir).store.candidates()}


def assert_nothing_ran_again(run_dir: Path, before: dict[str, str], again: Session) -> None:
    """The resumed session paid for nothing, proposed nothing, evaluated nothing; git is as it was."""
    assert again.calls == 0 and again.proposed == [] and again.evaluated == []
    assert commits(run_dir) == before
    run = RunDirectory.browse(run_dir)
    assert run.completed_iterations() == {0, 1, 2}
    assert sorted(r["id"] for r in run.log_records("candidate")) == CANDIDATES  # once each
    reopened = RunDirectory.open(run_dir, CONFIG)
    try:
        assert reopened.recover() == []  # repaired once: nothing left to say
    finally:
        reopened.close()


def assert_history_works(run_dir: Path) -> subprocess.CompletedProcess:
    shown = cli("history", "--run-dir", str(run_dir))
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert "c005 *" in shown.stdout
    return shown


def note(done: Session, start: str) -> str:
    """The session's note that starts with ``start`` (there is one)."""
    found = [n for n in done.notes if n.startswith(start)]
    assert len(found) == 1, done.notes
    return found[0]


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


# ------------------------------------------------------------------------------------------------ summary.jsonl


def test_a_torn_last_iteration_line_is_rebuilt_from_git_and_the_iteration_is_not_run_again(run_dir):
    summary = run_dir / "summary.jsonl"
    lines = lines_of(summary)
    last = max(i for i, line in enumerate(lines) if json.loads(line)["type"] == "iteration")
    assert json.loads(lines[last])["iteration"] == 2
    summary.write_text("\n".join([*lines[:last], lines[last][: len(lines[last]) // 2]]))  # torn mid-line
    assert RunDirectory.browse(run_dir).completed_iterations() == {0, 1}
    before = commits(run_dir)
    assert_history_works(run_dir)
    again = session(run_dir)
    assert "(candidates: c005)" in note(again, "repaired the iteration 2 line from git")
    assert not any("just before the stop" in n for n in again.notes)  # its 4 test lines were lost with it
    assert_nothing_ran_again(run_dir, before, again)
    line = RunDirectory.browse(run_dir).log_records("iteration")[-1]
    assert line["iteration"] == 2 and line["candidates"] == ["c005"] and line["best"] == "c005" and line["rebuilt"]
    # Repaired once: the next session has nothing to say and runs only the iteration it is asked for more.
    more = session(run_dir, iterations=3)
    assert not any("repaired" in n for n in more.notes) and more.proposed == [3]
    assert commits(run_dir) == {**before, "c006": commits(run_dir)["c006"]}


def test_a_deleted_last_iteration_line_is_rebuilt_from_git_and_the_iteration_is_not_run_again(run_dir):
    summary = run_dir / "summary.jsonl"
    lines = lines_of(summary)
    last = max(i for i, line in enumerate(lines) if json.loads(line)["type"] == "iteration")
    summary.write_text("".join(f"{line}\n" for i, line in enumerate(lines) if i != last))  # gone, not torn
    assert RunDirectory.browse(run_dir).completed_iterations() == {0, 1}
    before = commits(run_dir)
    again = session(run_dir)
    assert "(candidates: c005)" in note(again, "repaired the iteration 2 line from git")
    assert_nothing_ran_again(run_dir, before, again)


def test_a_garbled_iteration_line_before_the_last_is_rebuilt_since_a_later_iteration_began(run_dir):
    summary = run_dir / "summary.jsonl"
    lines = lines_of(summary)
    first = next(i for i, line in enumerate(lines) if '"type": "iteration"' in line and '"iteration": 1,' in line)
    lines[first] = lines[first].replace('"iteration": 1,', '"iteration": 1#')
    summary.write_text("".join(f"{line}\n" for line in lines))
    before = commits(run_dir)
    again = session(run_dir)
    assert "(candidates: c003, c004)" in note(again, "repaired the iteration 1 line from git")
    assert_nothing_ran_again(run_dir, before, again)


def test_a_torn_candidate_line_of_an_open_iteration_is_no_finished_iteration(run_dir):
    """A damaged line alone proves nothing: the last iteration counts as finished only when its plan is gone."""
    run = RunDirectory.open(run_dir, CONFIG)
    run.journal.save_plan(3, [])
    with open(run.summary_path, "a") as handle:
        handle.write('{"id": "c0')
    assert not any("iteration 3" in note for note in run.recover())
    assert run.completed_iterations() == {0, 1, 2} and run.journal.plan(3) == []
    run.close()


def test_a_deleted_summary_is_rebuilt_from_git_and_no_seed_or_iteration_runs_again(run_dir):
    (run_dir / "summary.jsonl").unlink()
    before = commits(run_dir)
    assert_history_works(run_dir)
    again = session(run_dir)
    rebuilt = note(again, "rebuilt summary.jsonl from git, which was missing or held no readable line: 5 candidates")
    assert "4 test results" in rebuilt and again.notes[0] == rebuilt
    assert [note(again, f"repaired the iteration {i} line from git") for i in range(3)]
    assert not any("committed just before the run was stopped" in n for n in again.notes)
    assert_nothing_ran_again(run_dir, before, again)
    run = RunDirectory.browse(run_dir)
    logged = {r["id"]: r for r in run.log_records("candidate")}
    assert {cid: r["iteration"] for cid, r in logged.items()} == {"c001": 0, "c002": 0, "c003": 1, "c004": 1, "c005": 2}
    assert logged["c005"]["status"] == "evaluated" and logged["c005"]["evaluation"]["examples"] == 4  # from its note
    assert logged["c003"]["status"] == "implemented"
    assert sorted(r["id"] for r in run.log_records("test")) == ["c001", "c002", "c004", "c005"]
    assert [r["candidates"] for r in run.log_records("iteration")] == [["c001", "c002"], ["c003", "c004"], ["c005"]]


def test_a_missing_middle_candidate_line_is_named_damage_not_a_stop(run_dir):
    summary = run_dir / "summary.jsonl"
    summary.write_text(
        "".join(line + "\n" for line in lines_of(summary) if '"id": "c002"' not in line or '"candidate"' not in line)
    )
    run = RunDirectory.open(run_dir, CONFIG)
    assert run.recover() == ["logged c002 in summary.jsonl (its line was missing: rebuilt from git)"]
    run.close()


# ------------------------------------------------------------------------------------------------ ids and tags


def test_a_deleted_newest_tag_keeps_its_id_and_is_restored_from_its_commit(run_dir):
    before = commits(run_dir)
    subprocess.run(["git", "-C", str(run_dir), "tag", "-d", "c005"], check=True, capture_output=True)
    browsed = RunDirectory.browse(run_dir)
    assert "c005" not in commits(run_dir)
    assert browsed.next_id() == "c006"  # git history, the log and the graph still hold c005
    shown = cli("history", "--run-dir", str(run_dir))
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert f"c005 is committed ({before['c005'][:10]}) but its tag is missing" in shown.stdout
    again = session(run_dir)
    assert note(again, f"restored the missing tag c005 from its commit {before['c005'][:10]}")
    assert_nothing_ran_again(run_dir, before, again)
    assert RunDirectory.browse(run_dir).store.get("c005").note  # with its note
    more = session(run_dir, iterations=3)
    assert more.proposed == [3] and list(commits(run_dir))[-1] == "c006"


def test_next_id_never_hands_out_an_id_the_log_or_the_graph_still_holds(run_dir):
    run = RunDirectory.open(run_dir, CONFIG)
    append_jsonl(run.summary_path, {"type": "candidate", "id": "c009", "iteration": 2})  # a candidate git lost entirely
    assert run.next_id() == "c010"
    assert "c009 is in summary.jsonl or program-graph.json but git holds no commit of it" in run.recover()[-1]
    graph = json.loads((run_dir / GRAPH_FILE).read_text())
    graph["nodes"].append({**graph["nodes"][0], "id": "c012"})
    (run_dir / GRAPH_FILE).write_text(json.dumps(graph))
    assert run.next_id() == "c013"
    run.close()


# ------------------------------------------------------------------------------------------------ program graph


@pytest.mark.parametrize("content", ["[1, 2, 3]", '"graph"', "null", '{"nodes": 5}'])
def test_a_graph_file_that_is_json_but_no_graph_is_set_aside_and_rebuilt(run_dir, content):
    (run_dir / GRAPH_FILE).write_text(content)
    shown = assert_history_works(run_dir)
    assert "the program graph was rebuilt from the candidates" in shown.stdout
    before = commits(run_dir)
    again = session(run_dir)
    assert note(again, "set the unreadable program-graph.json.unreadable-")
    assert_nothing_ran_again(run_dir, before, again)
    assert [p.read_text() for p in run_dir.glob(f"{GRAPH_FILE}.unreadable-*")] == [content]  # kept for inspection
    assert {n["id"] for n in json.loads((run_dir / GRAPH_FILE).read_text())["nodes"]} >= set(CANDIDATES)


# ------------------------------------------------------------------------------------------------ spend journal


def damage_spend_line(run_dir: Path, number: int, keep: str) -> str:
    """Garble line ``number`` of spend.jsonl: ``keep`` "end" keeps all but its start (its key, tokens and usd),
    "start" its first half."""
    path = run_dir / "spend.jsonl"
    lines = lines_of(path)
    line = lines[number - 1]
    lines[number - 1] = "#@!" + line[25:] if keep == "end" else line[: len(line) // 2] + "#@!"
    path.write_text("".join(f"{text}\n" for text in lines))
    return line


def test_a_damaged_spend_line_that_still_holds_its_cost_is_counted_and_rewritten(run_dir):
    spent = RunDirectory.browse(run_dir).spent()
    original = json.loads(damage_spend_line(run_dir, 12, keep="end"))
    assert RunDirectory.browse(run_dir).spent() == spent  # counted from the fields still readable
    again = session(run_dir)
    assert "$0.001, 15 tokens" in note(again, "repaired spend.jsonl line 12, which was damaged")
    assert again.calls == 0
    repaired = json.loads(lines_of(run_dir / "spend.jsonl")[11])
    assert repaired["usd"] == original["usd"] and repaired["tokens"] == original["tokens"] and repaired["repaired"]
    assert repaired.get("key") == original.get("key")  # a resumed ledger knows the request was paid for
    assert RunDirectory.browse(run_dir).spent() == spent


def test_a_spend_line_that_lost_its_cost_refuses_in_one_line_until_restored_or_accepted(run_dir):
    spent = RunDirectory.browse(run_dir).spent()
    original = damage_spend_line(run_dir, 12, keep="start")
    message = "spend.jsonl line 12 is damaged"
    with pytest.raises(InputError, match=message) as refused:
        session(run_dir)
    assert "--accept-spend-loss" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(InputError, match=message):  # the loop's own check, for a store opened without a ledger
        run = RunDirectory.open(run_dir, CONFIG)
        try:
            run.recover()
        finally:
            run.close()
    assert_history_works(run_dir)
    # Restored from a backup: everything counts again.
    lines = lines_of(run_dir / "spend.jsonl")
    lines[11] = original
    (run_dir / "spend.jsonl").write_text("".join(f"{text}\n" for text in lines))
    assert RunDirectory.browse(run_dir).spent() == spent
    # Or the loss accepted explicitly: the call counts, at $0, and the damaged text is kept.
    damage_spend_line(run_dir, 12, keep="start")
    accepted = subprocess.run(
        [sys.executable, "-m", "metaharness.store.repair", str(run_dir), "--accept-spend-loss"],
        capture_output=True,
        text=True,
    )
    assert accepted.returncode == 0 and accepted.stderr == ""
    assert accepted.stdout.startswith("repaired spend.jsonl line 12, which was damaged")
    assert "its loss accepted" in accepted.stdout
    after = RunDirectory.browse(run_dir).spent()
    assert after["calls"] == spent["calls"] and after["usd"] == pytest.approx(spent["usd"] - 0.001)
    assert session(run_dir).calls == 0


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("evals/c005.test.json", "{", "evals/c005.test.json cannot be read"),
        ("evals/c005.test.json", "[]", "evals/c005.test.json holds a JSON list, not a dict"),
        ("evals/c005.test.json", '{"scores": 1}', "evals/c005.test.json is not a saved result"),
        ("settings.json", "{", "settings.json cannot be read"),
    ],
)
def test_a_damaged_result_or_settings_file_is_one_clear_line(run_dir, name, content, message):
    (run_dir / name).write_text(content)
    assert_fails_cleanly(cli("history", "--run-dir", str(run_dir)), message)
    with pytest.raises(InputError, match=message):
        session(run_dir)


def test_the_accept_command_refuses_what_is_no_run_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "metaharness.store.repair", str(tmp_path / "nowhere"), "--accept-spend-loss"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.startswith("error: No run at") and len(done.stderr.splitlines()) == 1


def test_history_of_a_directory_that_is_no_run_fails_in_one_line(tmp_path):
    (tmp_path / "run" / ".git").mkdir(parents=True)
    assert_fails_cleanly(cli("history", "--run-dir", str(tmp_path / "run")), "is not a metaharness run directory")
