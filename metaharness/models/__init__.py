"""Model clients: one chat-completion interface over every backend (see :mod:`metaharness.models.types`)."""

from metaharness.models.embedded import DEFAULT_TASK_MODEL_SPEC
from metaharness.models.spec import ModelSpec, parse_spec
from metaharness.models.types import (
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

__all__ = [
    "DEFAULT_TASK_MODEL_SPEC",
    "ChatRequest",
    "ChatResult",
    "Choice",
    "ModelClient",
    "ModelSpec",
    "StructuredOutputError",
    "TokenLogprob",
    "Tool",
    "ToolCall",
    "UnsupportedFeature",
    "Usage",
    "parse_spec",
]
