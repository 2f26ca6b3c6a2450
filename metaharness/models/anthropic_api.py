"""``anthropic:MODEL``: Anthropic's Messages API through the official SDK.

- Prompt caching: long stable prefixes (the system prompt, and the conversation up to the last message) are marked
  with ``cache_control`` so repeated proposer and subagent calls over the same context read it from the cache;
  ``Usage.cached_tokens``/``cache_write_tokens`` report ``cache_read_input_tokens``/``cache_creation_input_tokens``.
- Structured output is a forced call of a ``respond`` tool whose input schema is the requested schema (non-object
  schemas are wrapped in ``{"value": ...}``), which every Claude model supports.
- The Messages API returns one sample per request, so ``n`` samples are ``n`` requests. It offers no token
  log-probabilities (``UnsupportedFeature``), and the SDK in use sends no temperature or seed.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any, TypedDict

from metaharness.errors import ConfigurationError, InputError
from metaharness.json_types import JSONObject
from metaharness.models.protocol import ChatRequest, ChatResult, Choice, ToolCall, UnsupportedFeature, Usage
from metaharness.models.retry import Transport, backend_slots, sdk_error
from metaharness.models.spec import ModelSpec

if TYPE_CHECKING:
    from anthropic.types import Message

# Mark prompts at least this long (about 1k tokens, the smallest cacheable prefix) for prompt caching.
CACHE_MIN_CHARS = 4000
RESPOND_TOOL = "respond"
_CACHE: JSONObject = {"type": "ephemeral"}
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}


class _Turn(TypedDict):
    """One Anthropic message: its role and content blocks."""

    role: str
    content: list[JSONObject]


def _text_blocks(text: str) -> list[JSONObject]:
    return [{"type": "text", "text": text}] if text else []


def _tool_use(call: ToolCall | dict[str, Any]) -> JSONObject:
    if isinstance(call, ToolCall):
        return {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
    if "function" in call:  # OpenAI's shape
        arguments = call["function"]["arguments"]
        return {
            "type": "tool_use",
            "id": call["id"],
            "name": call["function"]["name"],
            "input": json.loads(arguments) if isinstance(arguments, str) else arguments,
        }
    return {"type": "tool_use", "id": call["id"], "name": call["name"], "input": call["arguments"]}


def to_messages(request: ChatRequest) -> tuple[list[JSONObject], list[_Turn]]:
    """OpenAI-style messages -> (system blocks, Anthropic messages), with cache breakpoints on long prompts."""
    system_text = "\n\n".join(m.get("content") or "" for m in request.messages if m["role"] == "system")
    turns: list[_Turn] = []
    for message in request.messages:
        role = message["role"]
        if role == "system":
            continue
        content = message.get("content") or ""
        if role == "assistant":
            blocks = _text_blocks(content) + [_tool_use(c) for c in message.get("tool_calls") or []]
        elif role == "tool":
            role = "user"
            blocks = [{"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": content}]
        else:
            blocks = _text_blocks(content) if isinstance(content, str) else list(content)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    system = _text_blocks(system_text)
    if len(system_text) >= CACHE_MIN_CHARS:
        system[-1]["cache_control"] = _CACHE
    total = len(system_text) + sum(len(json.dumps(t["content"])) for t in turns)
    if total >= CACHE_MIN_CHARS and turns and turns[-1]["content"]:
        turns[-1]["content"][-1]["cache_control"] = _CACHE
    return system, turns


def _respond_schema(schema: JSONObject) -> tuple[JSONObject, bool]:
    """The ``respond`` tool's input schema, and whether the answer is wrapped in ``{"value": ...}``."""
    if schema.get("type") == "object":
        return schema, False
    return {"type": "object", "properties": {"value": schema}, "required": ["value"]}, True


