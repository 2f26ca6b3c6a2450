"""``optimize()``: a whole search from settings, the library entry point behind ``metaharness optimize``.

It wires the parts the way the command line does: the task and its seed harnesses, the task and proposer models
(one cost ledger for both, :func:`run_ledger`: every call journaled in the run's ``spend.jsonl`` as it is counted,
capped by ``max_cost`` / ``max_tokens`` over every session of the run), the sandboxed evaluator, the proposer, and
the run directory (created, or reopened and repaired), then runs the :class:`~metaharness.loop.Optimizer` and keeps
``SUMMARY.md`` current.

>>> from metaharness.optimize import optimize, run_config
>>> config = run_config("symptom2disease", proposer="offline", val_limit=10)  # doctest: +SKIP
>>> outcome = optimize("runs/s2d", config, iterations=2)  # doctest: +SKIP
>>> outcome.best.id, outcome.best.score  # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metaharness import __version__
from metaharness.errors import InputError
from metaharness.loop import (
    DEFAULT_MAX_PROPOSER_FAILURES,
    LoopEvents,
    LoopSettings,
    Optimizer,
    Outcome,
    Seed,
    StopRequest,
)
from metaharness.models.ledger import Charge, Ledger
from metaharness.models.local import DEFAULT_TASK_MODEL_SPEC, require_llama_cpp
from metaharness.models.prices import PriceTable
from metaharness.models.spec import parse_spec
from metaharness.store.run_dir import RunDirectory

DEFAULT_EVALS_PER_ITER = 3
# Hosted proposer models used when the matching key is set and no proposer model is named.
HOSTED_PROPOSERS = (("ANTHROPIC_API_KEY", "anthropic:claude-sonnet-4-5"), ("OPENAI_API_KEY", "openai:gpt-4.1"))
MODEL_PROPOSERS = ("base", "tps")


def default_models(
    task_model: str | None, proposer: str | None, proposer_model: str | None
) -> tuple[str, str, str | None, str | None]:
    """Fill in what was not chosen: (task model, proposer, proposer model, a line explaining the choice or None).

    With an API key in the environment the ``tps`` proposer drives the matching hosted model; without one, the
    embedded task model and the ``offline`` proposer run with no network.
    """
    notice = None
    if proposer_model is None and proposer in (None, *MODEL_PROPOSERS):
        proposer_model = next((spec for key, spec in HOSTED_PROPOSERS if os.environ.get(key)), None)
    if proposer is None:
        proposer = "tps" if proposer_model else "offline"
    if task_model is None:
        task_model = DEFAULT_TASK_MODEL_SPEC
        if proposer == "offline":
            has_key = any(os.environ.get(key) for key, _ in HOSTED_PROPOSERS)
            notice = (
                f"{'No hosted proposer selected' if has_key else 'No API key configured'}: using the embedded task "
                f"model {DEFAULT_TASK_MODEL_SPEC} and the offline proposer. "
                "For hosted models set ANTHROPIC_API_KEY or OPENAI_API_KEY, or pass --task-model openai:MODEL@URL "
                "--proposer tps --proposer-model anthropic:claude-sonnet-4-5."
            )
    return task_model, proposer, proposer_model, notice


def run_config(
    dataset: str,
    *,
    task_model: str | None = None,
    proposer: str | None = None,
    proposer_model: str | None = None,
    evals_per_iter: int = DEFAULT_EVALS_PER_ITER,
    val_limit: int | None = None,
) -> dict[str, Any]:
    """The settings a run directory keeps for its whole life (``run.json`` in its root commit), defaults filled in."""
    task_model, proposer, proposer_model, _ = default_models(task_model, proposer, proposer_model)
    return {
        "dataset": dataset,
        "task_model": task_model,
        "proposer": proposer,
        "proposer_model": proposer_model,
        "evals_per_iter": evals_per_iter,
        "val_limit": val_limit,
        "metaharness": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def seeds_of(dataset: str, names: list[str] | None = None) -> list[Seed]:
    """The task's seed harnesses (``candidates/<task>/*.py``), or the named ones, in name order."""
    from metaharness.candidates import ROOT

    available = {p.stem: p for p in sorted((ROOT / dataset).glob("*.py"))}
    if not available:
        raise InputError(f"No seed harnesses for {dataset} in {ROOT / dataset}.")
    unknown = [n for n in names or [] if n not in available]
    if unknown:
        raise InputError(f"Unknown seed(s) {', '.join(unknown)} for {dataset}: choose from {', '.join(available)}.")
    chosen = [available[n] for n in names] if names else list(available.values())
    return [Seed(path.stem, path.read_text(encoding="utf-8")) for path in chosen]


