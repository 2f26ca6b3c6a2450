"""What the store keeps per candidate: one :class:`CandidateRecord`, written into the candidate's commit.

The commit holds three files: ``harness.py`` (the program), ``candidate.json`` (id, parent, iteration, status,
revision summary, hypothesis, predicted outcome, error, link to the traces) and ``evaluation.json`` (what the
validation run measured; absent when the candidate failed before evaluation).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaharness.proposal import HARNESS_FILE, CandidateInfo

METADATA_FILE = "candidate.json"
EVALUATION_FILE = "evaluation.json"
CANDIDATE_ID = re.compile(r"^c\d{3,}$")

EVALUATED = "evaluated"
FAILED = "failed"


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
        return {
            "split": self.split,
            "scores": self.scores,
            "cost": self.cost,
            "examples": self.examples,
            "errors": self.errors,
            "seconds": round(self.seconds, 3),
        }

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
class CandidateRecord:
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
    def score(self) -> float:
        return 0.0 if self.failed or self.evaluation is None else self.evaluation.primary

    def metadata(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "parent": self.parent,
            "iteration": self.iteration,
            "status": self.status,
            "summary": self.summary,
            "hypothesis": self.hypothesis,
            "prediction": self.prediction,
            "error": self.error,
            "trace": self.trace,
        }

    def to_dict(self) -> dict[str, Any]:
        """Everything, as JSON (the journal's format for evaluated-but-uncommitted candidates)."""
        return {**self.metadata(), "source": self.source, "evaluation": self.evaluation.to_dict() if self.evaluation else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CandidateRecord:
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

    def info(self, run_dir: Path) -> CandidateInfo:
        """The proposer's view of this candidate (:class:`metaharness.proposal.CandidateInfo`)."""
        return CandidateInfo(
            id=self.id,
            parent=self.parent,
            source=self.source,
            iteration=self.iteration,
            summary=self.summary,
            hypothesis=self.hypothesis,
            scores=dict(self.evaluation.scores) if self.evaluation else {},
            cost=dict(self.evaluation.cost) if self.evaluation else {},
            trace_path=(Path(run_dir) / self.trace) if self.trace else None,
            failed=self.failed,
            error=self.error,
            prediction=self.prediction,
        )


def files_of(record: CandidateRecord) -> dict[str, str]:
    """The files of a candidate's commit, by name."""
    files = {
        HARNESS_FILE: record.source,
        METADATA_FILE: json.dumps(record.metadata(), indent=2, ensure_ascii=False, sort_keys=True) + "\n",
    }
    if record.evaluation is not None:
        files[EVALUATION_FILE] = json.dumps(record.evaluation.to_dict(), indent=2, sort_keys=True) + "\n"
    return files
