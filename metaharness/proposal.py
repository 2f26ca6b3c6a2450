"""The seam between the optimisation loop and the proposers.

The loop owns the candidates (evaluation, git store, budget); a :class:`Proposer` only reads the run's state and
returns new candidate programs. Contract of :meth:`Proposer.propose`:

- It receives a :class:`RunState` snapshot: every candidate so far (source, scores, where its per-example traces
  are, and failed attempts with their errors), the iteration number and the budget left for this iteration.
- It returns at most ``state.evals_left`` :class:`Proposal` objects. Each names an existing candidate id as
  ``parent`` (or ``None`` for a fresh program), carries the complete source of the new harness file and says in
  words what changed (``summary``) and why it should help (``hypothesis``). ``prediction`` holds whatever the
  proposer predicted about the outcome (e.g. ``{"score": 0.42, "flips": [...]}``) so predicted vs. actual can be
  studied; ``None`` when it made no prediction.
- It never evaluates on the validation split itself: the loop does, within budget. It may run candidates on a
  few *training* examples (the offline proposer's probe) through the evaluator it is given.
- A proposer that cannot produce anything this iteration returns an empty list; it raises only for systemic
  failures (missing key, unreachable model), which stop the run with a clear message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

HARNESS_FILE = "harness.py"


@dataclass
class CandidateInfo:
    """A candidate the loop knows about: evaluated, or failed validation/evaluation."""

    id: str
    parent: str | None
    source: str
    iteration: int
    summary: str = ""
    hypothesis: str = ""
    # Validation scores, e.g. {"accuracy": 0.42, "f1": 0.5}; empty for failed candidates.
    scores: dict[str, float] = field(default_factory=dict)
    # Aggregate cost of its evaluation: tokens, dollars, context size (prompt tokens per example).
    cost: dict[str, float] = field(default_factory=dict)
    # JSONL file of per-example records (input, prediction, target, score, model calls, errors).
    trace_path: Path | None = None
    failed: bool = False
    error: str | None = None
    prediction: dict[str, Any] | None = None

    @property
    def score(self) -> float:
        """The primary validation score (higher is better); failed candidates count as 0."""
        return float(self.scores.get("primary", 0.0)) if not self.failed else 0.0


@dataclass
class RunState:
    """What a proposer sees at the start of an iteration."""

    task: str
    iteration: int
    candidates: list[CandidateInfo]
    evals_left: int
    # Remaining caps for the iteration when set: {"tokens": ..., "usd": ...}.
    budget: dict[str, float] = field(default_factory=dict)
    run_dir: Path | None = None

    def evaluated(self) -> list[CandidateInfo]:
        return [c for c in self.candidates if not c.failed]

    def failed(self) -> list[CandidateInfo]:
        return [c for c in self.candidates if c.failed]

    def best(self) -> CandidateInfo | None:
        done = self.evaluated()
        return max(done, key=lambda c: c.score) if done else None


@dataclass
class Proposal:
    """A new candidate program proposed as a revision of ``parent``."""

    parent: str | None
    source: str
    summary: str
    hypothesis: str = ""
    prediction: dict[str, Any] | None = None


@runtime_checkable
class Proposer(Protocol):
    name: str

    def propose(self, state: RunState) -> list[Proposal]:
        """Return at most ``state.evals_left`` proposals for this iteration (see the module docstring)."""
        ...