def spent_before(run: RunDirectory) -> dict[str, float]:
    """What earlier sessions of this run spent: every call in its spend journal (``spend.jsonl``)."""
    totals = run.spent()
    return {"usd": totals["usd"], "tokens": totals["tokens"]}


@dataclass
class RunLedger:
    """The ledger of one session of a run, journaling into the run's ``spend.jsonl``, with the run's caps.

    ``previous`` is what earlier sessions spent; the ledger's own caps are what the run's caps leave of it, so a
    resumed run stops where one uninterrupted session would have.
    """

    ledger: Ledger
    previous: dict[str, float]
    max_cost: float | None = None
    max_tokens: int | None = None

    def spent(self) -> dict[str, float]:
        """The whole run's spend so far (earlier sessions and this one)."""
        return {
            "usd": round(self.previous.get("usd", 0.0) + self.ledger.dollars, 6),
            "tokens": int(self.previous.get("tokens", 0)) + self.ledger.tokens,
        }

    def budget(self) -> dict[str, float]:
        """The caps left for the run (what a proposer may still spend): ``usd`` and ``tokens`` when capped."""
        spent, left = self.spent(), {}
        if self.max_cost is not None:
            left["usd"] = max(0.0, self.max_cost - spent["usd"])
        if self.max_tokens is not None:
            left["tokens"] = max(0, self.max_tokens - spent["tokens"])
        return left


def run_ledger(
    run: RunDirectory,
    *,
    max_cost: float | None = None,
    max_tokens: int | None = None,
    prices: PriceTable | None = None,
) -> RunLedger:
    """A ledger for this session of ``run``: every call it counts is journaled (fsynced) in ``spend.jsonl``
    before the call returns, and its caps are ``max_cost`` dollars and ``max_tokens`` tokens minus what the
    journal holds from earlier sessions (a session killed mid-iteration included)."""
    previous = spent_before(run)
    ledger = Ledger(
        max_dollars=None if max_cost is None else max(0.0, max_cost - previous["usd"]),
        max_tokens=None if max_tokens is None else max(0, max_tokens - int(previous["tokens"])),
        prices=prices,
    )
    ledger.remember(run.spend.keys())

    def journal(charge: Charge) -> None:
        usage = charge.usage
        run.record_spend(
            charge.model,
            charge.role,
            charge.dollars,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cached_tokens=usage.cached_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            key=charge.key,
        )

    ledger.add_listener(journal)
    return RunLedger(ledger, previous, max_cost, max_tokens)


ITERATION_BUDGET_KEYS = ("evals", "tokens", "usd")


def parse_iteration_budget(text: str) -> dict[str, float]:
    """``evals=3,tokens=300000,usd=0.5`` as a dict (any subset of :data:`ITERATION_BUDGET_KEYS`), checked by
    :func:`check_iteration_budget`; InputError with one line otherwise."""
    budget: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        key = key.strip()
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not sep or math.isnan(number):
            raise InputError(
                f"--iter-budget takes KEY=NUMBER entries separated by commas (e.g. evals=3,tokens=300000,usd=0.5), "
                f"got {part!r}."
            )
        if key in budget:
            raise InputError(f"--iter-budget names {key} twice.")
        budget[key] = number
    if not budget:
        raise InputError("--iter-budget is empty: give entries such as evals=3,tokens=300000,usd=0.5.")
    return check_iteration_budget(budget)


def check_iteration_budget(budget: dict[str, float]) -> dict[str, float]:
    """A per-iteration budget with known keys and finite values (``evals`` an integer >= 1, the others >= 0)."""
    for key, value in budget.items():
        if key not in ITERATION_BUDGET_KEYS:
            raise InputError(f"Unknown iteration budget entry '{key}': use {', '.join(ITERATION_BUDGET_KEYS)}.")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            raise InputError(f"Iteration budget entry {key} must be a finite number >= 0, got {value!r}.")
        if key == "evals" and (value < 1 or value != int(value)):
            raise InputError(f"Iteration budget entry evals must be a whole number >= 1, got {value!r}.")
    return {k: float(v) for k, v in budget.items()}


