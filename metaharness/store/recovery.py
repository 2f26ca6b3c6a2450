"""What reopening a run repairs (``recover``): the work a kill left half done, and the damage a kill cannot cause.

A kill at any moment leaves at most: a candidate evaluated but not committed (in the journal), a committed
candidate or saved test result without its ``summary.jsonl`` line, a finished iteration whose plan was not yet
dropped, a half-written file. Damage by hand or a disk fault may leave more: a ``summary.jsonl`` lost or torn, a
candidate tag deleted, an unreadable program graph. Git is the record of the candidates and ``spend.jsonl`` of the
money; what disagrees with them is rebuilt from them, so a finished iteration never runs again and no id is handed
out twice. Every repair is one line of the list ``recover`` returns, for the user.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from metaharness.candidate import CANDIDATE_ID, Candidate, Evaluation, id_number
from metaharness.errors import InputError
from metaharness.planner.program import PREDICTED
from metaharness.store import program_graph as graph_file
from metaharness.store.files import clean_temporaries
from metaharness.store.log import CandidateLine, IterationFacts, RebuiltIterationLine, SplitLine

if TYPE_CHECKING:  # a type only: the run directory calls recover
    from metaharness.store.run_dir import RunDirectory


def recover(run: RunDirectory) -> list[str]:
    """Repair an interrupted run; say what was done.

    Commits every evaluated-but-uncommitted candidate of the journal, logs the ``summary.jsonl`` line of every
    committed candidate and saved test result that has none (a kill between the commit and its line), and
    drops the journaled plan of every iteration whose line was logged (a kill before the plan's removal).
    """
    actions = run.store.clean_interrupted()
    for folder in (run.path, run.path / "evals"):
        actions += [f"removed unfinished write {p.name}" for p in clean_temporaries(folder)]
    actions += run.spend.repair()
    run.spend.records()  # a spend line that cannot be read stops here (InputError: which line, what to do)
    actions += run.store.restore_tags()
    for candidate in run.journal.results():
        if run.store.has(candidate.id):
            run.journal.drop_result(candidate.id)
        else:
            run.commit(candidate)
            actions.append(f"committed {candidate.id} from the journal (evaluated before the run was stopped)")
    for candidate in run.journal.evidence():
        stored = run.store.get(candidate.id).candidate
        scored = stored.evaluation.examples if stored.evaluated and stored.evaluation else 0
        if candidate.evaluation is not None and candidate.evaluation.examples > scored:
            run.record_evaluation(candidate)
            actions.append(
                f"recorded {candidate.id}'s evaluation on {candidate.evaluation.examples} examples from the "
                "journal (scored before the run was stopped)"
            )
        elif (
            (journaled := candidate.evaluation) is not None
            and journaled.confirm is not None
            and (stored.supported and stored.evaluation is not None and stored.evaluation.confirm is None)
        ):  # a kill between the journal and the note: the held-out (and fold) scores are kept, the search's as stored
            held = dataclasses.replace(stored.evaluation, confirm=journaled.confirm, folds=journaled.folds)
            run.record_confirmation(dataclasses.replace(stored, evaluation=held))
            actions.append(f"recorded {candidate.id}'s held-out confirmation from the journal")
        run.journal.drop_evidence(candidate.id)
    rebuilt = _rebuild_log(run) if not run.log_records() else []
    actions += rebuilt or _complete_log(run)
    actions += _repair_graph(run)
    actions += _repair_iterations(run)
    actions += _lost_candidates(run)
    done = run.completed_iterations()
    for iteration in sorted(run.journal.planned()):
        if iteration in done:
            run.journal.drop_plan(iteration)
            actions.append(f"dropped the plan of iteration {iteration}, which had finished")
    return actions


def _complete_log(run: RunDirectory) -> list[str]:
    """Log every committed candidate and saved test result that has no line. A kill leaves at most the newest
    candidate, or one test result, unlogged (each is logged right after it is saved); more is damage, and the
    notes say so."""
    actions = []
    logged = {r.get("id") for r in run.log_records("candidate")}
    candidates = run.candidates()
    unlogged = [c for c in candidates if c.id not in logged]
    killed = len(unlogged) == 1 and unlogged[0] is candidates[-1]
    for candidate in unlogged:
        run.log(CandidateLine.of(candidate))
        why = "committed just before the run was stopped" if killed else "its line was missing: rebuilt from git"
        actions.append(f"logged {candidate.id} in summary.jsonl ({why})")
    tested = {r.get("id") for r in run.log_records("test")}
    untested = [path for path in _test_files(run) if path.name.split(".")[0] not in tested]
    for path in untested:
        cid = path.name.split(".")[0]
        run.log(SplitLine("test", cid, _saved(run, cid)))
        why = "saved just before the stop" if len(untested) == 1 else "its line was missing: rebuilt from evals/"
        actions.append(f"logged the test result of {cid} in summary.jsonl ({why})")
    return actions


def _rebuild_log(run: RunDirectory) -> list[str]:
    """A run whose ``summary.jsonl`` is gone (or holds no readable line) but whose git holds candidates: log every
    candidate as git records it now (its note, its iteration) and every saved test result; the iteration lines
    follow (``_repair_iterations``)."""
    candidates = run.candidates()
    if not candidates:
        return []
    for candidate in candidates:
        run.log(CandidateLine.of(candidate))
    tests = _test_files(run)
    for path in tests:
        cid = path.name.split(".")[0]
        run.log(SplitLine("test", cid, _saved(run, cid)))
    return [
        f"rebuilt summary.jsonl from git, which was missing or held no readable line: {len(candidates)} "
        "candidates with their "
        f"notes and iterations, {len(tests)} test results (its evaluation, stop and proposer-failure lines are "
        "lost)"
    ]


def _test_files(run: RunDirectory) -> list[Path]:
    return sorted((run.path / "evals").glob("c*.test.json"))


def _repair_iterations(run: RunDirectory) -> list[str]:
    """Log a line, rebuilt from git, for every finished iteration without one (torn, or lost with the log), so
    the loop never runs it again.

    Iterations run in order, so one is finished when a later one began (has a line, a plan, a candidate or a
    proposer failure). The last one begun is finished when its candidates are committed and its plan is gone:
    the loop saves an iteration's plan before it commits any of its candidates and drops it only after writing
    the iteration's line, so that line was written and lost since (torn, garbled or deleted).
    """
    candidates = run.candidates()
    logged, planned = run.completed_iterations(), set(run.journal.planned())
    failed = {r["iteration"] for r in run.log_records("proposer_failure") if isinstance(r.get("iteration"), int)}
    committed = {c.iteration for c in candidates}
    begun = logged | planned | committed | failed
    last = max(begun, default=-1)
    ended = last in committed and last not in planned
    actions = []
    for iteration in range(last + 1):
        if iteration in logged or iteration in planned or (iteration == last and not ended):
            continue
        line = _iteration_line(iteration, candidates)
        run.log(line)
        actions.append(
            f"repaired the iteration {iteration} line from git: summary.jsonl had none for this finished iteration "
            f"(candidates: {', '.join(line.facts.candidates) or 'none'}); it is not run again"
        )
    return actions


def _iteration_line(iteration: int, candidates: list[Candidate]) -> RebuiltIterationLine:
    """An iteration's ``summary.jsonl`` line as git can tell it: its candidates, and the best and the front
    among the candidates up to it (as they stand now); ``rebuilt`` marks it."""
    upto = [c for c in candidates if c.iteration <= iteration]
    return RebuiltIterationLine(
        IterationFacts.of(iteration, upto), "from git: the iteration's line was missing from summary.jsonl"
    )


def recorded_ids(run: RunDirectory) -> set[str]:
    """Every candidate id the log, the program graph (its candidate nodes; a predicted node is named by its
    proposer) or git (commit trailers, tagged or not) holds."""
    ids = {str(r["id"]) for r in run.log_records() if isinstance(r.get("id"), str)}
    for line in run.log_records("iteration"):
        ids |= {str(cid) for cid in line.get("candidates") or []}
    try:
        graph = graph_file.load(run.path)
    except InputError:  # set aside and rebuilt by recover
        graph = None
    ids |= {str(n.id) for n in graph.nodes if n.status != PREDICTED} if graph is not None else set()
    ids |= set(run.store.claimed())
    return {cid for cid in ids if CANDIDATE_ID.match(cid)}


def _lost_candidates(run: RunDirectory) -> list[str]:
    """Candidates the log or the program graph hold that git holds no commit of: their ids stay used."""
    lost = sorted(recorded_ids(run) - {c.id for c in run.candidates()}, key=id_number)
    return [
        f"{cid} is in summary.jsonl or program-graph.json but git holds no commit of it (lost); its id is not "
        "given out again"
        for cid in lost
    ]


def _repair_graph(run: RunDirectory) -> list[str]:
    """Set an unreadable graph file aside, and save the graph synced with the candidates when it was not."""
    actions = []
    try:
        saved = graph_file.load(run.path)
    except InputError:
        aside = graph_file.set_aside(run.path)
        actions.append(f"set the unreadable {aside.name} aside and rebuilt the program graph from the candidates")
        saved = None
    before = None if saved is None else saved.to_json()
    graph = graph_file.sync(saved, run.candidates())
    if graph.to_json() != before:
        run.graph.write(graph)
        if saved is not None:
            actions.append("brought the program graph up to date with the committed candidates")
    return actions


def _saved(run: RunDirectory, cid: str) -> Evaluation:
    """The test result saved for ``cid`` (its file exists)."""
    saved = run.split_result(cid, "test")
    assert saved is not None, f"{cid}'s test result file is listed but cannot be found"
    return saved
