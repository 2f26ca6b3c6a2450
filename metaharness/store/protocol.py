"""The store seam: what the optimisation loop relies on to keep a run, so that a kill at any moment loses nothing.

:class:`~metaharness.store.run_dir.RunDirectory` (a git repository plus a journal beside it, see
``docs/run-directory.md``) is the implementation. The whole contract of a :class:`RunStore`:

- ``recover() -> list[str]``: repair what an interrupted run left behind: commit every candidate that was
  evaluated but not yet committed, log the line of every committed candidate and saved test result that has none,
  drop the plan of every iteration whose line is logged, and log a line for every finished iteration that has
  none (so ``completed_iterations()`` holds every finished iteration); returns one line per action, for the user.
  Damage it cannot repair raises :class:`~metaharness.errors.InputError` (one line: what to do). Called once
  before a run.
- ``candidates() -> list[Candidate]``: every committed candidate, in id order; ``has(id)`` whether one is.
- ``next_id() -> str``: a fresh id above every committed, journaled or planned one, and above every id the record
  still holds (a candidate that lost its tag keeps its id).
- ``save_plan(iteration, plan)`` before any of an iteration's candidates is evaluated; ``plan(iteration)`` returns
  it (``None`` when none is open); ``drop_plan(iteration)`` once the iteration is logged. A plan is a list of
  dicts with the keys ``id``, ``parent``, ``source``, ``summary``, ``hypothesis``, ``prediction``, ``node`` (the
  program-graph node the candidate realises, or ``None``) and ``evaluate`` (``False`` for an intermediate of a
  revision chain, committed implemented; missing means ``True``), every parent before its children.
- ``program_graph() -> PlanGraph``: the run's lasting program graph, synced with the committed candidates;
  ``save_program_graph(graph)`` writes it atomically. ``commit`` keeps the saved graph in step with the
  candidates; ``recover`` repairs it.
- ``work_file(id, source) -> Path``: the file a candidate is checked and evaluated from; ``trace_path(id, split)``
  where its per-example records go; ``relative(path)`` a path as stored in the candidate (relative to the run).
- ``commit(candidate)``: durable and atomic; afterwards ``has(candidate.id)`` holds even across a kill. The
  candidate's ``parent`` must be committed already (or ``None``). Committing the same id twice is an error.
- ``record_evaluation(candidate) -> Candidate``: a committed candidate's evaluation as it stands now (continued on
  more examples), durable and atomic like ``commit``, with an ``"evaluation"`` log line; ``candidates()`` returns it
  so afterwards. The best is the supported candidate (scored on its whole share) with the highest score.
- ``log(entry)`` appends one line to the machine-readable record; ``log_records(kind)`` reads them back;
  ``completed_iterations()`` are the iterations whose ``"iteration"`` line was logged.
- ``test_result(id)`` / ``save_test_result(id, evaluation)``: test-split results, saved (and logged as a
  ``"test"`` line) at most once per id; ``split_result(id, split)`` / ``save_split_result(id, split, evaluation)``
  the same for another split (``"holdout"``: validation examples kept out of the search), logged as a ``split``
  line.
- ``record_failure(candidate) -> Candidate``: a committed candidate that cannot run (``candidate.error``), failed
  from then on.
Errors a user can act on (a run directory in use, settings that do not match) are
:class:`~metaharness.errors.InputError`; anything else is a bug and raises.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from metaharness.candidate import Candidate, Evaluation
from metaharness.planner.graph import PlanGraph


class RunStore(Protocol):
    """Where a run keeps its candidates and its record (the module docstring is the contract)."""

    path: Path

    def recover(self) -> list[str]: ...

    def candidates(self) -> list[Candidate]: ...

    def has(self, cid: str) -> bool: ...

    def next_id(self) -> str: ...

    def plan(self, iteration: int) -> list[dict[str, Any]] | None: ...

    def save_plan(self, iteration: int, plan: list[dict[str, Any]]) -> None: ...

    def drop_plan(self, iteration: int) -> None: ...

    def program_graph(self) -> PlanGraph: ...

    def save_program_graph(self, graph: PlanGraph) -> None: ...

    def work_file(self, cid: str, source: str) -> Path: ...

    def trace_path(self, cid: str, split: str) -> Path: ...

    def relative(self, path: Path) -> str: ...

    def commit(self, candidate: Candidate) -> None: ...

    def record_evaluation(self, candidate: Candidate) -> Candidate: ...

    def record_failure(self, candidate: Candidate) -> Candidate: ...

    def split_result(self, cid: str, split: str) -> Evaluation | None: ...

    def save_split_result(self, cid: str, split: str, evaluation: Evaluation) -> None: ...

    def log(self, entry: dict[str, Any]) -> None: ...

    def log_records(self, kind: str | None = None) -> list[dict[str, Any]]: ...

    def completed_iterations(self) -> set[int]: ...

    def test_result(self, cid: str) -> Evaluation | None: ...

    def save_test_result(self, cid: str, evaluation: Evaluation) -> None: ...
