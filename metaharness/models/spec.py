"""Model spec strings, the contract every ``--*-model`` flag and the Python API share (``docs/model-specs.md``).

- ``anthropic:MODEL``: Anthropic's API (``ANTHROPIC_API_KEY``).
- ``openai:MODEL``: OpenAI's API (``OPENAI_API_KEY``; ``OPENAI_BASE_URL`` honoured).
- ``openai:MODEL@http://host:port/v1``: any OpenAI-compatible server (vLLM, llama.cpp's server, Ollama).
- ``local:NAME``: the embedded model, in-process, no key and no network (NAME registered or a .gguf path).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

from metaharness.errors import InputError

PROVIDERS = ("anthropic", "openai", "local")


@dataclass(frozen=True)
class ModelSpec:
    provider: str
    model: str
    base_url: str | None = None

    def __str__(self) -> str:
        suffix = f"@{self.base_url}" if self.base_url else ""
        return f"{self.provider}:{self.model}{suffix}"


def parse_spec(text: str) -> ModelSpec:
    """Parse ``PROVIDER:MODEL[@BASE_URL]``; raise ``InputError`` with an example when malformed.

    >>> parse_spec("openai:qwen@http://127.0.0.1:8080/v1")
    ModelSpec(provider='openai', model='qwen', base_url='http://127.0.0.1:8080/v1')
    """
    examples = (
        "e.g. anthropic:claude-sonnet-4-5, openai:gpt-4.1-mini, openai:gpt-oss-20b@http://localhost:8000/v1, "
        "local:smollm2-135m"
    )
    provider, sep, rest = text.strip().partition(":")
    if not sep or not rest:
        raise InputError(f"Model spec '{text}' is not PROVIDER:MODEL ({examples}).")
    provider = provider.lower()
    if provider not in PROVIDERS:
        raise InputError(
            f"Unknown model provider '{provider}' in '{text}': use one of {', '.join(PROVIDERS)} ({examples})."
        )
    base_url = None
    model = rest
    if provider != "local" and "@" in rest:
        model, _, base_url = rest.rpartition("@")
        parsed = urlparse(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise InputError(
                f"Base URL '{base_url}' in '{text}' is not an http(s) URL such as http://127.0.0.1:8080/v1."
            )
        if provider != "openai":
            raise InputError(f"Only openai: specs take an @base_url (any OpenAI-compatible server); got '{text}'.")
    if not model:
        raise InputError(f"Model spec '{text}' names no model ({examples}).")
    return ModelSpec(provider, model, base_url)
