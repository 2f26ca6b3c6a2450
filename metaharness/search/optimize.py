"""``optimize()``: a whole search from settings, the library entry point behind ``metaharness optimize``.

It wires the parts the way the command line does: the task and its seed harnesses, the task and proposer models
(one cost ledger for both, ``run_ledger``: every call journaled in the run's ``spend.jsonl`` as it is counted,
capped by ``max_cost`` / ``max_tokens`` over every session of the run), the sandboxed evaluator, the proposer, and
the run directory (created, or reopened and repaired), then runs the ``Optimizer`` and
keeps ``SUMMARY.md`` current.

The task is one of the paper's datasets by name, a task folder (``task.toml``), ``hf:OWNER/NAME`` (with
``task_settings``, the ``-T`` keys) or any ``Task`` object; the run records where it came
from (``task_source``), so that continuing the run needs only its directory.

>>> from metaharness import optimize, run_config
>>> settings = run_config("symptom2disease", proposer="offline", val_limit=10)  # doctest: +SKIP
>>> outcome = optimize("runs/s2d", settings, iterations=2)  # doctest: +SKIP
>>> outcome.best.id, outcome.best.score  # doctest: +SKIP
>>> optimize("runs/mine", run_config("mytask", val_limit=20), iterations=2)  # a task folder  # doctest: +SKIP
>>> optimize("runs/obj", task=my_task, seeds=["seeds/a.py"], iterations=2)  # a Task object  # doctest: +SKIP
>>> optimize("runs/mine", iterations=4)  # continue a run: its task and seeds are found again  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from metaharness.budget import Budget
from metaharness.candidates import seed_sources
from metaharness.errors import InputError
from metaharness.evaluation.task_evaluator import TaskEvaluator
from metaharness.models import connect
from metaharness.models.ledger import Charge, Ledger
from metaharness.models.local import DEFAULT_TASK_MODEL_SPEC
from metaharness.models.prices import PriceTable
from metaharness.models.replaying import ReplayingClient
from metaharness.proposers import check_proposer_model, connect_proposer, get_proposer
from metaharness.proposers.engines import is_engine
from metaharness.report import write_summary_markdown
from metaharness.search.loop import (
    LoopEvents,
    LoopSettings,
    Optimizer,
    Outcome,
    Seed,
    StopRequest,
)
from metaharness.search.replay import Replayer
from metaharness.search.settings import RunSettings
from metaharness.search.staging import ExampleOrder
from metaharness.store.log import StartLine
from metaharness.store.run_dir import RunDirectory
from metaharness.tasks import get_task, open_task, reopen_task, task_origin
from metaharness.tasks.custom.data import HUB_PREFIX
from metaharness.tasks.custom.task import TaskSource, fingerprint
from metaharness.tasks.protocol import Task
from metaharness.tasks.text import TextTask

# Hosted proposer models used when the matching key is set and no proposer model is named.
HOSTED_PROPOSERS = (("ANTHROPIC_API_KEY", "anthropic:claude-sonnet-4-5"), ("OPENAI_API_KEY", "openai:gpt-4.1"))
MODEL_PROPOSERS = ("base", "tps")
# Examples in flight when a program is replayed on recorded calls: no model computes, only the sandboxes run.
REPLAY_WORKERS = 2
# How a run records a Task object of the caller's (no file to open it from): its class, after this prefix.
PYTHON_SOURCE = "python:"


class Models(NamedTuple):
    """A run's models as ``default_models`` fills them in, with the line explaining the choice (or None)."""

    task_model: str
    proposer: str
    proposer_model: str | None
    notice: str | None


