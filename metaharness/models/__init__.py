"""Model clients: one chat-completion interface over every backend (see ``metaharness.models.protocol``).

``connect(spec)`` returns a ``ModelClient`` for ``anthropic:MODEL``, ``openai:MODEL[@BASE_URL]`` or
``local:NAME``, with the response cache, the cost ledger and structured-output checks around it.
"""

from metaharness.models.cache import ResponseCache
from metaharness.models.client import Client, connect
from metaharness.models.ledger import Ledger
from metaharness.models.local import DEFAULT_TASK_MODEL_SPEC
from metaharness.models.prices import Price, PriceTable
from metaharness.models.protocol import (
    ChatRequest,
    ChatResult,
    Choice,
    ModelClient,
    StructuredOutputError,
    TokenLogprob,
    Tool,
    ToolCall,
    UnsupportedFeature,
    Usage,
)
from metaharness.models.retry import RetriesExhausted, RetryPolicy
from metaharness.models.spec import ModelSpec, parse_spec

__all__ = [
    "DEFAULT_TASK_MODEL_SPEC",
    "ChatRequest",
    "ChatResult",
    "Choice",
    "Client",
    "Ledger",
    "ModelClient",
    "ModelSpec",
    "Price",
    "PriceTable",
    "ResponseCache",
    "RetriesExhausted",
    "RetryPolicy",
    "StructuredOutputError",
    "TokenLogprob",
    "Tool",
    "ToolCall",
    "UnsupportedFeature",
    "Usage",
    "connect",
    "parse_spec",
]
