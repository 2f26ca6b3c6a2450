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

Only one process may run in a directory at a time (the lock). ``RunDirectory`` is the directory's one door: it
opens it (the lock, the settings, the check that a reopened run keeps its fixed settings), keeps the candidates (a
``GitStore``, ``.git_store``), the iterations' plans (``.journal``, its attribute ``journal``), the log (``.log``'s
lines), the money (``.spend``, its attribute ``spend``), the program graph (``.program_graph``, its attribute
``graph``) and the results on other splits. Opening for a run repairs
what a kill left behind, and checks before it trusts, against damage a kill cannot cause (``.recovery``); a spend
line that cannot be read stops the run (``metaharness.store.spend``).
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

from metaharness.candidate import Candidate, Evaluation, candidate_id, id_number
from metaharness.candidates.protocol import HARNESS_FILE
from metaharness.errors import InputError, StorageFailure, space_for
from metaharness.store.crash import crash_point
from metaharness.store.files import (
    append_jsonl,
    atomic_write_json,
    atomic_write_text,
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
    LogLine,
    SplitLine,
)
from metaharness.store.program_graph import ProgramGraphFile
from metaharness.store.recovery import recorded_ids, recover
from metaharness.store.spend import RESERVE_FILE, SPEND_FILE, SpendJournal

# A session stops (StorageFailure) before it writes to a run whose disk has less than this free: the space the
# small writes of a step need (a commit, a journal file, a log line), so a full disk stops a run between steps.
MIN_FREE_BYTES = 1 << 20
# A git command that fails on a disk with less than this free failed for want of space.
FULL_BYTES = 1 << 20

# Settings that make scores comparable: a run directory keeps them for its whole life.
FIXED_SETTINGS = ("dataset", "task_model", "val_limit")
SETTINGS_FILE = "settings.json"  # the run's settings (metaharness.runner.settings) as the last session resolved them
# What a start writes before the run does anything (see RunDirectory.started).
START_FILES = {".git", "run.lock", SETTINGS_FILE, RESERVE_FILE, "journal"}


class RunDirectory:
    """An open run directory (see the module docstring); use ``open`` or ``browse``."""

    def __init__(self, path: Path, store: GitStore, lock_fd: int | None = None) -> None:
        self.path = Path(path)
        self.store = store
        self.journal = Journal(self.path / "journal", lambda: _require_space(self.path))
        self.graph = ProgramGraphFile(self.path, self.candidates)
        self.summary_path = self.path / "summary.jsonl"
        self.summary_md = self.path / "SUMMARY.md"
        self.spend = SpendJournal(self.path / SPEND_FILE)
        self._lock_fd = lock_fd

    @classmethod
    def open(cls, path: Path, config: Mapping[str, object] | None = None) -> RunDirectory:
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
            _carry_logged_spend(run)
        return run

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
        """Repair an interrupted or damaged run (``metaharness.store.recovery``); say what was done."""
        return recover(self)

    # -- candidates ------------------------------------------------------------------------------------------

    def candidates(self) -> list[Candidate]:
        """Every committed candidate, in id order."""
        return [c.candidate for c in self.store.candidates()]

    # -- recording (the iterations' plans are ``journal``'s) ------------------------------------------------

    def commit(self, candidate: Candidate) -> None:
        """Journal, commit and log one finished candidate; a kill (or a full disk) at any point loses nothing."""
        _require_space(self.path)
        self.journal.save_result(candidate)
        crash_point("commit:journaled")
        with _disk(self.path):
            self.store.commit(candidate)
        self.log(CandidateLine.of(candidate))
        crash_point("commit:logged")
        self.graph.write(self.graph.read())
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
        self.graph.write(self.graph.read())
        self.journal.drop_evidence(candidate.id)
        return recorded

    def record_confirmation(self, candidate: Candidate) -> Candidate:
        """Record ``candidate``'s score on the held-out examples that choose the returned candidate (its
        evaluation's ``confirm``, with its training-fold score ``folds`` when it has one): journal, git note (and
        ``best``, which it may move), a ``"confirm"`` split line; no evaluation line, since nothing of its search
        evaluation changed."""
        assert candidate.evaluation is not None and candidate.evaluation.confirm is not None
        _require_space(self.path)
        self.journal.save_evidence(candidate)
        with _disk(self.path):
            recorded = self.store.record_evaluation(candidate.id, candidate.evaluation)
        self.log(SplitLine("confirm", candidate.id, candidate.evaluation.confirm))
        self.journal.drop_evidence(candidate.id)
        return recorded

    def record_failure(self, candidate: Candidate) -> Candidate:
        """Record that a committed candidate cannot run (``candidate.error`` says why), with a log line."""
        _require_space(self.path)
        with _disk(self.path):
            recorded = self.store.record_failure(candidate.id, candidate.error or "")
        self.log(FailureLine(candidate.id, candidate.error))
        self.graph.write(self.graph.read())
        return recorded

    def next_id(self) -> str:
        """A fresh candidate id, above every committed, journaled or planned one, and above every id the log, the
        program graph or git history still holds (a candidate whose tag was deleted keeps its id)."""
        used = [id_number(c.candidate.id) for c in self.store.candidates()]
        used += [id_number(r.id) for r in self.journal.results() + self.journal.evidence()]
        used += [id_number(p.id) for plan in self.journal.planned().values() for p in plan]
        used += [id_number(cid) for cid in recorded_ids(self)]
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
        return _saved_result(path) if path.exists() else None

    def save_split_result(self, cid: str, split: str, evaluation: Evaluation) -> None:
        """Save a result on another split than the search's: (a test result's git note,) the file, then a
        ``split`` log line. The test file's presence means the note is written (a rerun redoes a half-saved one),
        and ``recover`` logs a saved test result whose line a kill prevented."""
        _require_space(self.path)
        if split == "test":
            with _disk(self.path):
                self.store.annotate(cid, render_note(self.store.get(cid).candidate, evaluation))
        atomic_write_json(self.path / "evals" / f"{cid}.{split}.json", evaluation.to_dict())
        if split == "test":
            crash_point("test:saved")
        self.log(SplitLine(split, cid, evaluation))

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


def _carry_logged_spend(run: RunDirectory) -> None:
    """A run from before the spend journal: start the journal at the last ``spent`` its log recorded."""
    for entry in reversed(run.log_records()):
        spent = entry.get("spent")
        if isinstance(spent, dict):
            run.spend.carry(float(spent.get("usd", 0.0)), int(spent.get("tokens", 0)))
            return


def _saved_result(path: Path) -> Evaluation:
    """A saved result file; a damaged one is one clear error (deleted, the loop evaluates it again)."""
    fix = "delete it and rerun the run: that result is evaluated again"
    data = _readable(path, dict, fix)
    try:
        return Evaluation.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{path} is not a saved result ({type(exc).__name__}: {exc}); {fix}.") from None


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
