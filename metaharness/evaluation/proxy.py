"""The task-model proxy: the parent's side of every ``lm(...)`` call a sandboxed harness makes.

The proxy owns the real ``ModelClient`` (and so the keys); the harness only sends
JSON requests through its pipe. Each call is checked before it costs anything (messages, their number and the
prompt's size, ``max_tokens``, ``temperature``, ``stop``, ``json_schema`` and its size; ``.bounds``), run, and
recorded for the trace with its tokens, latency, cache status and dollars. A failure of one call (bad arguments,
a prompt too large, context overflow, invalid structured output) goes back to the harness as an error it may
catch; a refused call cost no model time and is charged nothing (``CallRecorder``); failures of the whole run (a
reached budget cap, a missing key, an unreachable server, a spend journal or response cache that cannot be
written) are raised so the evaluation stops with a clear message, and the harness is not answered.

Jobs that run in other processes (joblib's Dask, Ray or loky backends) reach the same client through
``ProxyServer``: a pickled ``ModelRef`` carries no client and no key, only the address of a TCP server
in the parent and a per-evaluation token, and every call of a remote job is made by the parent's client, so the
run's ledger counts it and its caps hold. Wire format, per connection: the token alone on the first line (at most
``TOKEN_LINE`` bytes are read before it is checked, so a stranger is refused without sending megabytes), then
one JSON line ``{"request"}`` in; one JSON line out: ``{"reply", "record"}`` (the reply for the harness, the call's
trace record) or ``{"failure": {"kind", "message"}}`` (a systemic failure, raised again in the remote job as the
same error class).

A task model that stays unreachable through its retries raises ``ModelUnavailable``:
an outage is systemic, so the evaluation stops and scores nothing rather than scoring every example 0.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
import socket
import socketserver
import sqlite3
import threading
from dataclasses import dataclass
from typing import TypedDict

from metaharness.errors import BudgetExceeded, ConfigurationError, MetaharnessError, ModelUnavailable, StorageFailure
from metaharness.evaluation.bounds import (
    MAX_CALL_TEXT_CHARS,
    MAX_CHARS_PER_TOKEN,
    MAX_EXAMPLE_TRACE_CHARS,
    MAX_MESSAGES,
    MAX_PROMPT_CHARS,
    MAX_SCHEMA_CHARS,
    MAX_SCHEMA_DEPTH,
    MAX_STOP_CHARS,
    MAX_STOP_SEQUENCES,
    cut,
)
from metaharness.evaluation.records import CallRecord, LMReply, TracedMessage
from metaharness.json_types import JSONObject, JSONValue
from metaharness.models.protocol import (
    ChatRequest,
    ChatResult,
    ModelClient,
    StructuredOutputError,
    context_window,
)

MAX_TOKENS_CAP = 8192
_SYSTEMIC = (BudgetExceeded, ConfigurationError, ModelUnavailable, StorageFailure)
# Where the parent's proxy listens, and the host remote workers are told to connect to: 127.0.0.1 unless set
# (a cluster on other machines needs an address they can reach, e.g. the parent's LAN address).
PROXY_HOST_ENV = "METAHARNESS_PROXY_HOST"
PROXY_PORT_ENV = "METAHARNESS_PROXY_PORT"
# A remote call waits this long for the parent (model time included: retries of a slow server can take minutes).
REMOTE_CALL_SECONDS = 1800.0
MAX_LINE = 64 << 20
TOKEN_LINE = 128  # bytes read from a connection before its token is checked (a token is 43 ASCII characters)


@dataclass(frozen=True)
class ProxyAddress:
    """Where a remote job sends its model calls: the parent's ``ProxyServer`` and its per-evaluation token."""

    host: str
    port: int
    token: str


class RefState(TypedDict):
    """A pickled ``ModelRef``: the spec and the parent's proxy."""

    spec: str
    remote: ProxyAddress


