"""The run options that ``metaharness optimize`` and ``metaharness bench harness`` both take, and the one builder
that turns them into what a run is given (``settings_change``: a ``SettingsChange``).

Each option is declared once here: its flag, short form, metavar, parser, check and help. Where the commands mean
something different by it (a run's cost cap is the whole run's, the grid's is split over its cells; the grid
defaults some settings itself), the factory takes the help text, and the rest stays fixed.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import typer

from metaharness.budget import DEFAULT_EVALS_PER_ITER, Budget
from metaharness.errors import InputError
from metaharness.evaluation.sandbox import AVERAGE_SECONDS
from metaharness.models.local import DEFAULT_TASK_MODEL_SPEC
from metaharness.runner.settings import SettingsChange


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
    return typer.Option(
        None,
        "--max-cost",
        parser=lambda text: parse_usd("--max-cost", text),
        metavar="USD",
        help=help,
        show_default="no cap",
    )


def proposer_option_option(help: str) -> Any:
    """``--proposer-option/-P KEY=VALUE``, repeatable; read with ``parse_options``."""
    return typer.Option([], "--proposer-option", "-P", help=help)


def dask_scheduler_option(help: str) -> Any:
    """``--dask-scheduler ADDRESS`` (default: evaluate here)."""
    return typer.Option(None, "--dask-scheduler", metavar="ADDRESS", help=help, show_default="evaluate here")


def ray_address_option(help: str) -> Any:
    """``--ray-address ADDRESS`` (default: evaluate here)."""
    return typer.Option(None, "--ray-address", metavar="ADDRESS", help=help, show_default="evaluate here")


def task_model_option() -> Any:
    """``--task-model SPEC`` (default: the embedded model)."""
    return typer.Option(
        None,
        "--task-model",
        help="Model spec the harnesses call.",
        show_default=f"{DEFAULT_TASK_MODEL_SPEC} (embedded)",
    )


def proposer_model_option() -> Any:
    """``--proposer-model SPEC`` (default: the hosted model of the API key set, if any)."""
    return typer.Option(
        None,
        "--proposer-model",
        help="Model spec of the proposer, e.g. anthropic:claude-sonnet-4-5.",
        show_default="the hosted model of the API key set, if any",
    )


def evals_per_iter_option() -> Any:
    """``--evals-per-iter N``: a whole number >= 1."""
    return typer.Option(
        None,
        "--evals-per-iter",
        min=1,
        help="Full evaluations' worth of examples per iteration.",
        show_default=str(DEFAULT_EVALS_PER_ITER),
    )


def val_limit_option() -> Any:
    """``--val-limit N``: a whole number >= 1."""
    return typer.Option(
        None,
        "--val-limit",
        min=1,
        help="Search on the first N validation examples only (held-out ones come after).",
        show_default="all",
    )


def harness_seconds_option() -> Any:
    """``--harness-seconds S``: the harness's own time an evaluation allows per example on average (> 0)."""
    return typer.Option(
        None,
        "--harness-seconds",
        min=0.001,
        metavar="S",
        help=(
            "Seconds of the harness's own time (model calls excluded) an evaluation of a candidate allows per example "
            "on average, at least 120 s in all; past it the examples left score 0."
        ),
        show_default=f"{AVERAGE_SECONDS:g}",
    )


def holdout_option(default: str) -> Any:
    """``--holdout N``: a whole number >= 0; ``default`` says what the command takes without it."""
    return typer.Option(
        None,
        "--holdout",
        min=0,
        help=(
            "Validation examples no proposer sees: a third choose what the run returns among the search's best, "
            "the rest score it."
        ),
        show_default=default,
    )


def iters_option(default: int | None, help: str, shown: str | None = None) -> Any:
    """``--iters N``: a whole number >= 0; ``shown`` says what the command takes without it when ``default`` is None."""
    return typer.Option(default, "--iters", min=0, help=help, show_default=shown if shown is not None else True)


def data_dir_option() -> Any:
    """``--data-dir DIR``: where the paper's datasets' splits are (else downloaded)."""
    return typer.Option(None, "--data-dir", help="Folder with the task's splits.", show_default="download them")


def settings_change(
    *,
    task_model: str | None = None,
    proposer: str | None = None,
    proposer_model: str | None = None,
    evaluation: str | None = None,
    evals_per_iter: int | None = None,
    proposals: int | None = None,
    seed: int | None = None,
    holdout: int | None = None,
    val_limit: int | None = None,
    max_cost: float | None = None,
    max_tokens: int | None = None,
    budget: str | None = None,
    iter_budget: str | None = None,
    max_proposer_failures: int | None = None,
    proposer_option: list[str] | None = None,
    seed_harnesses: str | None = None,
    harness_seconds: float | None = None,
) -> SettingsChange:
    """What the run options given on the command line give a run (``None``: not given): each read once, here
    (``--budget`` and ``--iter-budget`` by ``Budget.parse``; ``--max-cost`` and ``--max-tokens`` are the run
    budget's ``usd`` and ``tokens``, and may not disagree with ``--budget``)."""
    seed_names, seed_files = seed_settings(seed_harnesses)
    per_run = Budget.parse(budget, option="--budget") if budget else Budget()
    for entry, flag, value in (("usd", "--max-cost", max_cost), ("tokens", "--max-tokens", max_tokens)):
        if value is not None:
            if math.isfinite(getattr(per_run, entry)) and getattr(per_run, entry) != value:
                raise InputError(f"--budget {entry}= and {flag} disagree: give one of them.")
            per_run = dataclasses.replace(per_run, **{entry: value})
    return SettingsChange(
        task_model=task_model,
        proposer=proposer,
        proposer_model=proposer_model,
        evaluation=evaluation,
        evals_per_iter=evals_per_iter,
        proposals=proposals,
        seed=seed,
        holdout=holdout,
        val_limit=val_limit,
        per_run=per_run if per_run != Budget() else None,
        per_iteration=Budget.parse(iter_budget, option="--iter-budget") if iter_budget else None,
        max_proposer_failures=max_proposer_failures,
        proposer_options=parse_options(proposer_option or []) or None,
        seed_names=seed_names,
        seed_files=seed_files,
        harness_seconds=harness_seconds,
    )


def seed_settings(seeds: str | None) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """``--seed-harnesses``: (the seed names to keep, or None; seed harness files, absolute paths so a resume finds
    them, or None)."""
    entries = [entry.strip() for entry in (seeds or "").split(",") if entry.strip()]
    files = [entry for entry in entries if entry.endswith(".py")]
    if files and len(files) != len(entries):
        raise InputError("--seed-harnesses takes the names of the task's seeds or .py files, not both.")
    if files:
        return None, tuple(str(Path(f).expanduser().resolve()) for f in files)
    return tuple(entries) or None, None
