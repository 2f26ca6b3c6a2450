"""What the run has spent of its budget, kept by the loop as it spends (`SpendAccount`): the example-evaluations of
the whole run, and each iteration's spend by phase (``predict``: the proposer's probes, ``check``: candidates whose
``__init__`` called the model, ``measure``: the staged evaluation's stages). The loop reads it before every
decision instead of re-reading the run's log; a session builds it once from the store (the candidates' recorded
stages and the logged ``"phase"`` lines), so a rerun after a kill counts what the killed session spent."""

from __future__ import annotations

from collections.abc import Iterable

from metaharness.budget import Spend
from metaharness.candidate import Candidate
from metaharness.store.log import PhaseSpendLine
from metaharness.store.protocol import RunJournal

MEASURE = "measure"  # the staged evaluation's phase (the others are logged as PhaseSpendLine)


class SpendAccount:
    """Example-evaluations spent by the run (``run_evals``) and each iteration's spend by phase (`charge`)."""

    def __init__(self) -> None:
        self.run_evals = 0.0
        self._phases: dict[int, dict[str, Spend]] = {}

    @classmethod
    def of(cls, candidates: Iterable[Candidate], journal: RunJournal) -> SpendAccount:
        """The account of a run so far: every candidate's recorded stages (``measure``), then every logged phase."""
        account = cls()
        for candidate in candidates:
            for increment in candidate.evaluation.increments if candidate.evaluation else []:
                account.charge(increment.iteration, MEASURE, increment.spend)
        for line in journal.log_records(PhaseSpendLine.kind):
            at, phase, spend = line.get("iteration"), line.get("phase"), line.get("spend")
            if isinstance(at, int) and isinstance(phase, str) and isinstance(spend, dict):
                account.charge(at, phase, Spend.from_json(spend))
        return account

    def charge(self, iteration: int, phase: str, spend: Spend) -> None:
        """Count ``spend`` against ``iteration``'s ``phase`` (and its example-evaluations against the run)."""
        phases = self._phases.setdefault(iteration, {})
        phases[phase] = phases.get(phase, Spend()) + spend
        self.run_evals += spend.evals

    def phases(self, iteration: int) -> dict[str, Spend]:
        """What ``iteration`` spent by phase (only the phases that spent, or were logged)."""
        return dict(self._phases.get(iteration, {}))

    def iteration(self, iteration: int) -> Spend:
        """What ``iteration`` spent in all, every phase together."""
        total = Spend()
        for spend in self._phases.get(iteration, {}).values():
            total = total + spend
        return total
