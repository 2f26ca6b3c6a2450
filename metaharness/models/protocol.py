"""The one chat-completion contract every part of metaharness talks to.

A ``ModelClient`` turns a ``ChatRequest`` into a ``ChatResult``. The proposer, the planning
subagents, the harness task model and the benchmark agents all use this interface, whatever the backend
(Anthropic, an OpenAI-compatible server, or the embedded in-process model).

Contract of ``ModelClient.complete``:

- ``request.messages`` are OpenAI-style dicts: ``{"role": "system"|"user"|"assistant"|"tool", "content": str}``;
  an assistant turn may carry ``"tool_calls"`` (a list of ``ToolCall`` as dicts) and a tool turn carries
  ``"tool_call_id"``. Backends translate to their own wire format.
- The result holds exactly ``request.n`` choices, in order.
- With ``json_schema`` set, every choice's ``parsed`` is a JSON value that validates against the schema (after at
  most one repair request); otherwise the call raises ``StructuredOutputError``.
- With ``tool_choice`` naming a tool, every choice contains a call of exactly that tool.
- With ``logprobs`` set, every choice's ``logprobs`` lists the generated tokens with their log-probabilities
  (and up to ``logprobs`` alternatives each) where the backend offers them; a backend that cannot raises
  ``UnsupportedFeature`` instead of silently returning none.
- Failures the user can fix (missing key, unknown model, unreachable server) raise
  ``metaharness.errors.ConfigurationError``; a reached cost or token cap raises
  ``metaharness.errors.BudgetExceeded``. Transient errors (429, 5xx, timeouts) are retried inside.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from metaharness.errors import InputError, MetaharnessError

Role = Literal["proposer", "subagent", "task", "agent"]


class ContextOverflow(InputError):
    """The prompt does not fit the model's context window: the model refused the call before computing anything,
    so nothing was spent. Every backend raises it the same way (the embedded model, and a server's refusal, whose
    message also teaches the backend its window). ``window``: the context in tokens, when known."""

    def __init__(self, message: str, window: int | None = None) -> None:
        super().__init__(message)
        self.window = window


class StructuredOutputError(MetaharnessError):
    """The model's output did not match the requested JSON schema, even after one repair request."""


class UnsupportedFeature(MetaharnessError):
    """The backend cannot serve a requested feature (e.g. log-probabilities from Anthropic)."""


@dataclass(frozen=True)
class Tool:
    """A function the model may call; ``parameters`` is a JSON schema for its arguments object."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One tool call made by the model; ``arguments`` is the parsed arguments object."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class TokenLogprob:
    """A generated token with its log-probability and the most likely alternatives at that position."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass
class ChatRequest:
    """Everything that determines a completion; the response cache keys on all of it plus the model."""

    messages: list[dict[str, Any]]
    temperature: float = 0.0
    max_tokens: int = 512
    n: int = 1
    stop: list[str] | None = None
    json_schema: dict[str, Any] | None = None
    tools: list[Tool] | None = None
    # None/"auto": the model decides; "required": some tool; any other string: exactly that tool.
    tool_choice: str | None = None
    # Number of top alternatives per token to return (0 = only the chosen token); None = no log-probabilities.
    logprobs: int | None = None
    seed: int | None = None


@dataclass
class Usage:
    """Tokens of one call. ``input_tokens`` counts the whole prompt, including the part read from the provider's
    prompt cache (``cached_tokens``) and the part written to it (``cache_write_tokens``, Anthropic only)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )


@dataclass
class Choice:
    text: str
    parsed: Any = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None


@dataclass
class ChatResult:
    choices: list[Choice]
    usage: Usage
    latency_s: float
    model: str
    raw_id: str | None = None
    # ``cached``: answered by the response cache; ``charged``: counted as spent by the ledger (a call its run had not
    # made before, see metaharness.models.ledger)
    cached: bool = False
    charged: bool = True

    @property
    def text(self) -> str:
        """Text of the first choice."""
        return self.choices[0].text

    @property
    def parsed(self) -> Any:
        """Parsed JSON of the first choice (requests with ``json_schema``)."""
        return self.choices[0].parsed

    @property
    def tool_calls(self) -> list[ToolCall]:
        """Tool calls of the first choice."""
        return self.choices[0].tool_calls


@runtime_checkable
class ModelClient(Protocol):
    """A configured model: ``spec`` is the model spec string it was built from (``docs/model-specs.md``)."""

    spec: str

    def complete(self, request: ChatRequest, *, role: Role = "task") -> ChatResult:
        """Run one chat completion; ``role`` attributes tokens and cost in the ledger."""
        ...


def context_window(model: ModelClient) -> int | None:
    """The model's context window in tokens when its client (or the backend it wraps) knows it (``context_window`` or
    ``n_ctx``; a server's backend reads it from the server on first use, ``metaharness.models.openai_api``)."""
    for owner in (model, getattr(model, "backend", None)):
        for name in ("context_window", "n_ctx"):
            value = getattr(owner, name, None)
            if isinstance(value, int) and value > 0:
                return value
    return None