class ModelRef:
    """The task model of an evaluation's jobs: the live client in this process, the parent's proxy elsewhere.

    joblib's Dask, Ray or loky backends pickle jobs to other processes. The client never travels (it holds the
    key and the run's ledger): pickling a ref starts the parent's ``ProxyServer`` once and keeps only the
    spec and the server's ``ProxyAddress``, so a remote job's calls are made here. ``close`` stops the
    server (the evaluation's end); a remote call after that fails with a clear error.
    """

    def __init__(self, model: ModelClient):
        self.spec = model.spec
        self._client: ModelClient | None = model
        self._remote: ProxyAddress | None = None
        self._server: ProxyServer | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> RefState:
        return {"spec": self.spec, "remote": self.serve()}

    def __setstate__(self, state: RefState) -> None:
        self.spec = state["spec"]
        self._client, self._remote, self._server = None, state["remote"], None
        self._lock = threading.Lock()

    @property
    def client(self) -> ModelClient:
        if self._client is None:
            raise ConfigurationError(f"The client of {self.spec} lives in the parent process; use recorder().")
        return self._client

    @property
    def remote(self) -> bool:
        """True in a process the ref was sent to: calls go to the parent's proxy."""
        return self._client is None

    def serve(self) -> ProxyAddress:
        """The parent's proxy for remote copies of this ref (started on first use); in a copy, its address."""
        with self._lock:
            if self._client is None:
                assert self._remote is not None, "an unpickled ModelRef always has its proxy's address"
                return self._remote
            if self._server is None:
                self._server = ProxyServer(self)
            return self._server.address

    def recorder(self) -> CallRecorder | RemoteRecorder:
        """A fresh recorder for one example's calls: direct here, through the parent's proxy in a remote copy."""
        if self._client is None:
            assert self._remote is not None
            return RemoteRecorder(self._remote)
        return CallRecorder(self)

    def close(self) -> None:
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.close()


def _dollars(client: ModelClient, result: ChatResult) -> float:
    if not result.charged:
        return 0.0
    ledger = getattr(client, "ledger", None)
    price = ledger.prices.lookup(client.spec) if ledger is not None else None
    return price.dollars(result.usage) if price is not None else 0.0


def max_prompt_chars(client: ModelClient) -> int:
    """The longest prompt (characters of all its messages) a request to ``client`` may hold: ``MAX_PROMPT_CHARS``,
    or less when the model's context window is known and could not hold it at ``MAX_CHARS_PER_TOKEN`` per token."""
    window = context_window(client)
    return min(MAX_PROMPT_CHARS, window * MAX_CHARS_PER_TOKEN) if window else MAX_PROMPT_CHARS