def optimize(
    run_dir: str | Path,
    config: dict[str, Any],
    *,
    iterations: int,
    data_dir: str | Path | None = None,
    max_cost: float | None = None,
    max_tokens: int | None = None,
    workers: int | None = None,
    test: bool = True,
    options: dict[str, Any] | None = None,
    seed_names: list[str] | None = None,
    events: LoopEvents | None = None,
    stop: StopRequest | None = None,
    max_proposer_failures: int = DEFAULT_MAX_PROPOSER_FAILURES,
    iteration_budget: dict[str, float] | None = None,
) -> Outcome:
    """Run (or continue) the search in ``run_dir`` with ``config`` (:func:`run_config`) up to ``iterations``.

    ``max_cost`` caps the dollars and ``max_tokens`` the tokens (input + output) of the whole run, earlier sessions
    included (a reached cap stops cleanly); ``iteration_budget`` (``{"tokens": ..., "usd": ...}``) is what one
    iteration's chosen candidates may cost, kept by the proposer's selection next to the caps left (the
    evaluation count per iteration is ``config["evals_per_iter"]``); ``options`` go to the proposer
    (:func:`metaharness.proposers.get_proposer`); ``seed_names`` restrict the seeds; ``events`` receives progress;
    setting ``stop.requested`` stops at the next safe point. A proposer failure fails its iteration only; after
    ``max_proposer_failures`` failed iterations in a row :class:`~metaharness.loop.ProposerFailed` is raised. Bad
    settings raise :class:`~metaharness.errors.InputError`; another process running in ``run_dir`` too.
    """
    from metaharness.evaluation.candidate_evaluator import TaskEvaluator
    from metaharness.models import connect
    from metaharness.proposers import check_options, get_proposer
    from metaharness.report import write_summary_markdown
    from metaharness.tasks import get_task

    if max_proposer_failures < 1:
        raise InputError(f"max_proposer_failures must be at least 1, got {max_proposer_failures}.")
    if max_cost is not None and max_cost < 0:
        raise InputError(f"max_cost must be at least 0 USD, got {max_cost}.")
    if max_tokens is not None and max_tokens < 0:
        raise InputError(f"max_tokens must be at least 0, got {max_tokens}.")
    options = check_options(config["proposer"], options or {})
    iteration_budget = check_iteration_budget(iteration_budget or {})
    evals = iteration_budget.pop("evals", config["evals_per_iter"])
    if evals != config["evals_per_iter"]:
        raise InputError(
            f"The iteration budget says evals={evals:g} but the run evaluates {config['evals_per_iter']} candidates "
            "per iteration: give one of them (the run's is config['evals_per_iter'], --evals-per-iter)."
        )
    for spec in (config["task_model"], config.get("proposer_model")):
        if spec and parse_spec(spec).provider == "local":
            require_llama_cpp(spec)  # before the run directory is touched
    run_dir = Path(run_dir)
    task = get_task(config["dataset"], data_dir=data_dir)
    seeds = seeds_of(config["dataset"], seed_names)
    run = RunDirectory.open(run_dir, config)
    try:
        costs = run_ledger(run, max_cost=max_cost, max_tokens=max_tokens)
        ledger = costs.ledger
        task_client = connect(config["task_model"], ledger=ledger)
        proposer_client = connect(config["proposer_model"], ledger=ledger) if config.get("proposer_model") else None
        evaluator = TaskEvaluator(task, task_client, val_limit=config["val_limit"], workers=workers)
        proposer = get_proposer(
            config["proposer"],
            **{"workers": workers, **(options or {})},
            task=task,
            task_model=task_client,
            model=proposer_client,
            run_dir=run_dir,
            data_dir=data_dir,
        )

        run.log(
            {
                "type": "start",
                "config": config,
                "iterations": iterations,
                "max_cost": max_cost,
                "max_tokens": max_tokens,
                "iteration_budget": iteration_budget,
                "proposer_options": options or {},
                "spent_before": costs.previous,
            }
        )
        settings = LoopSettings(
            config["dataset"],
            iterations,
            config["evals_per_iter"],
            test=test,
            max_proposer_failures=max_proposer_failures,
            iteration_budget=iteration_budget,
        )
        optimizer = Optimizer(
            run,
            settings,
            proposer,
            evaluator,
            seeds,
            events=events,
            stop=stop,
            budget=costs.budget,
            spent=costs.spent,
            write_summary=lambda: write_summary_markdown(run),
        )
        return optimizer.run()
    finally:
        run.close()
