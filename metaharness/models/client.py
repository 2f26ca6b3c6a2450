"""``connect(spec)``: the client layer every part of metaharness calls models through.

A ``Client`` wraps one backend (Anthropic, an OpenAI-compatible server, or the embedded model) with what is
the same for all of them: the response cache, the cost ledger and its caps (spend counted per run: a repeat of a
call the run already paid for is free, see ``metaharness.models.ledger``), and the validation of structured
output with one repair request. Backends only translate a ``ChatRequest`` to their wire format and back, and
retry transient failures (see ``metaharness.models.retry``).

>>> from metaharness.models import ChatRequest, connect
>>> client = connect("local:smollm2-135m", cache=False)
>>> client.complete(ChatRequest([{"role": "user", "content": "Say hi."}], max_tokens=8)).text  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from pathlib import Path
from typing import Any, Protocol

from metaharness.errors import InputError
from metaharness.models import stopped
from metaharness.models.anthropic_api import AnthropicBackend
from metaharness.models.cache import ResponseCache, is_cacheable, request_key
from metaharness.models.ledger import Ledger
from metaharness.models.local import LocalBackend
from metaharness.models.openai_api import OpenAIBackend
from metaharness.models.protocol import ChatRequest, ChatResult, Role, StructuredOutputError
from metaharness.models.retry import RetryPolicy, Transport
from metaharness.models.spec import ModelSpec, parse_spec
from metaharness.models.structured import check_choice, repair_request


class Backend(Protocol):
    """One provider's translation of a request; ``complete`` returns exactly ``request.n`` choices."""

    def complete(self, request: ChatRequest) -> ChatResult: ...


class Client:
    """A ``ModelClient``: cache, ledger and structured-output checks on a backend."""

    def __init__(self, spec: str, backend: Backend, *, cache: ResponseCache | None, ledger: Ledger):
        self.spec = spec
        self.backend = backend
        self.cache = cache
        self.ledger = ledger

    def complete(self, request: ChatRequest, *, role: Role = "task") -> ChatResult:
        _check_request(request)
        request = _sendable(request)
        start = time.perf_counter()
        cache = self.cache if is_cacheable(request) else None
        key = request_key(self.spec, request) if cache is not None else ""
        if cache is not None:
            hit, paid = cache.get(key), key
            if hit is None and (stood := stopped.answer(cache, self.spec, request)) is not None:
                hit, paid = stood  # the same answer under another length limit (metaharness.models.stopped)
            if hit is not None:
                hit.cached = True
                if self.ledger.charged_before(paid):
                    self.ledger.record_cache_hit(self.spec, role)
                    hit.charged = False
                else:  # the cache was filled by another run: this run pays what the call cost there
                    self.ledger.check(self.spec)
                    self.ledger.record(self.spec, role, hit.usage, key=key)
                hit.latency_s = time.perf_counter() - start
                return hit
        self.ledger.check(self.spec)
        result = self.backend.complete(request)
        try:
            self._check_structure(request, result)
        finally:
            self.ledger.record(self.spec, role, result.usage, key=key)
        result.latency_s = time.perf_counter() - start
        if cache is not None:
            cache.put(key, self.spec, result)
            stopped.remember(cache, self.spec, key, request, result)
        return result

    def _check_structure(self, request: ChatRequest, result: ChatResult) -> None:
        """Validate every choice; repair each faulty one with one request (its usage is added to the result)."""
        for index, choice in enumerate(result.choices):
            problem = check_choice(request, choice)
            if problem is None:
                continue
            repaired = self.backend.complete(repair_request(request, choice, problem))
            result.usage = result.usage + repaired.usage
            second = check_choice(request, repaired.choices[0])
            if second is not None:
                shown = repaired.choices[0].text or repaired.choices[0].tool_calls
                raise StructuredOutputError(
                    f"{self.spec} gave invalid structured output even after a repair request: {second}. "
                    f"Last output: {str(shown)[:300]!r}. Try a stronger model, a simpler schema or a larger "
                    f"max_tokens."
                )
            result.choices[index] = repaired.choices[0]


