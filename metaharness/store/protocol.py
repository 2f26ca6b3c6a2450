"""The store seam: what the optimisation loop relies on to keep a run, so that a kill at any moment loses nothing.

Two protocols, each with its whole contract in its docstring: a ``CandidateStore`` keeps the candidates (their
programs, evaluations, results on other splits, the program graph: a ``SavedGraph``), a ``RunJournal`` the run's
progress (what an iteration planned: ``IterationPlans``, the machine-readable log, the repair after a kill).
``RunStore`` is both, what ``Optimizer`` takes; ``RunDirectory`` (a git repository plus a journal beside it, see
``docs/run-directory.md``) implements it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from metaharness.candidate import Candidate, Evaluation, PlanEntry
from metaharness.planner.graph import PlanGraph
from metaharness.store.log import LogLine


class SavedGraph(Protocol):
    """A run's lasting program graph. The whole contract: ``read() -> PlanGraph``: the graph as saved, synced with
    the committed candidates (built from them when none is saved); ``write(graph) -> None``: saves it atomically.
    A saved graph that cannot be read raises ``InputError`` from ``read`` (``recover`` sets it aside and rebuilds it).
    """

    def read(self) -> PlanGraph: ...

    def write(self, graph: PlanGraph) -> None: ...


class IterationPlans(Protocol):
    """The plans of the iterations under way, journaled until each iteration is logged. The whole contract:
    ``save_plan(iteration, plan) -> None`` journals an iteration's ``PlanEntry`` list (every parent before its
    children) durably, before any of its candidates is evaluated (a disk too full refuses it: ``StorageFailure``);
    ``plan(iteration) -> list[PlanEntry] | None`` returns it as saved (``None`` when none is open);
    ``drop_plan(iteration) -> None`` once the iteration is logged (dropping none is no error).
    """

    def plan(self, iteration: int) -> list[PlanEntry] | None: ...

    def save_plan(self, iteration: int, proposals: list[PlanEntry]) -> None: ...

    def drop_plan(self, iteration: int) -> None: ...


class CandidateStore(Protocol):
    """Where a run keeps its candidates. The whole contract:

    - ``path``: the run's directory; every path below is inside it.
    - ``candidates() -> list[Candidate]``: every committed candidate as it stands now (its evaluation as last
      recorded, failed once recorded so), in id order.
    - ``next_id() -> str``: a fresh id (``c001``, ...) above every committed, journaled or planned one, and above
      every id the record still holds (a candidate that lost its git tag keeps its id); never handed out twice.
    - ``commit(candidate) -> None``: durable and atomic; afterwards the candidate is among ``candidates()`` even
      across a kill, and its ``"candidate"`` log line is written. Its ``parent`` is committed already (or ``None``);
      committing an id twice is an error.
    - ``record_evaluation(candidate) -> Candidate``: records a committed candidate's evaluation as it stands now
      (continued on more examples), durable and atomic like ``commit``, with an ``"evaluation"`` log line; returns
      the candidate as ``candidates()`` returns it from then on. The best is ``metaharness.frontier.best`` of the
      candidates: among the supported ones (scored on their whole share), the highest held-out confirmed score when
      some are confirmed, else the highest score.
    - ``record_confirmation(candidate) -> Candidate``: records a supported candidate's score on the held-out
      examples that choose the returned candidate (``candidate.evaluation.confirm``), durable and atomic like
      ``record_evaluation`` (the best may move; with its training-fold score, ``folds``, when it carries one), with
      a ``"confirm"`` split line and no evaluation line.
    - ``record_failure(candidate) -> Candidate``: records that a committed candidate cannot run
      (``candidate.error``), with a ``"failure"`` log line; returns it failed, as it stays.
    - ``work_file(id, source) -> Path``: writes ``source`` to the file the candidate is checked and evaluated from;
      ``trace_path(id, split) -> Path``: where its per-example records of ``split`` go (the folder exists);
      ``relative(path) -> str``: a path inside the run as a candidate stores it.
    - ``graph``: the run's lasting program graph (a ``SavedGraph``). ``commit`` and ``record_*`` keep the saved
      graph in step with the candidates.
    - ``split_result(id, split) -> Evaluation | None``: a candidate's saved result on ``split`` (``"holdout"``:
      validation examples kept out of the search, ``"test"``), ``None`` before it is saved; ``test_result(id)`` is
      ``split_result(id, "test")``. ``save_split_result(id, split, evaluation) -> None`` saves it with a line of type
      ``split``; a test-split result also goes into the candidate's git note. Each result is saved at most once per
      candidate and split.

    Errors: what a user can act on (a saved result or file damaged by hand) raises
    ``InputError`` with one line saying what to do; anything else is a bug and raises.
    """

    path: Path

    @property
    def graph(self) -> SavedGraph: ...

    def candidates(self) -> list[Candidate]: ...

    def next_id(self) -> str: ...

    def commit(self, candidate: Candidate) -> None: ...

    def record_evaluation(self, candidate: Candidate) -> Candidate: ...

    def record_confirmation(self, candidate: Candidate) -> Candidate: ...

    def record_failure(self, candidate: Candidate) -> Candidate: ...

    def work_file(self, cid: str, source: str) -> Path: ...

    def trace_path(self, cid: str, split: str) -> Path: ...

    def relative(self, path: Path) -> str: ...

    def split_result(self, cid: str, split: str) -> Evaluation | None: ...

    def save_split_result(self, cid: str, split: str, evaluation: Evaluation) -> None: ...

    def test_result(self, cid: str) -> Evaluation | None: ...


class RunJournal(Protocol):
    """Where a run keeps its progress, so that a rerun continues where a kill stopped it. The whole contract:

    - ``recover() -> list[str]``: repairs what an interrupted run left behind, once before a run: commits every
      candidate that was evaluated but not yet committed, logs the line of every committed candidate and saved test
      result that has none, drops the plan of every iteration whose line is logged, and logs a line for every
      finished iteration that has none (so ``completed_iterations()`` holds every finished iteration); returns one
      line per action, for the user.
    - ``journal``: the plans of the iterations under way (``IterationPlans``).
    - ``log(line) -> None``: appends one ``LogLine`` to the machine-readable record,
      durably; ``log_records(kind) -> list[dict]``: the lines logged so far (of type ``kind``, or all), in order,
      as JSON objects (a line torn by a kill is skipped; lines of older versions read as written);
      ``completed_iterations() -> set[int]``: the iterations whose ``"iteration"`` line was logged.

    Errors: damage ``recover`` cannot repair, and a run directory in use or with settings that do not match, raise
    ``InputError`` with one line saying what to do; anything else is a bug and raises.
    """

    @property
    def journal(self) -> IterationPlans: ...

    def recover(self) -> list[str]: ...

    def log(self, line: LogLine) -> None: ...

    def log_records(self, kind: str | None = None) -> list[dict[str, Any]]: ...

    def completed_iterations(self) -> set[int]: ...


class RunStore(CandidateStore, RunJournal, Protocol):
    """A run's candidates and its progress in one place (what the loop takes): both contracts above."""