def default_models(task_model: str | None, proposer: str | None, proposer_model: str | None) -> Models:
    """Fill in what was not chosen (a new run's settings do it once,
    ``resolve``).

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
    return Models(task_model, proposer, proposer_model, notice)


def run_config(dataset: str | Task, *, task_settings: Mapping[str, Any] | None = None, **given: Any) -> RunSettings:
    """The settings of a new run of ``dataset``, defaults filled in (``RunSettings``;
    keyword arguments name its fields, e.g. ``proposer="offline", val_limit=10, evaluation="greedy"``).

    ``dataset`` is a paper dataset's name, a task folder, ``hf:OWNER/NAME`` or a Task object; ``task_settings``
    (``{"data.config": "main"}``, the ``-T`` keys) apply to a folder or ``hf:`` dataset, which is opened here to
    record where it came from."""
    if not isinstance(dataset, str) and task_settings:
        raise InputError("task_settings apply to a task folder or hf: dataset named by text; open the task with them.")
    task = open_task(dataset, settings=dict(task_settings or {})) if isinstance(dataset, str) else dataset
    return RunSettings.resolve({"dataset": task.name, "task_source": task_source(task), **given}, None)


def task_source(task: Task) -> TaskSource | None:
    """What a run records about where ``task`` came from, to open it again on resume: None for the paper's
    datasets (the name says it); for your own task its origin (``origin``: the
    folder or ``hf:`` dataset, its settings with the val carve's seed and size, a fingerprint of train and val); for
    any other Task object its class and that fingerprint (such a run is continued by passing the object again)."""
    if isinstance(task, TextTask):
        return None
    origin = task_origin(task)
    if origin is not None:
        return origin
    kind = type(task)
    examples = {split: task.load(split) for split in ("train", "val")}
    return TaskSource(source=f"{PYTHON_SOURCE}{kind.__module__}.{kind.__qualname__}", fingerprint=fingerprint(examples))


def run_task(settings: RunSettings, data_dir: str | Path | None = None) -> Task:
    """The task of a run: a paper dataset by its name, else opened again from where the run recorded it came
    from, checked to hold the same train and val examples (so a carved val split is the same one)."""
    origin = settings.task_source
    if origin is None:
        return get_task(settings.dataset, data_dir=data_dir)
    source = str(origin.get("source", ""))
    if source.startswith(PYTHON_SOURCE):
        raise InputError(
            f"This run's task is a Python object ({source.removeprefix(PYTHON_SOURCE)}): pass it again, "
            "optimize(run_dir, task=...)."
        )
    if data_dir is not None:
        raise InputError(f"--data-dir is for the paper's datasets; the task {source} reads its own data.")
    if not source.startswith(HUB_PREFIX) and not Path(source).is_dir():
        raise InputError(
            f"This run's task folder {source} is missing: restore it there (a run opens its task where it started), "
            "or start a new run with another --run-dir."
        )
    return reopen_task(TaskSource(**origin))


def seeds_of(
    task: str | Task, names: list[str] | None = None, *, files: Sequence[str | os.PathLike[str]] | None = None
) -> list[Seed]:
    """The seed harnesses a search of ``task`` (a Task, or a task's name or folder) starts from: ``files`` when
    given, else the task's own (``metaharness.candidates.seed_sources``: a task folder's ``candidates/*.py``,
    the paper task's, else the standard seeds written for the task); ``names`` keeps only those, in that order."""
    if not files:
        chosen = seed_sources(open_task(task) if isinstance(task, str) else task, names)
        return [Seed(name, source) for name, source in chosen.items()]
    paths = [Path(f) for f in files]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise InputError(f"No seed harness file {', '.join(missing)}: pass .py files that define class Harness.")
    available: dict[str, str] = {}
    for path in paths:
        if path.stem in available:
            raise InputError(f"Two seed files are named {path.stem}: give each seed file its own name.")
        available[path.stem] = path.read_text(encoding="utf-8")
    unknown = [n for n in names or [] if n not in available]
    if unknown:
        raise InputError(f"Unknown seed(s) {', '.join(unknown)}: the seed files are {', '.join(available)}.")
    return [Seed(name, available[name]) for name in names or available]


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


def stored_settings(run_dir: str | Path) -> RunSettings | None:
    """The settings a run directory holds (None when there is no run there yet)."""
    path = Path(run_dir)
    if not RunDirectory.exists(path) or not RunDirectory.started(path):  # a start interrupted: a new run reuses it
        return None
    return RunSettings.from_json(RunDirectory.browse(path).settings())


def optimize(
    run_dir: str | Path,
    settings: RunSettings | None = None,
    *,
    iterations: int,
    task: Task | None = None,
    seeds: Sequence[str | os.PathLike[str]] | None = None,
    data_dir: str | Path | None = None,
    workers: int | None = None,
    test: bool = True,
    events: LoopEvents | None = None,
    stop: StopRequest | None = None,
    raise_caps: bool = False,
    max_cost: float | None = None,
    max_tokens: int | None = None,
    options: dict[str, Any] | None = None,
    seed_names: list[str] | None = None,
    max_proposer_failures: int | None = None,
) -> Outcome:
    """Run (or continue) the search in ``run_dir`` up to ``iterations``.

    ``settings`` (``run_config``) are the run's; for a run that exists they are checked against the stored ones
    (``resolve``: equal, or caps tightened; ``raise_caps`` lets a cap
    grow), and ``None`` reuses them. ``task`` is the Task object to search (else the one the settings name or the run
    recorded: ``run_task``); ``seeds`` are seed harness files to start from instead of the task's own
    (recorded, so a resumed run finds them again). ``max_cost``, ``max_tokens``, ``options`` (the proposer's),
    ``seed_names`` and ``max_proposer_failures`` are shorthands for those settings. The caps hold over every
    session of the run (a reached cap stops cleanly: ``Outcome.capped``); ``events`` receives progress; setting
    ``stop.requested`` stops at the next safe point. After ``max_proposer_failures`` proposer failures in a row
    ``ProposerFailed`` is raised. Bad settings raise
    ``InputError`` before the run directory is touched; so does another process running in
    ``run_dir``.
    """
    given: dict[str, object] = settings.given() if settings is not None else {}
    if task is not None:
        source = task_source(task)
        if settings is not None and (settings.dataset, _plain(settings.task_source)) != (task.name, _plain(source)):
            raise InputError(
                f"The settings are for the task {settings.dataset}, not the task given ({task.name}): make them with "
                "run_config(task)."
            )
        given.update(dataset=task.name, task_source=source)
    if seeds is not None:
        given["seed_files"] = tuple(str(Path(path).expanduser().resolve()) for path in seeds)
    run_budget = settings.run_budget.capped() if settings is not None else {}
    given["run_budget"] = {**run_budget, **_entries(usd=max_cost, tokens=max_tokens)}
    given.update(_entries(proposer_options=options, max_proposer_failures=max_proposer_failures))
    if seed_names is not None:
        given["seed_names"] = tuple(seed_names)
    stored = stored_settings(run_dir)
    if stored is None and settings is None and task is None:
        raise InputError(f"No run at {run_dir} to continue: pass the settings of a new run (run_config(dataset)).")
    resolved = RunSettings.resolve(given, stored, raise_caps=raise_caps)
    if resolved.proposer_model is not None:
        check_proposer_model(resolved.proposer, resolved.proposer_model)  # an engine: installed and logged in
    priced = Ledger(max_dollars=_finite(resolved.run_budget.usd))
    for spec in (resolved.task_model, resolved.proposer_model):
        if spec and not is_engine(spec):
            connect(spec, cache=False)  # its key, its local model file, llama_cpp: before the run directory is made
            priced.check(spec)  # and its price, under a dollar cap
    run_dir = Path(run_dir)
    if task is None:
        task = run_task(resolved, data_dir)
    names = list(resolved.seed_names) if resolved.seed_names else None
    seeded = stored is not None and 0 in RunDirectory.browse(run_dir).completed_iterations()
    starts = [] if seeded else seeds_of(task, names, files=resolved.seed_files)  # committed: files may be gone
    val = [example.id for example in task.load("val")][: resolved.val_limit]
    ExampleOrder.of(val, seed=resolved.seed, holdout=resolved.holdout)  # enough examples left to search
    run = RunDirectory.open(run_dir, resolved.to_json())
    try:
        run.save_settings(resolved.to_json())
        costs = run_ledger(run, max_cost=_finite(resolved.run_budget.usd), max_tokens=_tokens(resolved.run_budget))
        ledger = costs.ledger
        task_client = connect(resolved.task_model, ledger=ledger)
        proposer_client = connect_proposer(resolved.proposer_model, ledger) if resolved.proposer_model else None
        evaluator = TaskEvaluator(task, task_client, val_limit=resolved.val_limit, workers=workers)
        replaying = ReplayingClient.of(task_client)
        replay = (
            Replayer(TaskEvaluator(task, replaying, workers=REPLAY_WORKERS), run_dir / "proposer" / "replays")
            if replaying is not None
            else None
        )
        proposer = get_proposer(
            resolved.proposer,
            options=resolved.proposer_options,
            workers=workers,
            seed=resolved.seed,
            task=task,
            task_model=task_client,
            model=proposer_client,
            run_dir=run_dir,
            data_dir=data_dir,
        )
        run.log(StartLine(resolved.to_json(), iterations, costs.previous))
        optimizer = Optimizer(
            run,
            LoopSettings(resolved, iterations, test=test),
            proposer,
            evaluator,
            starts,
            events=events,
            stop=stop,
            budget=costs.budget,
            spent=costs.spent,
            write_summary=lambda: write_summary_markdown(run),
            replay=replay,
        )
        return optimizer.run()
    finally:
        run.close()


def _entries(**values: object) -> dict[str, object]:
    """The keyword arguments that were given (not None)."""
    return {k: v for k, v in values.items() if v is not None}


def _plain(value: object) -> object:
    """``value`` as the stored settings hold it (JSON: tuples as lists)."""
    return json.loads(json.dumps(value))


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _tokens(budget: Budget) -> int | None:
    return int(budget.tokens) if math.isfinite(budget.tokens) else None
