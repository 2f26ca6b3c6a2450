"""A candidate harness: one model shared by the loop, the proposers, the store and the reports.

A :class:`Candidate` is a program (its complete source), where it came from (``parent``: the candidate it revises,
``None`` for a seed), why (``summary``, ``hypothesis``, the proposer's ``prediction``), and what its validation run
measured (:class:`Evaluation`), or the ``error`` that made it fail. An ``implemented`` candidate is an
intermediate step of a chosen revision chain (A -> B -> C: B): committed so that git's parents are the revisions,
checked for import errors but never evaluated, so it has no score and is never the best. Ids are ``c001``,
``c002``, ... in the order candidates were planned. The store writes a candidate into its commit (see
:mod:`metaharness.store`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

CANDIDATE_ID = re.compile(r"^c\d{3,}$")

EVALUATED = "evaluated"
FAILED = "failed"
IMPLEMENTED = "implemented"


def candidate_id(number: int) -> str:
    """``c001``, ``c002``, ...: short, sortable, and usable as a git tag name."""
    return f"c{number:03d}"


def id_number(cid: str) -> int:
    return int(cid[1:])


@dataclass
class Evaluation:
    """What one run of a candidate on a split measured (aggregates; the per-example records are in the trace)."""

    split: str
    scores: dict[str, float]
    # input_tokens, output_tokens, usd, context_tokens (prompt tokens per example), ...
    cost: dict[str, float] = field(default_factory=dict)
    examples: int = 0
    errors: int = 0
    seconds: float = 0.0

    @property
    def primary(self) -> float:
        return float(self.scores.get("primary", 0.0))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": round(self.seconds, 3)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evaluation:
        return cls(
            split=data["split"],
            scores={k: float(v) for k, v in data.get("scores", {}).items()},
            cost={k: float(v) for k, v in data.get("cost", {}).items()},
            examples=int(data.get("examples", 0)),
            errors=int(data.get("errors", 0)),
            seconds=float(data.get("seconds", 0.0)),
        )


@dataclass
class Candidate:
    """One candidate as committed: a program, where it came from, and how it did on validation."""

    id: str
    parent: str | None
    iteration: int
    source: str
    status: str = EVALUATED
    summary: str = ""
    hypothesis: str = ""
    prediction: dict[str, Any] | None = None
    error: str | None = None
    evaluation: Evaluation | None = None
    # Per-example validation trace, relative to the run directory (kept beside the repository, not in it).
    trace: str | None = None

    @property
    def failed(self) -> bool:
        return self.status == FAILED

    @property
    def implemented(self) -> bool:
        """Implemented (and import-checked) as a step of a revision chain, not evaluated."""
        return self.status == IMPLEMENTED

    @property
    def evaluated(self) -> bool:
        return self.status == EVALUATED and self.evaluation is not None

    @property
    def score(self) -> float:
        """The primary validation score (higher is better); a failed, implemented or unevaluated candidate counts
        as 0."""
        return self.evaluation.primary if self.evaluated and self.evaluation else 0.0

    @property
    def scores(self) -> dict[str, float]:
        """Every validation metric, ``"primary"`` first; empty before evaluation."""
        return dict(self.evaluation.scores) if self.evaluation else {}

    @property
    def cost(self) -> dict[str, float]:
        """What the validation run cost: ``input_tokens``, ``output_tokens``, ``usd``, ``context_tokens`` (prompt
        tokens per example), ...; empty before evaluation."""
        return dict(self.evaluation.cost) if self.evaluation else {}

    def metadata(self) -> dict[str, Any]:
        """Everything but the program and its evaluation (``candidate.json`` in the candidate's commit)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("source", "evaluation")}

    def to_dict(self) -> dict[str, Any]:
        """Everything, as JSON (the journal's format for evaluated-but-uncommitted candidates)."""
        return {
            **self.metadata(),
            "source": self.source,
            "evaluation": self.evaluation.to_dict() if self.evaluation else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        evaluation = data.get("evaluation")
        return cls(
            id=data["id"],
            parent=data.get("parent"),
            iteration=int(data["iteration"]),
            source=data["source"],
            status=data.get("status", EVALUATED),
            summary=data.get("summary", ""),
            hypothesis=data.get("hypothesis", ""),
            prediction=data.get("prediction"),
            error=data.get("error"),
            evaluation=Evaluation.from_dict(evaluation) if evaluation else None,
            trace=data.get("trace"),
        )
