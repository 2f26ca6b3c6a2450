"""The harness program: the contract every candidate (seed or model-written) is held to, and the ``lm`` it gets.

A harness is one Python file (stored as ``HARNESS_FILE`` in a candidate's commit) that defines
``class Harness``. ``CONTRACT`` is the contract in full, as the coding proposer's workspace shows it to a
model; ``Harness`` states it as a protocol and ``LM`` is the ``lm`` every harness receives (the sandbox
worker, ``metaharness.evaluation.worker``, only connects it to the evaluator). This module uses the standard
library only, because the sandbox process imports it.

Harness code is untrusted: it runs in a separate confined process with time, memory and call limits and no
secrets (see ``metaharness.evaluation``). An exception in ``__init__`` fails the candidate (the error is kept
for the proposer); an exception in ``predict``, a timeout or a non-string answer scores that example 0 with the
error in its trace. ``learn`` is never called on a scored split, so no gold answer flows back into a harness
during evaluation: a harness that wants memory builds it from ``train``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, TypedDict, runtime_checkable

if TYPE_CHECKING:  # a type only: this module imports the standard library alone
    from metaharness.json_types import JSONValue

HARNESS_FILE = "harness.py"

CONTRACT = """\
One Python file defining `class Harness` with `__init__(self, lm, train)` and `predict(self, x: str) -> str`
(optionally `learn(self, results)`). `train` is the task's training split as a list of {"id", "input", "target"}
dicts; `x` is one example's raw input; `predict` returns the answer text the task's metric reads.
`lm` is the only way to reach the task model, and every call is recorded in the trace:
- `lm(prompt_or_messages, *, system=None, max_tokens=512, temperature=0.0, stop=None) -> str`: one completion;
  `prompt_or_messages` is a user prompt string or OpenAI-style messages [{"role", "content"}, ...];
- `lm.json(prompt_or_messages, schema, *, system=None, max_tokens=512)`: output constrained to a JSON schema,
  returned parsed;
- `lm.context_window`: the model's context size in tokens (prompt + answer must fit);
- `lm.Error`: the exception a failed call raises (bad arguments, context overflow, call limit).
Only the standard library is available; the file runs sandboxed, without network or secrets."""


class TrainItem(TypedDict):
    """One training example as a harness receives it."""

    id: str
    input: str
    target: str


class LMError(RuntimeError):
    """A task-model call failed (bad arguments, context overflow, model error, call limit); a harness may catch it."""


class LMReply(TypedDict, total=False):
    """What a model call answers: ``text`` and ``parsed`` (JSON-schema calls), or ``error``."""

    text: str
    parsed: JSONValue
    error: str


# How an LM reaches the task model: a JSON request {"messages", options...} in (the callee serialises it),
# {"text", "parsed"} or {"error": text} out. The sandbox worker sends it to the evaluator's proxy over its pipe.
ModelCall = Callable[[Mapping[str, object]], LMReply]


class LM:
    """The task model as a harness sees it (the ``lm`` of ``CONTRACT``), over a ``ModelCall``.

    This class is the whole harness-facing API; the sandbox worker (``metaharness.evaluation.worker``) only
    supplies the model call, and the evaluator's proxy checks, runs and records every call. Temperature 0 is the
    default and what the evaluation protocol uses; calls are cached, so a re-evaluation is free and identical.
    """

    Error = LMError

    def __init__(self, call_model: ModelCall, context_window: int) -> None:
        self._call_model = call_model
        self.context_window = context_window

    def __call__(
        self,
        prompt_or_messages: str | Sequence[Mapping[str, object]],
        *,
        system: str | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        stop: list[str] | None = None,
    ) -> str:
        """One completion of a user prompt (str) or OpenAI-style messages (``[{"role", "content"}, ...]``)."""
        request = _request(prompt_or_messages, system, max_tokens=max_tokens, temperature=temperature, stop=stop)
        return str(self._send(request)["text"])

    def json(
        self,
        prompt_or_messages: str | Sequence[Mapping[str, object]],
        schema: Mapping[str, object],
        *,
        system: str | None = None,
        max_tokens: int = 512,
    ) -> JSONValue:
        """Output constrained to the JSON ``schema``, returned parsed (validated by the model client)."""
        request = _request(prompt_or_messages, system, max_tokens=max_tokens, json_schema=schema)
        return self._send(request)["parsed"]

    def _send(self, request: Mapping[str, object]) -> LMReply:
        try:
            json.dumps(request)
        except (TypeError, ValueError) as exc:
            raise LMError(f"lm() arguments must be JSON data: {exc}") from None
        reply = self._call_model(request)
        error = reply.get("error")
        if error:
            raise LMError(error)
        return reply


def _request(prompt_or_messages: object, system: str | None, **options: object) -> dict[str, object]:
    messages: list[dict[object, object]]
    if isinstance(prompt_or_messages, str):
        messages = [{"role": "user", "content": prompt_or_messages}]
    elif isinstance(prompt_or_messages, list) and all(isinstance(m, dict) for m in prompt_or_messages):
        messages = [dict(m) for m in prompt_or_messages]
    else:
        raise LMError("lm() takes a prompt string or a list of {'role', 'content'} message dicts")
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    return {"messages": messages, **options}


@runtime_checkable
class Harness(Protocol):
    """A candidate program's ``Harness`` class, once constructed as ``Harness(lm, train)`` (see ``CONTRACT``)."""

    def predict(self, x: str) -> str: ...
