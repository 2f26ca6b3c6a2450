"""What the run reports show, read once from a run directory: candidates, log, test results, best and front."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaharness import frontier
from metaharness.candidate import Candidate, Evaluation
from metaharness.store.run_dir import RunDirectory


@dataclass
class RunView:
    """Everything the summaries show, read once from a run directory."""

    path: Path
    config: dict[str, Any]
    records: list[Candidate]
    log: list[dict[str, Any]]
    test: dict[str, Evaluation] = field(default_factory=dict)

    @classmethod
    def load(cls, run: RunDirectory) -> RunView:
        records = run.candidates()
        test = {r.id: ev for r in records if (ev := run.test_result(r.id)) is not None}
        return cls(run.path, run.store.config(), records, run.log_records(), test)

    @property
    def best(self) -> Candidate | None:
        return frontier.best(self.records)

    @property
    def front(self) -> list[Candidate]:
        return frontier.pareto_front(self.records)

    def notes(self) -> list[str]:
        """Stops and skipped test evaluations as the log recorded them (a note repeated by reruns: its last time)."""
        latest: dict[str, str] = {}
        for entry in self.log:
            if entry.get("type") == "stop":
                text = f"stopped: {entry.get('reason', '')}"
            elif entry.get("type") == "test_skipped":
                text = f"test split not evaluated: {entry.get('reason', '')}"
            else:
                continue
            latest.pop(text, None)
            latest[text] = entry.get("time", "")
        return [f"{when} {text}" for text, when in latest.items()]

    def predicted(self) -> list[tuple[Candidate, float]]:
        return [
            (r, float(r.prediction["score"]))
            for r in self.records
            if r.prediction and isinstance(r.prediction.get("score"), (int, float)) and not r.failed
        ]


def cost_of(record: Candidate, key: str) -> float:
    return float(record.evaluation.cost.get(key, 0.0)) if record.evaluation else 0.0


def val_text(record: Candidate) -> str:
    return "failed" if record.failed else f"{record.score:.3f}"
