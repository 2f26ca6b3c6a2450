"""The run's journal: work that is decided or done but not yet in git, so a killed run loses none of it.

- An iteration's plan (the proposals the proposer returned, with the ids the loop gave them) is written before
  any of them is validated or evaluated, so a resumed run finishes that iteration instead of asking again.
- An evaluated candidate is written here in full before it is committed and removed once the commit exists; a
  resumed run commits whatever it finds. So is a committed candidate whose evaluation was continued, before its
  git note records it (``evidence-<id>.json``).
Every file is written atomically (``metaharness.store.files``), after the check the run directory hands in
(``before_write``: its free-space check, so a full disk stops a run between steps).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from metaharness.candidate import Candidate, PlanEntry
from metaharness.store.files import atomic_write_json, clean_temporaries, read_json


def _nothing() -> None:
    pass


class Journal:
    """The journal in ``folder``; ``before_write`` runs before each file is written and may raise to refuse it."""

    def __init__(self, folder: Path, before_write: Callable[[], None] = _nothing) -> None:
        self.folder = Path(folder)
        self.before_write = before_write
        self.folder.mkdir(parents=True, exist_ok=True)
        clean_temporaries(self.folder)

    def _plan_path(self, iteration: int) -> Path:
        return self.folder / f"iteration-{iteration:04d}.json"

    def save_plan(self, iteration: int, proposals: list[PlanEntry]) -> None:
        self.before_write()
        entries = [p.to_json() for p in proposals]
        atomic_write_json(self._plan_path(iteration), {"iteration": iteration, "proposals": entries})

    def plan(self, iteration: int) -> list[PlanEntry] | None:
        path = self._plan_path(iteration)
        return [PlanEntry.from_json(p) for p in read_json(path)["proposals"]] if path.exists() else None

    def planned(self) -> dict[int, list[PlanEntry]]:
        """Every open iteration plan, by iteration."""
        plans = {}
        for path in sorted(self.folder.glob("iteration-*.json")):
            data = read_json(path)
            plans[int(data["iteration"])] = [PlanEntry.from_json(p) for p in data["proposals"]]
        return plans

    def drop_plan(self, iteration: int) -> None:
        self._plan_path(iteration).unlink(missing_ok=True)

    def save_result(self, candidate: Candidate) -> None:
        self.before_write()
        atomic_write_json(self.folder / f"{candidate.id}.json", candidate.to_dict())

    def results(self) -> list[Candidate]:
        return [Candidate.from_dict(read_json(p)) for p in sorted(self.folder.glob("c*.json"))]

    def save_evidence(self, candidate: Candidate) -> None:
        self.before_write()
        atomic_write_json(self.folder / f"evidence-{candidate.id}.json", candidate.to_dict())

    def evidence(self) -> list[Candidate]:
        return [Candidate.from_dict(read_json(p)) for p in sorted(self.folder.glob("evidence-c*.json"))]

    def drop_evidence(self, cid: str) -> None:
        (self.folder / f"evidence-{cid}.json").unlink(missing_ok=True)

    def drop_result(self, cid: str) -> None:
        (self.folder / f"{cid}.json").unlink(missing_ok=True)
