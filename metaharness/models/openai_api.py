"""``openai:MODEL`` and ``openai:MODEL@URL``: OpenAI's API or any OpenAI-compatible server, via the official SDK.

Servers differ in what they accept, so each backend works in a ``Dialect``, configured (``server=``) or
detected from the server's ``GET /models`` listing (``owned_by``):

- OpenAI: ``response_format={"type": "json_schema", ...}``, ``max_completion_tokens``, native ``n``.
- llama-cpp-python's server (``python -m llama_cpp.server``) and llama.cpp's ``llama-server``:
  ``response_format={"type": "json_object", "schema": ...}`` (the first answers HTTP 500 to ``json_schema``);
  ``n`` is ignored, so the missing samples are requested one by one; llama-cpp-python's server also ignores
  ``tool_choice="required"``, which is then asked for as JSON ``{"name", "arguments"}`` through the response format.
- vLLM: ``json_schema`` and native ``n``; Ollama: ``json_schema``, one sample per request.

An unknown server starts as OpenAI-like; if it rejects a ``json_schema`` response format it is switched to
``json_object`` + schema, and if it returns fewer than ``n`` choices the rest are requested one at a time.

A server's context window (``OpenAIBackend.context_window``) is read from the server on first use, so a harness
fits its prompts to the same window through a server as in process (``lm.context_window``): from the model's entry in
``GET /models`` (vLLM's ``max_model_len``, or ``context_length`` / ``context_window``), from llama.cpp's ``GET /props``
(``n_ctx``), and from llama-cpp-python's server, which says it nowhere, by asking it for a prompt longer than any
context it can hold: it refuses after tokenising, before computing anything, with its window in the refusal. A
refusal for a prompt too long (HTTP 400, "maximum context length is N tokens") raises ``ContextOverflow``, as the
embedded model does, and teaches the backend the window. OpenAI's own API says no window: ``None``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from metaharness.errors import ConfigurationError, InputError
from metaharness.json_types import JSONObject
from metaharness.models.protocol import (
    ChatRequest,
    ChatResult,
    Choice,
    ContextOverflow,
    TokenLogprob,
    ToolCall,
    UnsupportedFeature,
    Usage,
)
from metaharness.models.retry import Transport, backend_slots, sdk_error
from metaharness.models.spec import ModelSpec
from metaharness.models.structured import tool_call_from_text, tool_call_schema, tools_prompt

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion
    from openai.types.chat.chat_completion import Choice as CompletionChoice


@dataclass(frozen=True)
class Dialect:
    """How one kind of server wants a request: ``schema_format`` is ``"json_schema"`` (OpenAI's
    ``{"type": "json_schema", "json_schema": {...}}``) or ``"json_object"`` (``{"type": "json_object", "schema":
    ...}``); ``native_n`` says whether one request returns ``n`` samples; ``tool_required`` whether
    ``tool_choice="required"`` is honoured (else it is emulated with a response format); ``temperature`` is False
    for models that accept only their default temperature (OpenAI's reasoning models answer HTTP 400 to any
    other)."""

    name: str
    schema_format: str = "json_schema"
    max_tokens_field: str = "max_tokens"
    native_n: bool = True
    temperature: bool = True
    tool_required: bool = True


DIALECTS: dict[str, Dialect] = {
    "openai": Dialect("openai", "json_schema", "max_completion_tokens", True),
    "vllm": Dialect("vllm", "json_schema", "max_tokens", True),
    "ollama": Dialect("ollama", "json_schema", "max_tokens", False),
    "llama-cpp-python": Dialect("llama-cpp-python", "json_object", "max_tokens", False, tool_required=False),
    "llama.cpp": Dialect("llama.cpp", "json_object", "max_tokens", False),
    "generic": Dialect("generic", "json_schema", "max_tokens", True),
}

# ``owned_by`` of the first entry of ``GET /models`` -> dialect.
_OWNED_BY = {"me": "llama-cpp-python", "llamacpp": "llama.cpp", "vllm": "vllm", "library": "ollama", "ollama": "ollama"}

log = logging.getLogger("metaharness.models")
# How servers word a refusal of a prompt longer than the context (OpenAI, vLLM, llama-cpp-python; llama.cpp).
_OVERFLOW = re.compile(r"maximum context length is (\d+)|context (?:size|window|length)[^0-9]{0,40}\(?(\d+)", re.I)
# Fields of a model's entry in ``GET /models`` that give its context window (vLLM; OpenRouter, LM Studio and others).
_WINDOW_FIELDS = ("max_model_len", "context_length", "context_window")
# Words of the prompt that asks llama-cpp-python's server for its window: more tokens than any context it can hold,
# so it is refused after tokenising (about a second), never computed.
PROBE_WORDS = 1 << 20


def overflow_window(message: str) -> int | None:
    """The context window a server's refusal of a too-long prompt states (None: the message is no such refusal)."""
    found = _OVERFLOW.search(message)
    return int(found.group(1) or found.group(2)) if found else None


