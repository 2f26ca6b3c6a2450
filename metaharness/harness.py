"""The harness program: the contract every candidate (seed or model-written) is held to, and the ``lm`` it gets.

A harness is one Python file (stored as :data:`HARNESS_FILE` in a candidate's commit) that defines
``class Harness``. :data:`CONTRACT` is the contract in full, as the coding proposer's workspace shows it to a
model; :class:`Harness` and :class:`LM` state it as protocols. The sandbox worker
(:mod:`metaharness.evaluation.worker`) is the one implementation of :class:`LM`.

Harness code is untrusted: it runs in a separate confined process with time, memory and call limits and no
secrets (see :mod:`metaharness.evaluation`). An exception in ``__init__`` fails the candidate (the error is kept
for the proposer); an exception in ``predict``, a timeout or a non-string answer scores that example 0 with the
error in its trace. ``learn`` is never called on a scored split, so no gold answer flows back into a harness
during evaluation: a harness that wants memory builds it from ``train``.
"""

from __future__ import annotations

from typing import Any, Protocol, TypedDict, runtime_checkable

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


@runtime_checkable
class LM(Protocol):
    """The task model as a harness sees it (see :data:`CONTRACT`)."""

    context_window: int
    Error: type[Exception]

    def __call__(
        self,
        prompt_or_messages: str | list[dict[str, Any]],
        *,
        system: str | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        stop: list[str] | None = None,
    ) -> str: ...

    def json(
        self,
        prompt_or_messages: str | list[dict[str, Any]],
        schema: dict[str, Any],
        *,
        system: str | None = None,
        max_tokens: int = 512,
    ) -> Any: ...


@runtime_checkable
class Harness(Protocol):
    """A candidate program's ``Harness`` class, once constructed as ``Harness(lm, train)`` (see :data:`CONTRACT`)."""

    def predict(self, x: str) -> str: ...
