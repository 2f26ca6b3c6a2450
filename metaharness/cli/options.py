"""The options that ``metaharness optimize`` and ``metaharness bench harness`` both take: one flag, one parser.

Each command words the help for itself (a run's cap is the whole run's, the grid's is split over its cells), so the
factories take the help text and fix the rest: the flag, its short form, metavar and parser.
"""

from __future__ import annotations

import json
import math
from typing import Any

import typer

from metaharness.errors import InputError


def parse_usd(option: str, text: str) -> float:
    """A dollar amount: a finite number >= 0 (else one line and exit code 2, before anything starts)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{option} takes an amount of USD >= 0 (e.g. {option} 5), got '{text}'.")
    return value


def parse_options(pairs: list[str]) -> dict[str, object]:
    """``KEY=VALUE`` strings to a dict; values are JSON when they parse (numbers, booleans), else text."""
    options: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--proposer-option takes KEY=VALUE (e.g. probe_size=4), got '{pair}'.")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def max_cost_option(help: str) -> Any:
    """``--max-cost USD``, checked by ``parse_usd`` (default: no cap)."""
    return typer.Option(None, "--max-cost", parser=lambda text: parse_usd("--max-cost", text), metavar="USD", help=help)


def proposer_option_option(help: str) -> Any:
    """``--proposer-option/-P KEY=VALUE``, repeatable; read with ``parse_options``."""
    return typer.Option([], "--proposer-option", "-P", help=help)


def dask_scheduler_option(help: str) -> Any:
    """``--dask-scheduler ADDRESS`` (default: evaluate here)."""
    return typer.Option(None, "--dask-scheduler", metavar="ADDRESS", help=help)


def ray_address_option(help: str) -> Any:
    """``--ray-address ADDRESS`` (default: evaluate here)."""
    return typer.Option(None, "--ray-address", metavar="ADDRESS", help=help)
