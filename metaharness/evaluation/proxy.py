"""The task-model proxy: the parent's side of every ``lm(...)`` call a sandboxed harness makes.

The proxy owns the real :class:`~metaharness.models.types.ModelClient` (and so the keys); the harness only sends
JSON requests through its pipe. Each call is checked (messages, ``max_tokens``, ``temperature``, ``stop``,
``json_schema``), run, and recorded for the trace with its tokens, latency, cache status and dollars. A failure of
one call (bad arguments, context overflow, invalid structured output) goes back to the harness as an error it may
catch; failures of the whole run (a reached budget cap, a missing key, an unreachable server) are raised so the
evaluation stops with a clear message.
"""

from __future__ import annotations

import threading
from typing import Any

from metaharness.errors import BudgetExceeded, ConfigurationError
from metaharness.models.types import ChatRequest, ChatResult, ModelClient

MAX_TOKENS_CAP = 8192
_SYSTEMIC = (BudgetExceeded, ConfigurationError)


class ModelRef:
    """A model for evaluation jobs: a live client here, or its spec string rebuilt once per remote process.

    joblib's Dask or Ray backends pickle jobs to other machines; an in-process model cannot travel, so pickling
    keeps only the spec and the receiving process connects to it itself (``connect(spec)``).
    """

    _connected: dict[str, ModelClient] = {}
    _lock = threading.Lock()

    def __init__(self, model: ModelClient | str):
        self.spec = model if isinstance(model, str) else model.spec
        self._client = None if isinstance(model, str) else model

    def __getstate__(self) -> dict[str, Any]:
        return {"spec": self.spec, "_client": None}

    @property
    def client(self) -> ModelClient:
        if self._client is None:
            with ModelRef._lock:
                if self.spec not in ModelRef._connected:
                    from metaharness.models import connect

                    ModelRef._connected[self.spec] = connect(self.spec)
                self._client = ModelRef._connected[self.spec]
        return self._client


def _dollars(client: ModelClient, result: ChatResult) -> float:
    if result.cached:
        return 0.0
    ledger = getattr(client, "ledger", None)
    price = ledger.prices.lookup(client.spec) if ledger is not None else None
    return price.dollars(result.usage) if price is not None else 0.0


def _build_request(payload: dict[str, Any]) -> ChatRequest:
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
            raise ValueError("each message needs a role of system, user or assistant")
        if not isinstance(message.get("content"), str):
            raise ValueError("each message needs a string content")
    max_tokens = payload.get("max_tokens", 512)
    if not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS_CAP:
        raise ValueError(f"max_tokens must be an integer from 1 to {MAX_TOKENS_CAP}")
    temperature = payload.get("temperature", 0.0)
    if not isinstance(temperature, (int, float)) or not 0.0 <= temperature <= 2.0:
        raise ValueError("temperature must be a number from 0 to 2")
    stop = payload.get("stop")
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) for s in stop)):
        raise ValueError("stop must be a list of strings")
    schema = payload.get("json_schema")
    if schema is not None and not isinstance(schema, dict):
        raise ValueError("the JSON schema must be an object")
    return ChatRequest(
        messages=[{"role": m["role"], "content": m["content"]} for m in messages],
        temperature=float(temperature),
        max_tokens=max_tokens,
        stop=stop or None,
        json_schema=schema,
    )


class CallRecorder:
    """Answers the calls of one example and keeps their records (``calls``) for its trace."""

    def __init__(self, model: ModelRef):
        self.model = model
        self.calls: list[dict[str, Any]] = []

    def __call__(self, payload: dict[str, Any]) -> dict[str, Any]:
        options = {key: payload.get(key) for key in ("max_tokens", "temperature", "stop", "json_schema")}
        record: dict[str, Any] = {
            "messages": payload.get("messages"),
            "options": options,
            "response": None,
            "parsed": None,
            "input_tokens": 0,
            "output_tokens": 0,
            "latency_s": 0.0,
            "cached": False,
            "usd": 0.0,
            "error": None,
        }
        self.calls.append(record)
        try:
            request = _build_request(payload)
        except ValueError as exc:
            record["error"] = f"bad lm() call: {exc}"
            return {"error": record["error"]}
        client = self.model.client
        try:
            result = client.complete(request, role="task")
        except _SYSTEMIC:
            raise
        except Exception as exc:  # noqa: BLE001 - one call's failure goes back to the harness
            record["error"] = f"{type(exc).__name__}: {exc}"
            return {"error": record["error"]}
        record.update(
            response=result.text,
            parsed=result.parsed,
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
            latency_s=round(result.latency_s, 4),
            cached=result.cached,
            usd=_dollars(client, result),
        )
        return {"text": result.text, "parsed": result.parsed}