def listed_window(entry: object) -> int | None:
    """The context window a model's entry in ``GET /models`` states, if any (``_WINDOW_FIELDS``)."""
    extra = getattr(entry, "model_extra", None) or {}
    for name in _WINDOW_FIELDS:
        value = extra.get(name, getattr(entry, name, None))
        if isinstance(value, int) and value > 0:
            return value
    return None


def tool_call_to_openai(call: ToolCall | dict[str, Any]) -> JSONObject:
    """A ``ToolCall`` (or its dict form) as OpenAI's assistant ``tool_calls`` entry."""
    if isinstance(call, ToolCall):
        call = {"id": call.id, "name": call.name, "arguments": call.arguments}
    if "function" in call:  # already in OpenAI's shape
        return call
    return {
        "id": call["id"],
        "type": "function",
        "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
    }


def _messages(request: ChatRequest) -> list[JSONObject]:
    out: list[JSONObject] = []
    for message in request.messages:
        item = {k: v for k, v in message.items() if k in ("role", "content", "name", "tool_call_id")}
        if message.get("tool_calls"):
            item["tool_calls"] = [tool_call_to_openai(c) for c in message["tool_calls"]]
            item.setdefault("content", None)
        out.append(item)
    return out


def _response_format(schema: JSONObject, dialect: Dialect) -> JSONObject:
    if dialect.schema_format == "json_object":
        return {"type": "json_object", "schema": schema}
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": False}}


def _emulates_required_tool(request: ChatRequest, dialect: Dialect) -> bool:
    return bool(request.tools) and request.tool_choice == "required" and not dialect.tool_required


def _with_system_note(messages: list[JSONObject], note: str) -> list[JSONObject]:
    if messages and messages[0]["role"] == "system":
        return [{**messages[0], "content": f"{messages[0].get('content') or ''}\n\n{note}"}, *messages[1:]]
    return [{"role": "system", "content": note}, *messages]


