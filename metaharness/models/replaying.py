"""The task model as a replay sees it: a client that answers only the calls this run already paid for.

A revision that changes only what a harness does with the model's answers makes exactly the calls its parent made.
Run through a `ReplayingClient`, such a program is scored exactly, on every example its parent was scored on,
without one new model call: each request is answered from the response cache when the run's ledger was charged
for it before, and refused with `NotRecorded` otherwise. The refusal goes back to the harness as that call's
error (one example's failure, never the run's), so an example with a refused call is simply not replayed; the
records say which (`NOT_RECORDED` in a call's error).

A replay costs nothing and counts nothing against any budget: every answered call is a repeat the run already
paid for (the ledger counts it as a cache hit), or one that differs only in a length limit its recorded answer,
which stopped by itself, fits in (``metaharness.models.stopped``).
"""

from __future__ import annotations

from metaharness.models import stopped
from metaharness.models.cache import ResponseCache, is_cacheable, request_key
from metaharness.models.ledger import Ledger
from metaharness.models.protocol import ChatRequest, ChatResult, ModelClient, Role, context_window

# How a refused call's error begins in an example's record (``NotRecorded``'s message).
NOT_RECORDED = "not recorded:"


class NotRecorded(Exception):
    """A replay asked for a call this run has not made; only calls the run already paid for are answered."""


class ReplayingClient:
    """A `ModelClient` over `model`'s response cache and ledger that answers only requests the run was charged
    for before (see the module docstring). ``context_window`` is the wrapped model's, so prompts are cut the same
    way as in a real evaluation."""

    def __init__(self, spec: str, cache: ResponseCache | None, ledger: Ledger, window: int | None = None) -> None:
        self.spec = spec
        self.cache = cache
        self.ledger = ledger
        if window is not None:
            self.context_window = window

    @classmethod
    def of(cls, model: ModelClient) -> ReplayingClient | None:
        """The replaying view of ``model``, or None when it keeps no response cache (nothing can be replayed)."""
        cache = getattr(model, "cache", None)
        ledger = getattr(model, "ledger", None)
        if not isinstance(cache, ResponseCache) or not isinstance(ledger, Ledger):
            return None
        return cls(model.spec, cache, ledger, context_window(model))

    def complete(self, request: ChatRequest, *, role: Role = "task") -> ChatResult:
        """The recorded answer to ``request``; `NotRecorded` when the run never paid for it (or it is not a
        deterministic request, which no cache keeps)."""
        key = request_key(self.spec, request) if is_cacheable(request) else ""
        hit = self.cache.get(key) if self.cache is not None and key and self.ledger.charged_before(key) else None
        if hit is None and self.cache is not None and key:
            stood = stopped.answer(self.cache, self.spec, request)  # the same answer under another length limit
            hit = stood[0] if stood is not None and self.ledger.charged_before(stood[1]) else None
        if hit is None:
            raise NotRecorded(f"{NOT_RECORDED} this run never made this call (a replay answers only calls it made)")
        self.ledger.record_cache_hit(self.spec, role)
        hit.cached, hit.charged, hit.latency_s = True, False, 0.0
        return hit
