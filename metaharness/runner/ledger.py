"""The ledger of one session of a run (``run_ledger``): every model call journaled in the run's ``spend.jsonl`` as
it is counted, and held to the run's money caps (``SearchBudget.per_run``: ``usd`` and ``tokens``) over every
session of the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from metaharness.budget import Budget, Spend
from metaharness.models.ledger import Charge, Ledger
from metaharness.models.prices import PriceTable
from metaharness.store.run_dir import RunDirectory


@dataclass
class RunLedger:
    """The ledger of one session of a run, journaling into the run's ``spend.jsonl``, with the run's caps
    (``per_run``; what the loop reads of it: ``metaharness.search.loop.Spending``).

    ``previous`` is what earlier sessions spent; the ledger's own caps are what the run's caps leave of it, so a
    resumed run stops where one uninterrupted session would have.
    """

    ledger: Ledger
    previous: dict[str, float]
    per_run: Budget = Budget()

    def spent(self) -> dict[str, float]:
        """The whole run's spend so far (earlier sessions and this one)."""
        return {
            "usd": round(self.previous.get("usd", 0.0) + self.ledger.dollars, 6),
            "tokens": int(self.previous.get("tokens", 0)) + self.ledger.tokens,
        }

    def left(self) -> Budget:
        """The tokens and dollars the run's caps leave (what a proposer may still spend; ``math.inf`` where not
        capped)."""
        spent = self.spent()
        money = Budget(tokens=self.per_run.tokens, usd=self.per_run.usd)
        return money.left(Spend(tokens=float(spent["tokens"]), usd=float(spent["usd"])))


def run_ledger(run: RunDirectory, per_run: Budget | None = None, *, prices: PriceTable | None = None) -> RunLedger:
    """A ledger for this session of ``run``: every call it counts is journaled (fsynced) in ``spend.jsonl``
    before the call returns, and its caps are ``per_run``'s dollars and tokens minus what the journal holds from
    earlier sessions (a session killed mid-iteration included); no cap without ``per_run``."""
    per_run = per_run or Budget()
    totals = run.spent()
    previous = {"usd": totals["usd"], "tokens": totals["tokens"]}
    ledger = Ledger(
        max_dollars=max(0.0, per_run.usd - previous["usd"]) if math.isfinite(per_run.usd) else None,
        max_tokens=max(0, int(per_run.tokens) - int(previous["tokens"])) if math.isfinite(per_run.tokens) else None,
        prices=prices,
    )
    ledger.remember(run.spend.keys())

    def journal(charge: Charge) -> None:
        usage = charge.usage
        run.spend.record(
            charge.model,
            charge.role,
            charge.dollars,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cached_tokens=usage.cached_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            key=charge.key,
        )

    ledger.add_listener(journal)
    return RunLedger(ledger, previous, per_run)