class AnthropicBackend:
    def __init__(self, spec: ModelSpec, transport: Transport, *, api_key: str | None = None):
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key and not os.environ.get("ANTHROPIC_AUTH_TOKEN") and not os.environ.get("ANTHROPIC_PROFILE"):
            raise ConfigurationError(
                f"'{spec}' needs an Anthropic API key: set the environment variable ANTHROPIC_API_KEY."
            )
        # The SDK is heavy: loaded on first use.
        import anthropic

        self.spec = spec
        self.retry = transport.retry
        # api_key=None lets the SDK find the token or profile the check above saw.
        self.client = anthropic.Anthropic(
            api_key=key, timeout=transport.timeout, max_retries=0, http_client=transport.http_client
        )
        self.base_url = str(self.client.base_url).rstrip("/")
        self.slots = backend_slots(f"anthropic@{self.base_url}", transport.max_concurrency)

    def _params(self, request: ChatRequest) -> tuple[dict[str, Any], bool]:
        system, messages = to_messages(request)
        params: dict[str, Any] = {"model": self.spec.model, "max_tokens": request.max_tokens, "messages": messages}
        if system:
            params["system"] = system
        if request.stop:
            params["stop_sequences"] = request.stop
        wrapped = False
        if request.json_schema is not None:
            if request.tools:
                raise InputError(f"{self.spec}: a request takes either json_schema or tools, not both.")
            schema, wrapped = _respond_schema(request.json_schema)
            params["tools"] = [
                {
                    "name": RESPOND_TOOL,
                    "description": "Give the answer in the required structure.",
                    "input_schema": schema,
                }
            ]
            params["tool_choice"] = {"type": "tool", "name": RESPOND_TOOL}
        elif request.tools:
            params["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in request.tools
            ]
            choice = request.tool_choice
            if choice in (None, "auto"):
                params["tool_choice"] = {"type": "auto"}
            elif choice == "required":
                params["tool_choice"] = {"type": "any"}
            elif choice == "none":
                params["tool_choice"] = {"type": "none"}
            else:
                params["tool_choice"] = {"type": "tool", "name": choice}
        return params, wrapped

    def complete(self, request: ChatRequest) -> ChatResult:
        if request.logprobs is not None:
            raise UnsupportedFeature(
                f"{self.spec}: Anthropic's API gives no token log-probabilities. Sample several answers (n > 1) "
                f"to estimate uncertainty, or use an openai:/local: model for log-probabilities."
            )
        start = time.perf_counter()
        params, wrapped = self._params(request)
        replies = [
            self.retry.run(lambda: self.client.messages.create(**params), classify=self._classify, slots=self.slots)
            for _ in range(request.n)
        ]
        usage = Usage()
        for reply in replies:
            read = reply.usage.cache_read_input_tokens or 0
            write = reply.usage.cache_creation_input_tokens or 0
            usage = usage + Usage(reply.usage.input_tokens + read + write, reply.usage.output_tokens, read, write)
        return ChatResult(
            choices=[self._choice(reply, request, wrapped) for reply in replies],
            usage=usage,
            latency_s=time.perf_counter() - start,
            model=replies[0].model,
            raw_id=replies[0].id,
        )

    @staticmethod
    def _choice(message: Message, request: ChatRequest, wrapped: bool) -> Choice:
        text = "".join(block.text for block in message.content if block.type == "text")
        calls = [ToolCall(b.id, b.name, dict(b.input)) for b in message.content if b.type == "tool_use"]
        reason = message.stop_reason
        choice = Choice(text=text, finish_reason=None if reason is None else _FINISH.get(reason, reason))
        if request.json_schema is not None:
            answer = next((c.arguments for c in calls if c.name == RESPOND_TOOL), None)
            if answer is not None:
                choice.text = json.dumps(answer.get("value") if wrapped else answer)
                choice.finish_reason = "stop"
        else:
            choice.tool_calls = calls
        return choice

    def _classify(self, exc: Exception) -> Exception:
        # The SDK is heavy: loaded on first use.
        import anthropic

        if isinstance(exc, getattr(anthropic, "CredentialsError", ())):
            return ConfigurationError(f"No usable Anthropic credentials ({exc}); set ANTHROPIC_API_KEY.")
        where = f"Anthropic's API at {self.base_url}"
        return sdk_error(exc, anthropic, server=where, model=self.spec.model, key_variable="ANTHROPIC_API_KEY")