class OpenAIBackend:
    def __init__(self, spec: ModelSpec, transport: Transport, *, server: str | None = None, api_key: str | None = None):
        self.spec = spec
        self.retry = transport.retry
        base_url = spec.base_url or os.environ.get("OPENAI_BASE_URL") or None
        hosted = base_url is None or "api.openai.com" in base_url
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if hosted and not key:
            raise ConfigurationError(
                f"'{spec}' needs an OpenAI API key: set the environment variable OPENAI_API_KEY "
                f"(or name an OpenAI-compatible server with openai:{spec.model}@http://HOST:PORT/v1)."
            )
        # The SDK is heavy: loaded on first use.
        import openai

        if server is not None and server not in DIALECTS:
            raise InputError(f"Unknown server kind '{server}': use one of {', '.join(DIALECTS)}.")
        self.client = openai.OpenAI(
            api_key=key or "no-key-needed",
            base_url=base_url,
            timeout=transport.timeout,
            max_retries=0,
            http_client=transport.http_client,
        )
        self.base_url = str(self.client.base_url).rstrip("/")
        self.dialect: Dialect | None = DIALECTS[server or "openai"] if (server or hosted) else None
        self.hosted = hosted
        self._detect_lock = threading.Lock()
        self._window_lock = threading.Lock()
        self._window: int | None = None
        self._window_known = False  # read from the server (or learnt from a refusal), even if it says none
        self.slots = backend_slots(f"openai@{self.base_url}", transport.max_concurrency)

    # -- server differences -------------------------------------------------------------------------------------

    def _current_dialect(self) -> Dialect:
        with self._detect_lock:
            if self.dialect is None:
                listing = self.retry.run(lambda: self.client.models.list(), classify=self._classify, slots=self.slots)
                owned_by = next((getattr(m, "owned_by", None) for m in listing.data), None)
                self.dialect = DIALECTS[_OWNED_BY.get(str(owned_by).lower(), "generic")]
            return self.dialect

    def _adapt(self, **changes: Any) -> None:
        with self._detect_lock:
            if self.dialect is not None:
                self.dialect = replace(self.dialect, **changes)

    # -- the context window -------------------------------------------------------------------------------------

    @property
    def context_window(self) -> int | None:
        """The served model's context window in tokens, read from the server once (see the module docstring);
        ``None`` when the server does not say, or cannot be asked now (asked again next time)."""
        with self._window_lock:
            if not self._window_known:
                try:
                    self._window = self._read_window()
                    self._window_known = True
                except Exception as exc:  # noqa: BLE001 - unknown is an answer; the call itself reports the server
                    log.warning("could not read the context window of %s from %s: %s", self.spec, self.base_url, exc)
            return self._window

    def _learn_window(self, window: int) -> None:
        with self._window_lock:
            self._window, self._window_known = window, True

    def _read_window(self) -> int | None:
        if self.hosted:
            return None
        listing = self.retry.run(lambda: self.client.models.list(), classify=self._classify, slots=self.slots)
        entries = list(listing.data)
        entry = next((m for m in entries if m.id == self.spec.model), entries[0] if entries else None)
        window = listed_window(entry)
        if window is not None:
            return window
        name = self._current_dialect().name
        if name == "llama.cpp":
            return self._props_window()
        if name == "llama-cpp-python":
            return self._probe_window()
        return None

    def _props_window(self) -> int | None:
        """llama.cpp's ``GET /props`` (at the server's root): ``default_generation_settings.n_ctx``."""
        root = self.base_url.removesuffix("/v1")
        props = self.client.get(f"{root}/props", cast_to=object)
        settings = props.get("default_generation_settings", {}) if isinstance(props, dict) else {}
        value = settings.get("n_ctx", props.get("n_ctx") if isinstance(props, dict) else None)
        return value if isinstance(value, int) and value > 0 else None

    def _probe_window(self) -> int | None:
        """llama-cpp-python's server: a prompt of ``PROBE_WORDS`` words, refused with the window in the refusal."""
        # The SDK is heavy: loaded on first use.
        import openai

        try:
            self.client.chat.completions.create(
                model=self.spec.model,
                messages=[{"role": "user", "content": " 0" * PROBE_WORDS}],
                max_tokens=1,
                timeout=120.0,
            )
        except openai.BadRequestError as exc:
            return overflow_window(str(exc.message))
        return None  # it holds a million tokens: no window to fit

    # -- requests -----------------------------------------------------------------------------------------------

    def _params(self, request: ChatRequest, dialect: Dialect, n: int, seed: int | None) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.spec.model,
            "messages": _messages(request),
            dialect.max_tokens_field: request.max_tokens,
        }
        if dialect.temperature:
            params["temperature"] = request.temperature
        if n > 1:
            params["n"] = n
        if request.stop:
            params["stop"] = request.stop
        if seed is not None:
            params["seed"] = seed
        if request.logprobs is not None:
            params["logprobs"] = True
            params["top_logprobs"] = request.logprobs
        if request.json_schema is not None:
            params["response_format"] = _response_format(request.json_schema, dialect)
        if _emulates_required_tool(request, dialect):
            # The server ignores tool_choice="required": ask for {"name", "arguments"} JSON of one of the tools.
            params["messages"] = _with_system_note(params["messages"], tools_prompt(request.tools or [], "*"))
            params["response_format"] = _response_format(tool_call_schema(request.tools or []), dialect)
        elif request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in request.tools
            ]
            if request.tool_choice in ("auto", "none", "required"):
                params["tool_choice"] = request.tool_choice
            elif request.tool_choice is not None:
                params["tool_choice"] = {"type": "function", "function": {"name": request.tool_choice}}
        return params

    def _send(self, request: ChatRequest, n: int, seed: int | None) -> ChatCompletion:
        # The SDK is heavy: loaded on first use.
        import openai

        def attempt() -> ChatCompletion:
            dialect = self._current_dialect()
            try:
                return self.client.chat.completions.create(**self._params(request, dialect, n, seed))
            except (openai.BadRequestError, openai.UnprocessableEntityError, openai.InternalServerError) as exc:
                window = overflow_window(str(exc.message)) if exc.status_code == 400 else None
                if window is not None:  # refused before computing anything: nothing spent
                    self._learn_window(window)
                    raise ContextOverflow(
                        f"The prompt does not fit the context of {self.spec} ({window} tokens): {exc.message}",
                        window,
                    ) from exc
                if exc.status_code == 400 and dialect.temperature and "temperature" in str(exc.message).lower():
                    # A model that takes only its default temperature: stop sending one.
                    self._adapt(temperature=False)
                elif (
                    request.json_schema is not None
                    and dialect.schema_format == "json_schema"
                    and dialect.name != "openai"
                ):
                    # A server that does not know OpenAI's json_schema format: switch to json_object + schema.
                    self._adapt(schema_format="json_object")
                else:
                    raise
                return self.client.chat.completions.create(**self._params(request, self._current_dialect(), n, seed))

        return self.retry.run(attempt, classify=self._classify, slots=self.slots)

    def complete(self, request: ChatRequest) -> ChatResult:
        start = time.perf_counter()
        dialect = self._current_dialect()
        responses = [self._send(request, request.n if dialect.native_n else 1, request.seed)]
        got = len(responses[0].choices)
        if got < request.n and dialect.native_n and request.n > 1:
            self._adapt(native_n=False)  # the server ignored n: ask for the rest one at a time from now on
        while got < request.n:
            seed = None if request.seed is None else request.seed + got
            responses.append(self._send(request, 1, seed))
            got += len(responses[-1].choices)
        choices = [self._choice(c, request, dialect) for r in responses for c in r.choices][: request.n]
        usage = Usage()
        for r in responses:
            if r.usage is not None:
                details = getattr(r.usage, "prompt_tokens_details", None)
                cached = getattr(details, "cached_tokens", None) or 0
                usage = usage + Usage(r.usage.prompt_tokens, r.usage.completion_tokens, cached)
        return ChatResult(
            choices=choices,
            usage=usage,
            latency_s=time.perf_counter() - start,
            model=responses[0].model or self.spec.model,
            raw_id=responses[0].id,
        )

    def _choice(self, raw: CompletionChoice, request: ChatRequest, dialect: Dialect) -> Choice:
        message = raw.message
        choice = Choice(text=message.content or "", finish_reason=raw.finish_reason)
        for call in message.tool_calls or []:
            function = getattr(call, "function", None)
            if function is None:
                continue
            try:
                arguments = json.loads(function.arguments or "{}")
            except json.JSONDecodeError:
                arguments = None
            if isinstance(arguments, dict):
                choice.tool_calls.append(ToolCall(call.id, function.name, arguments))
            else:  # keep the broken arguments visible for the repair request
                choice.text = choice.text or function.arguments or ""
        if _emulates_required_tool(request, dialect):
            written = tool_call_from_text(choice.text, request)
            if written is not None:
                choice.tool_calls, choice.text, choice.finish_reason = [written], "", "tool_calls"
        if request.logprobs is not None:
            content = getattr(raw.logprobs, "content", None) if raw.logprobs is not None else None
            if content is None:
                raise UnsupportedFeature(
                    f"The server at {self.base_url} returned no log-probabilities for {self.spec.model}; use a "
                    f"server that supports chat logprobs (OpenAI, vLLM, llama.cpp) or a local: model."
                )
            choice.logprobs = [
                TokenLogprob(
                    item.token,
                    item.logprob,
                    tuple((alt.token, alt.logprob) for alt in (item.top_logprobs or [])[: request.logprobs]),
                )
                for item in content
            ]
        return choice

    # -- errors -------------------------------------------------------------------------------------------------

    def _classify(self, exc: Exception) -> Exception:
        # The SDK is heavy: loaded on first use.
        import openai

        where = f"the model server at {self.base_url}"
        hint = f" Is the server running, and is the URL in '{self.spec}' right?"
        return sdk_error(exc, openai, server=where, model=self.spec.model, key_variable="OPENAI_API_KEY", hint=hint)
