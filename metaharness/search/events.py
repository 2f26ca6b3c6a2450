"""What the loop reports while it runs (`LoopEvents`); the CLI draws it with rich (``metaharness.runner.events``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from metaharness.candidate import Candidate


class LoopEvents:
    """What the loop reports while it runs; the CLI draws it with rich. The defaults do nothing."""

    def run_started(self, path: Path, spent: Callable[[], dict[str, float]]) -> None:
        """The run in ``path`` begins; ``spent()`` reads what it has cost so far, at any time."""

    def note(self, text: str) -> None: ...

    def iteration_started(self, iteration: int, total: int) -> None: ...

    def proposing(self, proposer: str) -> None: ...

    def candidate_started(self, cid: str, split: str, summary: str) -> None: ...

    def examples_done(self, done: int, total: int) -> None: ...

    def candidate_finished(self, candidate: Candidate) -> None: ...
