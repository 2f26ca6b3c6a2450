"""What model tokens cost, in US dollars per million tokens.

The built-in table holds the providers' published list prices for the models listed below (newer models, e.g. the
Claude 5 and GPT-5.x families, are not in it and count as unpriced until added); a user extends or overrides it
with a JSON or TOML file named by ``$METAHARNESS_PRICES`` (or passed to ``PriceTable.load``)::
    {"openai:gpt-5.4-mini": {"input": 0.25, "output": 2.0, "cache_read": 0.025},
     "openai:gpt-oss-20b@http://gpu-box:8000/v1": {"input": 0.05, "output": 0.2}}

Keys are ``provider:model`` (a dated snapshot such as ``claude-sonnet-4-5-20250929`` uses its base entry) or a full
spec. The embedded model and self-hosted OpenAI-compatible servers cost nothing unless priced; a hosted model with
no price is *unpriced*: its tokens are counted, its dollars are not, and a dollar cap refuses to run it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metaharness.errors import ConfigurationError
from metaharness.models.protocol import Usage
from metaharness.models.spec import ModelSpec, parse_spec

if sys.version_info >= (3, 11):
    import tomllib

PRICES_ENV = "METAHARNESS_PRICES"


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens; ``cache_read``/``cache_write`` default to the input price."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def dollars(self, usage: Usage) -> float:
        cache_read = self.input if self.cache_read is None else self.cache_read
        cache_write = self.input if self.cache_write is None else self.cache_write
        fresh = max(usage.input_tokens - usage.cached_tokens - usage.cache_write_tokens, 0)
        total = (
            fresh * self.input
            + usage.cached_tokens * cache_read
            + usage.cache_write_tokens * cache_write
            + usage.output_tokens * self.output
        )
        return total / 1_000_000


FREE = Price(0.0, 0.0)

BUILTIN_PRICES: dict[str, Price] = {
    # Anthropic (cache_write: 5-minute cache writes).
    "anthropic:claude-opus-4-6": Price(5.0, 25.0, 0.50, 6.25),
    "anthropic:claude-opus-4-5": Price(5.0, 25.0, 0.50, 6.25),
    "anthropic:claude-opus-4-1": Price(15.0, 75.0, 1.50, 18.75),
    "anthropic:claude-opus-4": Price(15.0, 75.0, 1.50, 18.75),
    "anthropic:claude-sonnet-4-6": Price(3.0, 15.0, 0.30, 3.75),
    "anthropic:claude-sonnet-4-5": Price(3.0, 15.0, 0.30, 3.75),
    "anthropic:claude-sonnet-4": Price(3.0, 15.0, 0.30, 3.75),
    "anthropic:claude-haiku-4-5": Price(1.0, 5.0, 0.10, 1.25),
    "anthropic:claude-3-5-haiku": Price(0.80, 4.0, 0.08, 1.0),
    # OpenAI (cache_read: cached input).
    "openai:gpt-5": Price(1.25, 10.0, 0.125),
    "openai:gpt-5-mini": Price(0.25, 2.0, 0.025),
    "openai:gpt-5-nano": Price(0.05, 0.40, 0.005),
    "openai:gpt-4.1": Price(2.0, 8.0, 0.50),
    "openai:gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "openai:gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "openai:gpt-4o": Price(2.50, 10.0, 1.25),
    "openai:gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "openai:o3": Price(2.0, 8.0, 0.50),
    "openai:o4-mini": Price(1.10, 4.40, 0.275),
}

# A dated snapshot ("claude-sonnet-4-5-20250929", "gpt-4.1-2025-04-14") is priced like its base model.
_SNAPSHOT = re.compile(r"-\d{4}-?\d{2}-?\d{2}$")


def _read_toml(text: str, file: Path) -> Any:
    """TOML price files need Python 3.11's ``tomllib``; on 3.10 the error says to use JSON instead."""
    if sys.version_info >= (3, 11):
        return tomllib.loads(text)
    raise ConfigurationError(f"The price file {file} is TOML, which needs Python 3.11 or later; use a JSON file.")


class PriceTable:
    """Built-in prices, overridden by the file in ``$METAHARNESS_PRICES`` and by ``load``/``set``."""

    def __init__(self, prices: dict[str, Price] | None = None, *, use_env: bool = True):
        self._prices = dict(BUILTIN_PRICES if prices is None else prices)
        if use_env and os.environ.get(PRICES_ENV):
            self.load(os.environ[PRICES_ENV])

    def set(self, key: str, price: Price) -> None:
        self._prices[key] = price

    def load(self, path: str | os.PathLike[str]) -> None:
        """Merge a JSON or TOML file of ``{"provider:model": {"input": .., "output": .., ...}}``."""
        file = Path(path).expanduser()
        try:
            text = file.read_text()
        except OSError as exc:
            raise ConfigurationError(
                f"Cannot read the price file {file} (from {PRICES_ENV} or --prices): {exc}"
            ) from exc
        try:
            data = _read_toml(text, file) if file.suffix == ".toml" else json.loads(text)
        except ValueError as exc:
            raise ConfigurationError(f"The price file {file} is not valid {file.suffix or 'JSON'}: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigurationError(f"The price file {file} must map model specs to prices.")
        for key, entry in data.items():
            try:
                self._prices[key] = Price(**entry)
            except TypeError as exc:
                raise ConfigurationError(
                    f"Price for '{key}' in {file} must be an object with input, output and optionally cache_read, "
                    f"cache_write (dollars per million tokens): {exc}"
                ) from exc

    def lookup(self, spec: str | ModelSpec) -> Price | None:
        """The price of a spec, ``FREE`` for local and self-hosted models, None when unknown."""
        parsed = parse_spec(spec) if isinstance(spec, str) else spec
        for key in (
            str(parsed),
            f"{parsed.provider}:{parsed.model}",
            f"{parsed.provider}:{_SNAPSHOT.sub('', parsed.model)}",
        ):
            if key in self._prices:
                return self._prices[key]
        if parsed.provider == "local" or parsed.base_url:
            return FREE
        return None
