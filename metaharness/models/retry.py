"""Retries and concurrency limits shared by every network backend.

The SDKs' own retries are switched off (``max_retries=0``) so that one policy applies everywhere: exponential
backoff with full jitter on rate limits (429, honouring ``retry-after``), overload (529), 5xx and timeouts, and a
per-backend cap on requests in flight. A backend maps its SDK's exceptions to ``Transient`` (retry) or to a
``MetaharnessError`` (stop) with a ``classify`` function; ``sdk_error`` is that
mapping for the official SDKs, the same for every provider. ``Transport`` is what ``connect`` hands every
network backend.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from metaharness.errors import ConfigurationError, InputError, MetaharnessError, ModelUnavailable

if TYPE_CHECKING:
    import anthropic
    import openai

T = TypeVar("T")
log = logging.getLogger("metaharness.models")


class RetriesExhausted(ModelUnavailable):
    """A transient failure (rate limit, overload, 5xx, timeout) persisted through every retry (exit code 5)."""


class Transient(Exception):
    """A failure worth retrying, at most ``attempts`` times in all (default: the policy's); ``final`` is raised
    instead once the attempts are used up (e.g. a ConfigurationError naming the unreachable URL)."""

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        final: MetaharnessError | None = None,
        attempts: int | None = None,
    ):
        super().__init__(message)
        self.retry_after = retry_after
        self.final = final
        self.attempts = attempts


def retry_after_seconds(headers: object) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date); None if absent."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    millis = get("retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        try:
            return max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
        except (TypeError, ValueError):
            return None


def sdk_error(
    exc: Exception, sdk: ModuleType, *, server: str, model: str, key_variable: str, hint: str = ""
) -> Exception:
    """What an exception from an official SDK (``openai`` or ``anthropic``, which share one generated exception
    hierarchy) means to ``RetryPolicy.run``: a ``Transient`` for timeouts, connection failures (3
    attempts, then a ConfigurationError followed by ``hint``) and the statuses worth retrying; an error to stop
    with; or ``exc`` itself when the SDK did not raise it."""
    if isinstance(exc, sdk.APITimeoutError):
        return Transient(f"{server} timed out")
    if isinstance(exc, sdk.APIConnectionError):
        unreachable = ConfigurationError(f"Cannot reach {server} ({exc.__cause__ or exc}).{hint}")
        return Transient(f"cannot connect to {server}", attempts=3, final=unreachable)
    if isinstance(exc, sdk.APIStatusError):
        return _status_error(exc, server=server, model=model, key_variable=key_variable)
    return exc


def _status_error(
    exc: openai.APIStatusError | anthropic.APIStatusError, *, server: str, model: str, key_variable: str
) -> Exception:
    """What an HTTP error status from ``server`` means: retry (408, 409, 429, 5xx), a key or a model name to fix,
    or a request the server will never accept."""
    status, detail = exc.status_code, exc.message
    if status in (408, 409, 429) or status >= 500:
        return Transient(
            f"{server} answered HTTP {status}: {detail}", retry_after=retry_after_seconds(exc.response.headers)
        )
    if status in (401, 403):
        return ConfigurationError(f"{server} refused the API key (HTTP {status}). Check {key_variable}.")
    if status == 404:
        return ConfigurationError(f"{server} does not know the model '{model}' (HTTP 404: {detail}). Check the spec.")
    return InputError(f"{server} rejected the request for {model} (HTTP {status}): {detail}")


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter: attempt k waits uniform(0, min(max_delay, base_delay * 2**k)),
    or the server's ``retry-after`` when it gives one (capped at ``max_delay``)."""

    max_attempts: int = 6
    base_delay: float = 1.0
    max_delay: float = 60.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_delay)
        return random.uniform(0.0, min(self.max_delay, self.base_delay * 2**attempt))

    def run(
        self,
        call: Callable[[], T],
        *,
        classify: Callable[[Exception], Exception],
        slots: threading.Semaphore | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> T:
        """Run ``call`` (holding a concurrency slot, not while backing off) until it succeeds or fails for good."""
        for attempt in range(self.max_attempts):
            try:
                if slots is None:
                    return call()
                with slots:
                    return call()
            except Exception as exc:  # noqa: BLE001 - classify decides what each SDK error means
                error = exc if isinstance(exc, Transient) else classify(exc)
                if not isinstance(error, Transient):
                    if error is exc:
                        raise
                    raise error from exc
                allowed = min(self.max_attempts, error.attempts or self.max_attempts)
                if attempt + 1 >= allowed:
                    final = error.final or RetriesExhausted(
                        f"{error} (gave up after {allowed} attempts; wait and run again, or lower the concurrency)"
                    )
                    raise final from exc
                wait = self.delay(attempt, error.retry_after)
                log.warning("%s; retrying in %.1f s (attempt %d of %d)", error, wait, attempt + 2, allowed)
                (sleep or time.sleep)(wait)
        raise AssertionError("unreachable")


@dataclass(frozen=True)
class Transport:
    """How a network backend reaches its server: the retry policy, the requests in flight it allows per server,
    seconds per request, and an HTTP client to send them through (None: the SDK's own)."""

    retry: RetryPolicy
    max_concurrency: int
    timeout: float
    # The SDK's client class: httpx.Client, or httpx2.Client in the SDK releases that moved to that fork.
    http_client: Any = None


_SLOTS: dict[str, threading.BoundedSemaphore] = {}
_SLOTS_LOCK = threading.Lock()


def backend_slots(key: str, limit: int) -> threading.BoundedSemaphore:
    """The process-wide semaphore limiting requests in flight to one backend (first limit set for a key wins)."""
    with _SLOTS_LOCK:
        if key not in _SLOTS:
            _SLOTS[key] = threading.BoundedSemaphore(max(1, limit))
        return _SLOTS[key]