def _depth(value: JSONValue) -> int:
    """How deeply ``value`` nests objects and lists (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _build_request(payload: JSONObject, prompt_chars: int = MAX_PROMPT_CHARS) -> ChatRequest:
    """The request ``payload`` asks for, checked before it costs anything; ``ValueError`` says what is wrong.
    ``prompt_chars``: the longest prompt the model may be sent (``max_prompt_chars``)."""
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    if len(messages) > MAX_MESSAGES:
        raise ValueError(f"a call holds at most {MAX_MESSAGES} messages, not {len(messages):,}")
    sent: list[dict[str, object]] = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
            raise ValueError("each message needs a role of system, user or assistant")
        if not isinstance(message.get("content"), str):
            raise ValueError("each message needs a string content")
        sent.append({"role": message["role"], "content": message["content"]})
    chars = sum(len(str(message["content"])) for message in sent)
    if chars > prompt_chars:
        raise ValueError(
            f"the prompt holds {chars:,} characters, more than the {prompt_chars:,} this model can take "
            f"(at most {MAX_CHARS_PER_TOKEN} characters per token of its context window)"
        )
    max_tokens = payload.get("max_tokens", 512)
    if not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS_CAP:
        raise ValueError(f"max_tokens must be an integer from 1 to {MAX_TOKENS_CAP}")
    temperature = payload.get("temperature", 0.0)
    if not isinstance(temperature, (int, float)) or not 0.0 <= temperature <= 2.0:
        raise ValueError("temperature must be a number from 0 to 2")
    stop = payload.get("stop")
    if stop is not None and (
        not isinstance(stop, list)
        or len(stop) > MAX_STOP_SEQUENCES
        or not all(isinstance(s, str) and len(s) <= MAX_STOP_CHARS for s in stop)
    ):
        raise ValueError(
            f"stop must be a list of at most {MAX_STOP_SEQUENCES} strings of at most {MAX_STOP_CHARS} characters"
        )
    schema = payload.get("json_schema")
    if schema is not None and not isinstance(schema, dict):
        raise ValueError("the JSON schema must be an object")
    if schema is not None and (_depth(schema) > MAX_SCHEMA_DEPTH or len(json.dumps(schema)) > MAX_SCHEMA_CHARS):
        raise ValueError(
            f"the JSON schema may nest {MAX_SCHEMA_DEPTH} levels and take {MAX_SCHEMA_CHARS:,} characters at most"
        )
    return ChatRequest(
        messages=sent,
        temperature=float(temperature),
        max_tokens=max_tokens,
        stop=[str(s) for s in stop] if stop else None,
        json_schema=schema,
    )


def _traced(messages: JSONValue, limit: int = MAX_CALL_TEXT_CHARS) -> list[TracedMessage | str] | str | None:
    """The messages of a call as its trace record keeps them: roles and contents, at most ``limit`` characters of
    content in all, with a marker where they were cut (a harness may send megabytes)."""
    if not isinstance(messages, list):
        return None if messages is None else cut(str(messages)[: limit + 1], limit)
    left = limit
    kept: list[TracedMessage | str] = []
    for index, message in enumerate(messages):
        if left <= 0:
            kept.append({"role": "system", "content": f"[cut by metaharness: {len(messages) - index} more messages]"})
            break
        if isinstance(message, dict) and isinstance(content := message.get("content"), str):
            kept.append({"role": cut(str(message.get("role")), 20), "content": cut(content, left)})
            left -= len(content)
        else:
            text = cut(str(message)[: left + 1], left)
            kept.append(text)
            left -= len(text)
    return kept


class CallRecorder:
    """Answers the calls of one example and keeps their records (``calls``) for its trace.

    Each request is checked before it costs anything (``_build_request``: the size of its prompt, messages, stop
    list and schema, its options). A request refused here or by the model (a prompt its context cannot hold:
    ``ContextOverflow``, refused before anything is computed) is charged nothing, through a server as in process:
    the harness gets the reason as an error, the trace keeps it, and the per-example call limit bounds how many a
    harness can make. A failure of the run itself (a cap, an unreachable model, a journal or cache that cannot be
    written) is raised and stops the evaluation; the harness is not answered.
    The messages kept in the trace are cut to ``MAX_CALL_TEXT_CHARS`` per call and ``MAX_EXAMPLE_TRACE_CHARS`` for
    all the calls of the example."""

    def __init__(self, model: ModelRef):
        self.model = model
        self.calls: list[CallRecord] = []
        self.trace_left = MAX_EXAMPLE_TRACE_CHARS

    def __call__(self, payload: JSONObject) -> LMReply:
        options: JSONObject = {key: payload.get(key) for key in ("max_tokens", "temperature", "stop", "json_schema")}
        shown = json.dumps(options, default=str)
        if len(shown) > MAX_CALL_TEXT_CHARS:  # a schema or stop list of megabytes: kept as cut text
            options = {"cut": cut(shown, MAX_CALL_TEXT_CHARS)}
        traced = _traced(payload.get("messages"), max(0, min(MAX_CALL_TEXT_CHARS, self.trace_left)))
        self.trace_left -= len(json.dumps(traced, default=str))
        record: CallRecord = {
            "messages": traced,
            "options": options,
            "response": None,
            "parsed": None,
            "input_tokens": 0,
            "output_tokens": 0,
            "latency_s": 0.0,
            "cached": False,
            "charged": False,
            "usd": 0.0,
            "error": None,
        }
        self.calls.append(record)
        client = self.model.client
        try:
            request = _build_request(payload, max_prompt_chars(client))
        except ValueError as exc:
            return self._refused(record, f"bad lm() call: {exc}")
        try:
            result = client.complete(request, role="task")
        except ModelUnavailable as exc:
            raise ModelUnavailable(
                f"The task model {client.spec} is unavailable: {exc}. The evaluation stopped without recording a "
                "score; rerun the same command to continue."
            ) from exc
        except _SYSTEMIC:
            raise
        except (OSError, sqlite3.Error) as exc:  # the parent's own files (the response cache): not the harness's
            raise StorageFailure(
                f"The task model's answer could not be stored ({type(exc).__name__}: {exc}); the evaluation stopped. "
                "Free space on the disk of the response cache (METAHARNESS_CACHE_DIR), then rerun the same command."
            ) from exc
        except StructuredOutputError as exc:  # the model ran (and was charged): its answer was no valid JSON
            error = record["error"] = f"{type(exc).__name__}: {exc}"
            return {"error": error}
        except Exception as exc:  # noqa: BLE001 - one call's failure goes back to the harness
            return self._refused(record, f"{type(exc).__name__}: {exc}")
        record.update(
            {
                "response": result.text,
                "parsed": result.parsed,
                "input_tokens": result.usage.input_tokens,
                "output_tokens": result.usage.output_tokens,
                "latency_s": round(result.latency_s, 4),
                "cached": result.cached,
                "charged": result.charged,
                "usd": _dollars(client, result),
            }
        )
        return {"text": result.text, "parsed": result.parsed}

    def _refused(self, record: CallRecord, error: str) -> LMReply:
        """Answer a refused request with ``error`` (see the class docstring: nothing is charged)."""
        record["error"] = error
        return {"error": error}


class ProxyFailure(TypedDict):
    kind: str
    message: str


class ProxyAnswer(TypedDict, total=False):
    """The proxy's answer line: the ``reply`` and its ``record``, or the ``failure`` the remote job raises again."""

    reply: LMReply
    record: CallRecord
    failure: ProxyFailure


