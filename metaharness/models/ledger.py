"""Cost accounting: tokens and dollars per model and role, with optional hard caps.

One ``Ledger`` is shared by every client of a run (``connect(spec, ledger=run_ledger)``). Each call is
checked against the caps *before* it is sent, so a run stops cleanly with
``BudgetExceeded`` instead of overspending; ``Ledger.totals`` goes into run records.
Listeners (``Ledger.add_listener``) receive every recorded call as a ``Charge``, e.g. to journal spend as
it happens (a run directory's ``spend.jsonl``).

Spend is counted per run (see ``metaharness.budget``): the ledger remembers the request keys it charged
(``remember`` restores them for a resumed run). A call the response cache answers is free when the ledger charged
that request before, and is charged at its recorded usage when it did not (another run filled the cache), so what
a run spends does not depend on how warm the shared cache was. A call the cache cannot answer is always charged.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypedDict

from metaharness.errors import BudgetExceeded, ConfigurationError
from metaharness.models.prices import PRICES_ENV, PriceTable
from metaharness.models.protocol import Usage


class TallyJSON(TypedDict):
    """A tally of calls as JSON (``_Tally.as_dict``)."""

    calls: int
    cache_hits: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    tokens: int
    dollars: float


class LedgerTotals(TallyJSON):
    """``Ledger.totals``: the run's tally, its caps, the models without a price, and tallies by model and role."""

    max_dollars: float | None
    max_tokens: int | None
    unpriced_models: list[str]
    by_model: dict[str, TallyJSON]
    by_role: dict[str, TallyJSON]


@dataclass
class _Tally:
    calls: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    dollars: float = 0.0

    def add(self, usage: Usage, dollars: float) -> None:
        self.calls += 1
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cached_tokens += usage.cached_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        self.dollars += dollars

    @property
    def tokens(self) -> int:
        """What the token cap counts: input plus output."""
        return self.input_tokens + self.output_tokens

    def as_dict(self) -> TallyJSON:
        return TallyJSON(
            calls=self.calls,
            cache_hits=self.cache_hits,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cached_tokens=self.cached_tokens,
            cache_write_tokens=self.cache_write_tokens,
            tokens=self.tokens,
            dollars=round(self.dollars, 6),
        )


@dataclass(frozen=True)
class Charge:
    """One recorded model call, as ``Ledger.add_listener`` listeners receive it."""

    model: str
    role: str
    usage: Usage
    dollars: float
    # The response cache's key of the request ("" for a request that is not cacheable).
    key: str = ""

    @property
    def tokens(self) -> int:
        """What the token cap counts: input plus output."""
        return self.usage.input_tokens + self.usage.output_tokens


class Ledger:
    """Thread-safe running totals. ``max_dollars``/``max_tokens`` (input + output) are hard caps; None = no cap."""

    def __init__(
        self,
        *,
        max_dollars: float | None = None,
        max_tokens: int | None = None,
        prices: PriceTable | None = None,
    ):
        self.max_dollars = max_dollars
        self.max_tokens = max_tokens
        self.prices = prices if prices is not None else PriceTable()
        self._lock = threading.Lock()
        self._total = _Tally()
        self._by_model: dict[str, _Tally] = defaultdict(_Tally)
        self._by_role: dict[str, _Tally] = defaultdict(_Tally)
        self._unpriced: set[str] = set()
        self._listeners: list[Callable[[Charge], None]] = []
        self._charged_keys: set[str] = set()

    def remember(self, keys: Iterable[str]) -> None:
        """Requests charged by earlier sessions of the run: a repeat of one is free."""
        with self._lock:
            self._charged_keys.update(k for k in keys if k)

    def charged_before(self, key: str) -> bool:
        """Whether this run was already charged for the request with cache key ``key``."""
        with self._lock:
            return bool(key) and key in self._charged_keys

    def add_listener(self, listener: Callable[[Charge], None]) -> None:
        """Call ``listener(charge)`` after every recorded call (not cache hits, which cost nothing).

        It runs in the thread that made the call, after the totals are updated and outside the ledger's lock, so
        calls from several threads may reach it at once; an exception it raises propagates to that model call.
        """
        with self._lock:
            self._listeners.append(listener)

    def check(self, spec: str, *, billed: bool = False) -> None:
        """Raise before a call that the caps no longer allow (or that a dollar cap cannot account for: a model
        without a price, unless ``billed``, when the backend itself reports what each call cost)."""
        if self.max_dollars is not None and not billed and self.prices.lookup(spec) is None:
            raise ConfigurationError(
                f"A dollar cap is set but there is no price for '{spec}'. Add one to a JSON/TOML price file named by "
                f'{PRICES_ENV} (dollars per million tokens, e.g. {{"{spec}": {{"input": 1.0, "output": 4.0}}}}).'
            )
        with self._lock:
            tokens = self._total.tokens
            if self.max_tokens is not None and tokens >= self.max_tokens:
                raise BudgetExceeded(
                    f"Token cap reached: {tokens} of {self.max_tokens} tokens used. Raise the cap to continue."
                )
            if self.max_dollars is not None and self._total.dollars >= self.max_dollars:
                raise BudgetExceeded(
                    f"Dollar cap reached: ${self._total.dollars:.4f} of ${self.max_dollars:.4f} spent. Raise the "
                    f"cap to continue."
                )

    def record(self, spec: str, role: str, usage: Usage, *, key: str = "", dollars: float | None = None) -> float:
        """Add one call's usage (``key``: its cache key, remembered); returns its cost in dollars: ``dollars`` when
        the backend billed the call itself (a coding-agent CLI reports its cost), else priced from the table (0 for
        unpriced models, which are listed)."""
        price = self.prices.lookup(spec) if dollars is None else None
        unpriced = dollars is None and price is None
        if dollars is None:
            dollars = 0.0 if price is None else price.dollars(usage)
        with self._lock:
            if key:
                self._charged_keys.add(key)
            if unpriced:
                self._unpriced.add(spec)
            for tally in (self._total, self._by_model[spec], self._by_role[role]):
                tally.add(usage, dollars)
            listeners = list(self._listeners)
        if listeners:
            charge = Charge(spec, role, usage, dollars, key)
            for listener in listeners:
                listener(charge)
        return dollars

    def record_cache_hit(self, spec: str, role: str) -> None:
        """A repeat of a request this run was charged for, answered from the response cache: no tokens, no
        dollars."""
        with self._lock:
            for tally in (self._total, self._by_model[spec], self._by_role[role]):
                tally.cache_hits += 1

    @property
    def dollars(self) -> float:
        with self._lock:
            return self._total.dollars

    @property
    def tokens(self) -> int:
        with self._lock:
            return self._total.tokens

    def totals(self) -> LedgerTotals:
        """Everything as plain JSON-ready data, for run records."""
        with self._lock:
            return LedgerTotals(
                **self._total.as_dict(),
                max_dollars=self.max_dollars,
                max_tokens=self.max_tokens,
                unpriced_models=sorted(self._unpriced),
                by_model={k: v.as_dict() for k, v in sorted(self._by_model.items())},
                by_role={k: v.as_dict() for k, v in sorted(self._by_role.items())},
            )
