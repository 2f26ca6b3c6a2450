"""An answer that stopped by itself stands for the same request under any answer-length limit it fits in.

At temperature 0 the model's answer to a prompt does not depend on ``max_tokens`` until the limit cuts it: an answer
that ended on its own (``finish_reason`` ``"stop"``: a stop sequence or the end of its turn) after ``t`` tokens is
the answer to the same request with any ``max_tokens >= t``. A revision that only lengthens (or shortens, above
``t``) a harness's answers therefore makes no new call: the response cache keeps, beside each such answer, a row
under the request's *stem* (its key without ``max_tokens``), and a request that misses its own key is answered
from the stem when the stored answer fits its limit.

The stem row's ``raw_id`` holds the key of the call that was paid for, so the ledger can tell a repeat of a call
this run made (free) from an answer another run left in the cache (paid again, as any cache hit is).
"""

from __future__ import annotations

import dataclasses

from metaharness.models.cache import ResponseCache, request_key
from metaharness.models.protocol import ChatRequest, ChatResult


def stem_key(spec: str, request: ChatRequest) -> str | None:
    """The key of ``request`` without its answer-length limit; None when a stopped answer cannot stand for it (a
    sampled request, or one with several choices)."""
    if request.temperature != 0 or request.n != 1:
        return None
    return request_key(spec, dataclasses.replace(request, max_tokens=0))  # 0 is no valid limit: no real key


def remember(cache: ResponseCache, spec: str, key: str, request: ChatRequest, result: ChatResult) -> None:
    """Keep ``result`` (the answer to ``request``, stored under ``key``) under the request's stem when it stopped by
    itself."""
    stem = stem_key(spec, request)
    if stem is not None and all(c.finish_reason == "stop" for c in result.choices) and result.choices:
        cache.put(stem, spec, dataclasses.replace(result, raw_id=key))


def answer(cache: ResponseCache, spec: str, request: ChatRequest) -> tuple[ChatResult, str] | None:
    """The stored answer that stands for ``request`` under another limit, with the key of the call that paid for it;
    None when there is none or it would not fit ``request.max_tokens``."""
    stem = stem_key(spec, request)
    found = cache.get(stem) if stem is not None else None
    if found is None or not found.raw_id or found.usage.output_tokens > request.max_tokens:
        return None
    paid = found.raw_id
    return dataclasses.replace(found, raw_id=None), paid
