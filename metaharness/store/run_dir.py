"""A run directory: the candidate repository plus what sits beside it, and the rules for reopening it.

    runs/<name>/            the git repository (working tree = the best candidate's files)
        traces/<id>.<split>.jsonl   per-example records of every evaluation (linked from candidate.json)
        evals/<id>.test.json        test-split results of the best and the frontier
        journal/                    decided or evaluated work not yet committed (see journal.py)
        work/<id>/harness.py        the file a candidate is checked and evaluated from
        program-graph.json          the lasting program graph: candidates and unrealised predictions (program_graph.py)
        summary.jsonl               machine-readable log: one line per candidate, iteration, stop and test result
        spend.jsonl                 one fsynced line per model call: the run's spend over all sessions (spend.py)
        SUMMARY.md                  human-readable summary, rewritten after every iteration
        run.lock                    held (flock) while a run is active

Only one process may run in a directory at a time (the lock). Opening for a run repairs what a kill left behind:
it commits every evaluated candidate found in the journal, writes the ``summary.jsonl`` lines a kill kept from
being written, brings the program graph up to date with the candidates, and drops the plans of finished
iterations. It also checks before it trusts, against damage a kill cannot cause (a file deleted or cut by hand, a
disk fault): git is the record of the candidates and ``spend.jsonl`` of the money, and ``summary.jsonl`` is
rebuilt from git where it disagrees (a missing candidate tag is restored from its commit, a missing or torn
iteration line of a finished iteration rebuilt, a lost ``summary.jsonl`` rebuilt whole), so a finished iteration
never runs again and no id is handed out twice; a spend line that cannot be read stops the run
(``metaharness.store.spend``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import git

from metaharness.candidate import CANDIDATE_ID, Candidate, Evaluation, PlanEntry, candidate_id, id_number
from metaharness.candidates.protocol import HARNESS_FILE
from metaharness.errors import InputError, StorageFailure, space_for
from metaharness.planner.graph import PlanGraph
from metaharness.planner.program import PREDICTED
from metaharness.store import program_graph as graph_file
from metaharness.store.crash import crash_point
from metaharness.store.files import (
    append_jsonl,
    atomic_write_json,
    atomic_write_text,
    clean_temporaries,
    free_bytes,
    read_json,
    read_jsonl,
)
from metaharness.store.git_store import GitStore, render_note
from metaharness.store.journal import Journal
from metaharness.store.log import (
    CandidateLine,
    EvaluationLine,
    FailureLine,
    IterationFacts,
    LogLine,
    RebuiltIterationLine,
    SplitLine,
)
from metaharness.store.spend import RESERVE_FILE, SPEND_FILE, SpendJournal

# A session stops (StorageFailure) before it writes to a run whose disk has less than this free: the space the
# small writes of a step need (a commit, a journal file, a log line), so a full disk stops a run between steps.
MIN_FREE_BYTES = 1 << 20
# A git command that fails on a disk with less than this free failed for want of space.
FULL_BYTES = 1 << 20

# Settings that make scores comparable: a run directory keeps them for its whole life.
FIXED_SETTINGS = ("dataset", "task_model", "val_limit")
SETTINGS_FILE = "settings.json"  # the run's settings (metaharness.search.settings) as the last session resolved them
# What a start writes before the run does anything (see RunDirectory.started).
START_FILES = {".git", "run.lock", SETTINGS_FILE, RESERVE_FILE, "journal"}


class RunDirectory:
    """An open run directory (see the module docstring); use ``open`` or ``browse``."""

    def __init__(self, path: Path, store: GitStore, lock_fd: int | None = None) -> None:
        self.path = Path(path)
        self.store = store
        self.journal = Journal(self.path / "journal")
        self.summary_path = self.path / "summary.jsonl"
        self.summary_md = self.path / "SUMMARY.md"
        self.spend = SpendJournal(self.path / SPEND_FILE)
        self._lock_fd = lock_fd

    @classmethod
    def open(cls, path: Path, config: dict[str, Any] | None = None) -> RunDirectory:
        """Open (or, given ``config``, create) the run at ``path`` for running; takes the lock.

        An existing run must have been created with the same ``FIXED_SETTINGS`` as ``config``.
        """
        path = Path(path)
        exists = GitStore.exists(path)
        if not exists and config is None:
            raise InputError(
                f"No run at {path} to resume; start one with: metaharness optimize --dataset NAME --run-dir {path}"
            )
        if not exists and path.is_dir() and not _only_start_files(path):  # a start that failed leaves its lock
            raise InputError(f"{path} exists and is not a metaharness run; choose an empty or new --run-dir.")
        with _disk(path):
            path.mkdir(parents=True, exist_ok=True)
            lock_fd = os.open(path / "run.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise InputError(
                f"Another metaharness process is running in {path}; wait for it or use another --run-dir."
            ) from None
        try:
            if exists and config is not None and not cls.started(path):
                _clear_unstarted(path)  # a start interrupted before the run did anything: begun again here
                exists = False
            SpendJournal(path / SPEND_FILE).keep_reserve()
            _require_space(path)
        except BaseException:
            os.close(lock_fd)
            raise
        if exists:
            store = GitStore.open(path)
        else:
            assert config is not None  # a new run without settings was refused above
            with _disk(path):
                store = GitStore.init(path, config)
        if exists and config is not None:
            stored = store.config()
            for key in FIXED_SETTINGS:
                if stored.get(key) != config.get(key):
                    os.close(lock_fd)
                    flag = "--" + key.replace("_", "-")
                    same = f"{flag} {stored[key]}" if stored.get(key) is not None else f"no {flag}"
                    raise InputError(
                        f"{path} is a run with {key}={stored.get(key)!r}, not {config.get(key)!r}; scores would not be "
                        f"comparable. Use another --run-dir, or rerun with {same} (or --resume, which reuses the "
                        "run's settings)."
                    )
        run = cls(path, store, lock_fd)
        if exists and not run.spend.exists():
            run._carry_logged_spend()
        return run

    def _carry_logged_spend(self) -> None:
        """A run from before the spend journal: start the journal at the last ``spent`` its log recorded."""
        for entry in reversed(self.log_records()):
            spent = entry.get("spent")
            if isinstance(spent, dict):
                self.spend.carry(float(spent.get("usd", 0.0)), int(spent.get("tokens", 0)))
                return

    @classmethod
    def browse(cls, path: Path) -> RunDirectory:
        """Open a run read-only (history, show, diff, report): no lock, no repair."""
        return cls(Path(path), GitStore.open(Path(path)))

    def settings(self) -> dict[str, Any]:
        """The run's settings as stored: ``settings.json``, else (a run from before it existed) the root commit's
        ``run.json``."""
        path = self.path / SETTINGS_FILE
        if not path.exists():
            return self.store.config()
        return _readable(path, dict, "restore it from a backup (deleted, the run falls back to its first settings)")

    def save_settings(self, settings: Mapping[str, object]) -> None:
        """Keep the settings this session resolved (a cap tightened or raised) for the next one."""
        _require_space(self.path)
        atomic_write_json(self.path / SETTINGS_FILE, settings)

    @staticmethod
    def exists(path: Path) -> bool:
        return GitStore.exists(Path(path))

    @staticmethod
    def started(path: Path) -> bool:
        """Whether the run at ``path`` did anything: a line in ``summary.jsonl`` or ``spend.jsonl``, or a candidate.
        A folder that holds only what a start writes before that (killed, or stopped by a check that failed after
        the folder was made) is no run yet: a new run reuses it. A folder with a git repository that is not a run
        counts as started (nothing of it is touched)."""
        path = Path(path)
        if read_jsonl(path / "summary.jsonl") or (path / SPEND_FILE).is_file() and (path / SPEND_FILE).stat().st_size:
            return True
        if not _only_start_files(path):
            return True
        try:
            store = GitStore.open(path)
        except InputError:  # no root tag: a start stopped in git init (ours: it holds our lock), or no refs at all
            return not (path / "run.lock").exists() and _git_refs(path)
        return bool(store.candidates())

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- recovery --------------------------------------------------------------------------------------------

    def recover(self) -> list[str]:
        """Repair an interrupted run; say what was done.

        Commits every evaluated-but-uncommitted candidate of the journal, logs the ``summary.jsonl`` line of every
        committed candidate and saved test result that has none (a kill between the commit and its line), and
        drops the journaled plan of every iteration whose line was logged (a kill before the plan's removal).
        """
        actions = self.store.clean_interrupted()
        for folder in (self.path, self.path / "evals"):
            actions += [f"removed unfinished write {p.name}" for p in clean_temporaries(folder)]
        actions += self.spend.repair()
        self.spend.records()  # a spend line that cannot be read stops here (InputError: which line, what to do)
        actions += self.store.restore_tags()
        for candidate in self.journal.results():
            if self.store.has(candidate.id):
                self.journal.drop_result(candidate.id)
            else:
                self.commit(candidate)
                actions.append(f"committed {candidate.id} from the journal (evaluated before the run was stopped)")
        for candidate in self.journal.evidence():
            stored = self.store.get(candidate.id).candidate
            scored = stored.evaluation.examples if stored.evaluated and stored.evaluation else 0
            if candidate.evaluation is not None and candidate.evaluation.examples > scored:
                self.record_evaluation(candidate)
                actions.append(
                    f"recorded {candidate.id}'s evaluation on {candidate.evaluation.examples} examples from the "
                    "journal (scored before the run was stopped)"
                )
            self.journal.drop_evidence(candidate.id)
        rebuilt = self._rebuild_log() if not self.log_records() else []
        actions += rebuilt or self._complete_log()
        actions += self._repair_graph()
        actions += self._repair_iterations()
        actions += self._lost_candidates()
        done = self.completed_iterations()
        for iteration in sorted(self.journal.planned()):
            if iteration in done:
                self.journal.drop_plan(iteration)
                actions.append(f"dropped the plan of iteration {iteration}, which had finished")
        return actions

    def _complete_log(self) -> list[str]:
        """Log every committed candidate and saved test result that has no line. A kill leaves at most the newest
        candidate, or one test result, unlogged (each is logged right after it is saved); more is damage, and the
        notes say so."""
        actions = []
        logged = {r.get("id") for r in self.log_records("candidate")}
        candidates = self.candidates()
        unlogged = [c for c in candidates if c.id not in logged]
        killed = len(unlogged) == 1 and unlogged[0] is candidates[-1]
        for candidate in unlogged:
            self._log_candidate(candidate)
            why = "committed just before the run was stopped" if killed else "its line was missing: rebuilt from git"
            actions.append(f"logged {candidate.id} in summary.jsonl ({why})")
        tested = {r.get("id") for r in self.log_records("test")}
        untested = [path for path in self._test_files() if path.name.split(".")[0] not in tested]
        for path in untested:
            cid = path.name.split(".")[0]
            self._log_test(cid, self._saved_result(path))
            why = "saved just before the stop" if len(untested) == 1 else "its line was missing: rebuilt from evals/"
            actions.append(f"logged the test result of {cid} in summary.jsonl ({why})")
        return actions

    def _rebuild_log(self) -> list[str]:
        """A run whose ``summary.jsonl`` is gone (or holds no readable line) but whose git holds candidates: log every
        candidate as git records it now (its note, its iteration) and every saved test result; the iteration lines
        follow (``_repair_iterations``)."""
        candidates = self.candidates()
        if not candidates:
            return []
        for candidate in candidates:
            self._log_candidate(candidate)
        tests = self._test_files()
        for path in tests:
            self._log_test(path.name.split(".")[0], self._saved_result(path))
        return [
            f"rebuilt summary.jsonl from git, which was missing or held no readable line: {len(candidates)} "
            "candidates with their "
            f"notes and iterations, {len(tests)} test results (its evaluation, stop and proposer-failure lines are "
            "lost)"
        ]

    def _test_files(self) -> list[Path]:
        return sorted((self.path / "evals").glob("c*.test.json"))

    def _repair_iterations(self) -> list[str]:
        """Log a line, rebuilt from git, for every finished iteration without one (torn, or lost with the log), so
        the loop never runs it again.

        Iterations run in order, so one is finished when a later one began (has a line, a plan, a candidate or a
        proposer failure). The last one begun is finished when its candidates are committed and its plan is gone:
        the loop saves an iteration's plan before it commits any of its candidates and drops it only after writing
        the iteration's line, so that line was written and lost since (torn, garbled or deleted).
        """
        candidates = self.candidates()
        logged, planned = self.completed_iterations(), set(self.journal.planned())
        failed = {r["iteration"] for r in self.log_records("proposer_failure") if isinstance(r.get("iteration"), int)}
        committed = {c.iteration for c in candidates}
        begun = logged | planned | committed | failed
        last = max(begun, default=-1)
        ended = last in committed and last not in planned
        actions = []
        for iteration in range(last + 1):
            if iteration in logged or iteration in planned or (iteration == last and not ended):
                continue
            line = self._iteration_line(iteration, candidates)
            self.log(line)
            actions.append(
                f"repaired the iteration {iteration} line from git: summary.jsonl had none for this finished iteration "
                f"(candidates: {', '.join(line.facts.candidates) or 'none'}); it is not run again"
            )
        return actions

    @staticmethod
    def _iteration_line(iteration: int, candidates: list[Candidate]) -> RebuiltIterationLine:
        """An iteration's ``summary.jsonl`` line as git can tell it: its candidates, and the best and the front
        among the candidates up to it (as they stand now); ``rebuilt`` marks it."""
        upto = [c for c in candidates if c.iteration <= iteration]
        return RebuiltIterationLine(
            IterationFacts.of(iteration, upto), "from git: the iteration's line was missing from summary.jsonl"
        )

    def _lost_candidates(self) -> list[str]:
        """Candidates the log or the program graph hold that git holds no commit of: their ids stay used."""
        lost = sorted(self._recorded_ids() - {c.id for c in self.candidates()}, key=id_number)
        return [
            f"{cid} is in summary.jsonl or program-graph.json but git holds no commit of it (lost); its id is not "
            "given out again"
            for cid in lost
        ]

    def _recorded_ids(self) -> set[str]:
        """Every candidate id the log, the program graph (its candidate nodes; a predicted node is named by its
        proposer) or git (commit trailers, tagged or not) holds."""
        ids = {str(r["id"]) for r in self.log_records() if isinstance(r.get("id"), str)}
        for line in self.log_records("iteration"):
            ids |= {str(cid) for cid in line.get("candidates") or []}
        try:
            graph = graph_file.load(self.path)
        except InputError:  # set aside and rebuilt by recover
            graph = None
        ids |= {str(n.id) for n in graph.nodes if n.status != PREDICTED} if graph is not None else set()
        ids |= set(self.store.claimed())
        return {cid for cid in ids if CANDIDATE_ID.match(cid)}

    # -- candidates ------------------------------------------------------------------------------------------

    def candidates(self) -> list[Candidate]:
        """Every committed candidate, in id order."""
        return [c.candidate for c in self.store.candidates()]

    def has(self, cid: str) -> bool:
        return self.store.has(cid)

    # -- the lasting program graph -------------------------------------------------------------------------

    def program_graph(self) -> PlanGraph:
        """The saved program graph, synced with the committed candidates (built from them when none is saved)."""
        return graph_file.sync(graph_file.load(self.path), self.candidates())

    def save_program_graph(self, graph: PlanGraph) -> None:
        graph_file.save(self.path, graph)

    def _repair_graph(self) -> list[str]:
        """Set an unreadable graph file aside, and save the graph synced with the candidates when it was not."""
        actions = []
        try:
            saved = graph_file.load(self.path)
        except InputError:
            aside = graph_file.set_aside(self.path)
            actions.append(f"set the unreadable {aside.name} aside and rebuilt the program graph from the candidates")
            saved = None
        before = None if saved is None else saved.to_json()
        graph = graph_file.sync(saved, self.candidates())
        if graph.to_json() != before:
            self.save_program_graph(graph)
            if saved is not None:
                actions.append("brought the program graph up to date with the committed candidates")
        return actions

    # -- iteration plans (journaled until the iteration is logged) ----------------------------------------

    def plan(self, iteration: int) -> list[PlanEntry] | None:
        return self.journal.plan(iteration)

    def save_plan(self, iteration: int, plan: list[PlanEntry]) -> None:
        _require_space(self.path)
        self.journal.save_plan(iteration, plan)

    def drop_plan(self, iteration: int) -> None:
        self.journal.drop_plan(iteration)

    def commit(self, candidate: Candidate) -> None:
        """Journal, commit and log one finished candidate; a kill (or a full disk) at any point loses nothing."""
        _require_space(self.path)
        self.journal.save_result(candidate)
        crash_point("commit:journaled")
        with _disk(self.path):
            self.store.commit(candidate)
        self._log_candidate(candidate)
        crash_point("commit:logged")
        self.save_program_graph(self.program_graph())
        self.journal.drop_result(candidate.id)

    def record_evaluation(self, candidate: Candidate) -> Candidate:
        """Record ``candidate``'s evaluation as it stands now (continued on more examples): journal, git note (and
        ``best``), an ``"evaluation"`` line in the log, the program graph; a kill at any point loses nothing."""
        assert candidate.evaluation is not None, "record_evaluation needs an evaluation"
        _require_space(self.path)
        self.journal.save_evidence(candidate)
        crash_point("evaluation:journaled")
        with _disk(self.path):
            recorded = self.store.record_evaluation(candidate.id, candidate.evaluation)
        ev = candidate.evaluation
        last = ev.increments[-1] if ev.increments else None
        self.log(
            EvaluationLine(
                id=candidate.id,
                iteration=last.iteration if last else candidate.iteration,
                examples=ev.examples,
                share=ev.share,
                added=last.examples if last else ev.examples,
                score=ev.primary,
                spend=last.spend if last else ev.spend(),
                supported=ev.supported,
            )
        )
        self.save_program_graph(self.program_graph())
        self.journal.drop_evidence(candidate.id)
        return recorded

    def record_failure(self, candidate: Candidate) -> Candidate:
        """Record that a committed candidate cannot run (``candidate.error`` says why), with a log line."""
        _require_space(self.path)
        with _disk(self.path):
            recorded = self.store.record_failure(candidate.id, candidate.error or "")
        self.log(FailureLine(candidate.id, candidate.error))
        self.save_program_graph(self.program_graph())
        return recorded

    def _log_candidate(self, candidate: Candidate) -> None:
        self.log(CandidateLine.of(candidate))

    def next_id(self) -> str:
        """A fresh candidate id, above every committed, journaled or planned one, and above every id the log, the
        program graph or git history still holds (a candidate whose tag was deleted keeps its id)."""
        used = [id_number(c.candidate.id) for c in self.store.candidates()]
        used += [id_number(r.id) for r in self.journal.results() + self.journal.evidence()]
        used += [id_number(p.id) for plan in self.journal.planned().values() for p in plan]
        used += [id_number(cid) for cid in self._recorded_ids()]
        return candidate_id(max(used, default=0) + 1)

    def work_file(self, cid: str, source: str) -> Path:
        """Write a candidate's program to the file it is checked and evaluated from."""
        path = self.path / "work" / cid / HARNESS_FILE
        _require_space(self.path)
        atomic_write_text(path, source)
        return path

    def trace_path(self, cid: str, split: str) -> Path:
        path = self.path / "traces" / f"{cid}.{split}.jsonl"
        _require_space(self.path)
        with _disk(self.path):
            path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def relative(self, path: Path) -> str:
        return str(Path(path).relative_to(self.path))

    # -- test-split results ----------------------------------------------------------------------------------

    def test_result(self, cid: str) -> Evaluation | None:
        return self.split_result(cid, "test")

    def split_result(self, cid: str, split: str) -> Evaluation | None:
        """A candidate's saved result on ``split`` (``test``, or ``holdout``: the validation examples kept out of
        the search), or None."""
        path = self.path / "evals" / f"{cid}.{split}.json"
        return self._saved_result(path) if path.exists() else None

    @staticmethod
    def _saved_result(path: Path) -> Evaluation:
        """A saved result file; a damaged one is one clear error (deleted, the loop evaluates it again)."""
        fix = "delete it and rerun the run: that result is evaluated again"
        data = _readable(path, dict, fix)
        try:
            return Evaluation.from_dict(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InputError(f"{path} is not a saved result ({type(exc).__name__}: {exc}); {fix}.") from None

    def save_split_result(self, cid: str, split: str, evaluation: Evaluation) -> None:
        """Save a result on another split than the search's (the file, then a ``split`` log line)."""
        _require_space(self.path)
        atomic_write_json(self.path / "evals" / f"{cid}.{split}.json", evaluation.to_dict())
        self.log(SplitLine(split, cid, evaluation))

    def save_test_result(self, cid: str, evaluation: Evaluation) -> None:
        """Note, file, then the log line: the file's presence means the note is written (a rerun redoes a
        half-saved one), and ``recover`` logs a saved result whose line a kill prevented."""
        _require_space(self.path)
        with _disk(self.path):
            self.store.annotate(cid, render_note(self.store.get(cid).candidate, evaluation))
        atomic_write_json(self.path / "evals" / f"{cid}.test.json", evaluation.to_dict())
        crash_point("test:saved")
        self._log_test(cid, evaluation)

    def _log_test(self, cid: str, evaluation: Evaluation) -> None:
        self.log(SplitLine("test", cid, evaluation))

    # -- the summary log -------------------------------------------------------------------------------------

    def log(self, line: LogLine) -> None:
        _require_space(self.path)
        append_jsonl(self.summary_path, {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **line.to_json()})

    def log_records(self, kind: str | None = None) -> list[dict[str, Any]]:
        records = read_jsonl(self.summary_path)
        return [r for r in records if kind is None or r.get("type") == kind]

    def completed_iterations(self) -> set[int]:
        return {int(r["iteration"]) for r in self.log_records("iteration")}

    # -- spend -----------------------------------------------------------------------------------------------

    def spent(self) -> dict[str, float]:
        """Everything the run has spent over all its sessions (``spend.jsonl``): ``{"usd", "tokens", "calls"}``."""
        return self.spend.totals()

    def record_spend(self, model: str, role: str, usd: float, *, key: str = "", **tokens: int) -> None:
        """Journal one model call's cost (appended and fsynced before this returns); ``key``: its cache key."""
        self.spend.record(model, role, usd, key=key, **tokens)


def _readable(path: Path, kind: type, fix: str) -> Any:
    """The JSON value of ``path`` when it is a ``kind``; else ``InputError`` saying ``fix``."""
    try:
        value = read_json(path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path} cannot be read ({exc}); {fix}.") from None
    if not isinstance(value, kind):
        raise InputError(f"{path} holds a JSON {type(value).__name__}, not a {kind.__name__}; {fix}.")
    return value


def _require_space(path: Path) -> None:
    """``StorageFailure`` when the disk holding the run at ``path`` has less than ``MIN_FREE_BYTES`` left."""
    left = free_bytes(path)
    if left < MIN_FREE_BYTES:
        raise StorageFailure(
            f"The disk holding {path} has {left >> 10} KiB left, less than the {MIN_FREE_BYTES >> 20} MiB a run keeps "
            "free: the run stopped without losing what it recorded. Free space on that disk, then rerun the same "
            "command to continue."
        )


@contextlib.contextmanager
def _disk(path: Path) -> Iterator[None]:
    """Writes to the run at ``path`` (git's included): a full disk becomes ``StorageFailure``, one line."""
    try:
        with space_for(path):
            yield
    except git.GitCommandError as exc:
        # git does not always say why a write failed ("failed to write new configuration file"): a disk this full
        # is the reason.
        if "No space left" not in str(exc) and free_bytes(_existing(path)) >= FULL_BYTES:
            raise
        raise StorageFailure(
            f"No space left on the disk holding {path} for git: the run stopped without losing what it recorded "
            "(git's half-written objects are dropped on resume). Free space, then rerun the same command to continue."
        ) from None


def _existing(path: Path) -> Path:
    """``path``, or the nearest folder above it that exists."""
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def _only_start_files(path: Path) -> bool:
    return all(entry.name in START_FILES for entry in path.iterdir()) and not any(
        (path / "journal").iterdir() if (path / "journal").is_dir() else []
    )


def _git_refs(path: Path) -> bool:
    """Whether the repository at ``path`` holds any ref (a repository that cannot be read counts as holding some)."""
    try:
        return bool(git.Repo(path).git.for_each_ref())
    except (git.InvalidGitRepositoryError, git.GitCommandError, OSError):
        return True


def _clear_unstarted(path: Path) -> None:
    """Remove what an interrupted start wrote (``RunDirectory.started`` is False), so the folder starts afresh."""
    shutil.rmtree(path / ".git")
    (path / SETTINGS_FILE).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        (path / "journal").rmdir()