class ProxyServer:
    """The parent's end of remote jobs' model calls: a threaded TCP server answering with ``model``'s client.

    Listens on ``METAHARNESS_PROXY_HOST`` (default 127.0.0.1) and ``METAHARNESS_PROXY_PORT`` (default: any free
    port); a request without this server's token is refused. Each connection carries one call.
    """

    def __init__(self, model: ModelRef, host: str | None = None, port: int | None = None):
        host = host or os.environ.get(PROXY_HOST_ENV) or "127.0.0.1"
        port = port if port is not None else int(os.environ.get(PROXY_PORT_ENV) or 0)
        token = secrets.token_urlsafe(32)
        expected = token.encode("ascii")
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            timeout = 60.0  # to send the request lines; the model call itself has no limit here

            def handle(self) -> None:
                # A slow, vanished or hostile client ends its own connection quietly (no traceback on stderr).
                with contextlib.suppress(OSError):
                    self.wfile.write(json.dumps(self._answer()).encode() + b"\n")

            def _answer(self) -> ProxyAnswer:
                # Bytes against bytes: compare_digest refuses str with non-ASCII characters by raising.
                if not hmac.compare_digest(self.rfile.readline(TOKEN_LINE).rstrip(b"\r\n"), expected):
                    return {"failure": {"kind": "ConfigurationError", "message": "refused: not this run's token"}}
                try:
                    message = json.loads(self.rfile.readline(MAX_LINE))
                except (ValueError, RecursionError):  # UnicodeDecodeError included; nested too deep
                    message = None
                if not isinstance(message, dict):
                    return {"failure": {"kind": "ConfigurationError", "message": "malformed request line"}}
                request = message.get("request") or {}
                return proxy.answer(request if isinstance(request, dict) else {})

        class Server(socketserver.ThreadingTCPServer):
            # close() waits for the calls in flight, so the ledger is complete when an evaluation returns.
            daemon_threads = False
            block_on_close = True
            allow_reuse_address = True

        self.model = model
        self.server = Server((host, port), Handler)
        self.address = ProxyAddress(host, self.server.server_address[1], token)
        self._thread = threading.Thread(target=self.server.serve_forever, name="model-proxy", daemon=True)
        self._thread.start()

    def answer(self, payload: JSONObject) -> ProxyAnswer:
        recorder = CallRecorder(self.model)
        try:
            reply = recorder(payload)
        except MetaharnessError as exc:  # systemic: the remote job raises it again, the evaluation stops
            return {"failure": {"kind": type(exc).__name__, "message": str(exc)}}
        return {"reply": reply, "record": recorder.calls[0]}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


_FAILURES: dict[str, type[MetaharnessError]] = {
    "BudgetExceeded": BudgetExceeded,
    "ConfigurationError": ConfigurationError,
    "ModelUnavailable": ModelUnavailable,
    "StorageFailure": StorageFailure,
}


class RemoteRecorder:
    """``CallRecorder``'s twin in a remote process: each call goes to the parent's ``ProxyServer``,
    which makes it and returns the reply with its record (kept in ``calls``, as locally)."""

    def __init__(self, address: ProxyAddress):
        self.address = address
        self.calls: list[CallRecord] = []

    def __call__(self, payload: JSONObject) -> LMReply:
        where = f"{self.address.host}:{self.address.port}"
        message = self.address.token.encode() + b"\n" + json.dumps({"request": payload}).encode() + b"\n"
        try:
            with socket.create_connection((self.address.host, self.address.port), timeout=REMOTE_CALL_SECONDS) as s:
                s.sendall(message)
                with s.makefile("rb") as replies:
                    line = replies.readline(MAX_LINE)
        except OSError as exc:
            raise ConfigurationError(
                f"This worker cannot reach the evaluation's model proxy at {where} ({exc}). Workers on other "
                f"machines need an address of the parent they can reach: set {PROXY_HOST_ENV} (and "
                f"{PROXY_PORT_ENV} for a fixed port) in the parent."
            ) from None
        try:
            answer = json.loads(line)
        except ValueError:
            raise ConfigurationError(f"The model proxy at {where} closed the connection without an answer.") from None
        failure = answer.get("failure")
        if failure is not None:
            kind = _FAILURES.get(failure.get("kind"), ConfigurationError)
            raise kind(failure.get("message") or "the model proxy failed")
        self.calls.append(answer["record"])
        return answer["reply"]