def _sendable(request: ChatRequest) -> ChatRequest:
    """``request`` with every lone surrogate in its messages written as its backslash escape: text a harness or a
    trace holds may have one, and no provider SDK, JSON encoder or cache key can take it."""

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return value.encode("utf-8", "backslashreplace").decode("utf-8") if _SURROGATE.search(value) else value
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    if not any(_SURROGATE.search(json.dumps(m, ensure_ascii=False, default=str)) for m in request.messages):
        return request
    return dataclasses.replace(request, messages=clean(request.messages))


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_request(request: ChatRequest) -> None:
    if request.n < 1:
        raise InputError(f"ChatRequest.n must be at least 1, got {request.n}.")
    if request.max_tokens < 1:
        raise InputError(f"ChatRequest.max_tokens must be at least 1, got {request.max_tokens}.")
    names = [t.name for t in request.tools or []]
    if request.tool_choice not in (None, "auto", "none", "required") and request.tool_choice not in names:
        raise InputError(f"tool_choice names '{request.tool_choice}', which is not among the tools {names}.")
    if request.tool_choice == "required" and not names:
        raise InputError("tool_choice='required' needs at least one tool in ChatRequest.tools.")
    if request.logprobs is not None and request.logprobs < 0:
        raise InputError(f"ChatRequest.logprobs must be None or >= 0, got {request.logprobs}.")


# Options each backend accepts through ``connect(spec, **options)``.
BACKEND_OPTIONS: dict[str, set[str]] = {
    "local": {"n_ctx"},
    "openai": {"http_client", "server", "api_key"},
    "anthropic": {"http_client", "api_key"},
}


def connect(
    spec: str | ModelSpec,
    *,
    cache: ResponseCache | str | os.PathLike[str] | bool | None = True,
    ledger: Ledger | None = None,
    retry: RetryPolicy | None = None,
    max_concurrency: int | None = None,
    timeout: float = 300.0,
    **options: Any,
) -> Client:
    """Build a client for a model spec (``anthropic:M``, ``openai:M``, ``openai:M@URL``, ``local:NAME``).

    ``cache``: True for the default cache file, a path or ``ResponseCache`` for another, False/None for none.
    ``ledger``: the run's ``Ledger`` (a fresh uncapped one when omitted; read it back as ``client.ledger``).
    ``retry``/``max_concurrency``/``timeout``: transient-failure policy, requests in flight per backend (default 8
    for servers, 1 for the embedded model), seconds per request. Backend ``options``: ``http_client`` and
    ``api_key`` (openai, anthropic; the key otherwise comes from the environment), ``server`` (openai-compatible
    dialect: ``"openai"``, ``"llama-cpp-python"``, ``"llama.cpp"``, ``"vllm"``, ``"ollama"``; detected when
    omitted), ``n_ctx`` (local).
    """
    parsed = parse_spec(spec) if isinstance(spec, str) else spec
    unknown = sorted(set(options) - BACKEND_OPTIONS[parsed.provider])
    if unknown:
        raise InputError(
            f"The {parsed.provider}: backend does not take the option(s) {', '.join(unknown)}; it takes "
            f"{', '.join(sorted(BACKEND_OPTIONS[parsed.provider]))}."
        )
    backend: Backend
    if parsed.provider == "local":
        backend = LocalBackend(parsed, **options)
    else:
        transport = Transport(
            retry or RetryPolicy(), max_concurrency or 8, timeout, http_client=options.pop("http_client", None)
        )
        if parsed.provider == "openai":
            backend = OpenAIBackend(parsed, transport, **options)
        else:
            backend = AnthropicBackend(parsed, transport, **options)
    if cache is True:
        store: ResponseCache | None = ResponseCache()
    elif cache is False or cache is None:
        store = None
    elif isinstance(cache, ResponseCache):
        store = cache
    else:
        store = ResponseCache(Path(cache))
    return Client(str(parsed), backend, cache=store, ledger=ledger if ledger is not None else Ledger())
