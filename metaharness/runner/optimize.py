"""``optimize()``: a whole search from settings, the library entry point behind ``metaharness optimize``.

It resolves the run's settings once (``RunSettings.resolve``: what was given over what the run holds) and wires
the parts the way the command line does: the task and its seed harnesses (``metaharness.runner.task``), the task
and proposer models (one cost ledger for both, ``metaharness.runner.ledger.run_ledger``: every call journaled in
the run's ``spend.jsonl`` as it is counted, capped by the run's money caps over every session of the run), the
sandboxed evaluator, the proposer, and the run directory (created, or reopened and repaired); then it runs the
loop (``metaharness.search.loop.Optimizer``) and keeps ``SUMMARY.md`` current.

>>> from metaharness import optimize, run_config
>>> settings = run_config("symptom2disease", proposer="offline", val_limit=10)  # doctest: +SKIP
>>> outcome = optimize("runs/s2d", settings, iterations=2)  # doctest: +SKIP
>>> outcome.best.id, outcome.best.score  # doctest: +SKIP
>>> optimize("runs/mine", run_config("mytask", val_limit=20), iterations=2)  # a task folder  # doctest: +SKIP
>>> optimize("runs/obj", task=my_task, seed_files=["seeds/a.py"], iterations=2)  # a Task object  # doctest: +SKIP
>>> optimize("runs/mine", iterations=4)  # continue a run: its task and seeds are found again  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from metaharness.errors import InputError
from metaharness.evaluation.sandbox import SandboxLimits
from metaharness.evaluation.task_evaluator import TaskEvaluator
from metaharness.models import connect
from metaharness.models.ledger import Ledger
from metaharness.models.protocol import context_window
from metaharness.models.replaying import ReplayingClient
from metaharness.proposers import check_proposer_model, connect_proposer, get_proposer
from metaharness.proposers.engines import is_engine
from metaharness.report import write_summary_markdown
from metaharness.runner.events import RunEvents
from metaharness.runner.ledger import run_ledger
from metaharness.runner.settings import RunSettings, SettingsChange, api_settings
from metaharness.runner.task import run_task, seeds_of, task_source
from metaharness.search.baseline import NeighbourVote
from metaharness.search.loop import LoopEvents, LoopSettings, Optimizer, Outcome, Seed, StopRequest
from metaharness.search.model_free import ModelFreeCheck
from metaharness.search.replay import Replayer
from metaharness.search.staging import ExampleOrder
from metaharness.search.test_split import TestSplit
from metaharness.search.withheld import withhold
from metaharness.store.log import StartLine
from metaharness.store.run_dir import RunDirectory
from metaharness.tasks import open_task
from metaharness.tasks.protocol import Task

# Examples in flight when a program is replayed on recorded calls: no model computes, only the sandboxes run.
REPLAY_WORKERS = 2
# Examples in flight in a model-free check: one sandbox (its stand-in answers at once; more would load more copies).
MODEL_FREE_WORKERS = 1


def run_config(dataset: str | Task, *, task_settings: Mapping[str, Any] | None = None, **given: Any) -> RunSettings:
    """The settings of a new run of ``dataset``, defaults filled in (``RunSettings``; keyword arguments are the run
    settings, ``metaharness.runner.settings.SETTINGS``, e.g. ``proposer="offline", val_limit=10,
    evaluation="greedy", per_run=Budget(usd=1)``).

    ``dataset`` is a paper dataset's name, a task folder, ``hf:OWNER/NAME`` or a Task object; ``task_settings``
    (``{"data.config": "main"}``, the ``-T`` keys) apply to a folder or ``hf:`` dataset, which is opened here to
    record where it came from."""
    if not isinstance(dataset, str) and task_settings:
        raise InputError("task_settings apply to a task folder or hf: dataset named by text; open the task with them.")
    task = open_task(dataset, settings=dict(task_settings or {})) if isinstance(dataset, str) else dataset
    change = SettingsChange(dataset=task.name, task_source=task_source(task), **api_settings(given))
    change.check_agreement()
    return RunSettings.resolve(change, None)


def stored_settings(run_dir: str | Path) -> RunSettings | None:
    """The settings a run directory holds (None when there is no run there yet)."""
    path = Path(run_dir)
    if not RunDirectory.exists(path) or not RunDirectory.started(path):  # a start interrupted: a new run reuses it
        return None
    return RunSettings.from_json(RunDirectory.browse(path).settings())


def optimize(
    run_dir: str | Path,
    settings: RunSettings | SettingsChange | None = None,
    *,
    iterations: int,
    task: Task | None = None,
    data_dir: str | Path | None = None,
    workers: int | None = None,
    test: bool | TestSplit = True,
    events: RunEvents | None = None,
    stop: StopRequest | None = None,
    raise_caps: bool = False,
    **given: Any,
) -> Outcome:
    """Run (or continue) the search in ``run_dir`` up to ``iterations``.

    ``settings`` are what was given for the run: a new run's settings (``run_config``) or a ``SettingsChange``;
    for a run that exists they are checked against the stored ones (``RunSettings.resolve``: equal, or caps
    tightened; ``raise_caps`` lets a cap grow), and ``None`` reuses them. ``task`` is the Task object to search
    (else the one the settings name or the run recorded: ``metaharness.runner.task.run_task``). Keyword arguments
    are run settings by name (``metaharness.runner.settings.SETTINGS``), given over ``settings``: e.g.
    ``seed_files`` (seed harness files to start from instead of the task's own, recorded so a resumed run finds
    them again), ``per_run=Budget(usd=1.0)``, ``proposer_options``, ``max_proposer_failures``; the names they once
    had (``seeds``, ``options``, ``max_cost``, ``max_tokens``) still work, with a DeprecationWarning. Two settings
    that disagree (``per_iteration`` evals and ``evals_per_iter``) raise. The caps hold over every session of the
    run (a reached cap stops cleanly: ``Outcome.capped``); ``events`` receives progress; setting ``stop.requested``
    stops at the next safe point. After ``max_proposer_failures`` proposer failures in a row ``ProposerFailed`` is
    raised. Bad settings raise ``InputError`` before the run directory is touched; so does another process running
    in ``run_dir``.
    """
    base = settings if isinstance(settings, SettingsChange) else SettingsChange.of(settings) if settings else None
    named = SettingsChange(**api_settings(given))
    named.check_agreement()
    change = named.over(base or SettingsChange())
    if task is not None:  # the Task object's name and where it came from; refused when the settings name another
        source = task_source(task)
        if change.dataset is not None and (change.dataset, _plain(change.task_source)) != (task.name, _plain(source)):
            raise InputError(
                f"The settings are for the task {change.dataset}, not the task given ({task.name}): make them with "
                "run_config(task)."
            )
        change = SettingsChange(dataset=task.name, task_source=source).over(change)
    stored = stored_settings(run_dir)
    if stored is None and base is None and task is None:
        raise InputError(f"No run at {run_dir} to continue: pass the settings of a new run (run_config(dataset)).")
    resolved = RunSettings.resolve(change, stored, raise_caps=raise_caps)
    _check_models(resolved)
    if events is not None:
        events.settings_resolved(resolved)
    if task is None:
        task = run_task(resolved.dataset, resolved.task_source, data_dir)
    names = list(resolved.seed_names) if resolved.seed_names else None
    seeded = stored is not None and 0 in RunDirectory.browse(Path(run_dir)).completed_iterations()
    starts = [] if seeded else seeds_of(task, names, files=resolved.seed_files)  # committed: files may be gone
    search = resolved.search
    task, judge_only = withhold(task, search.judge_train)  # what every harness, proposer and check sees
    val = [example.id for example in task.load("val")]
    ExampleOrder.split(  # enough examples, or a clear error before the run directory is made
        val, seed=search.seed, limit=resolved.val_limit, holdout=search.holdout, judge_only=judge_only
    )
    session = LoopSettings(
        resolved.dataset, search, iterations, test=test, limit=resolved.val_limit, judge_only=judge_only
    )
    return _run(Path(run_dir), resolved, task, starts, session, workers, data_dir, events, stop)


def _check_models(settings: RunSettings) -> None:
    """Before the run directory is made: the proposer model fits the proposer (an engine: installed and logged
    in), and each model connects (its key, its local model file, llama_cpp) and has a price under a dollar cap."""
    if settings.proposer_model is not None:
        check_proposer_model(settings.proposer, settings.proposer_model)
    usd = settings.search.budget.per_run.usd
    priced = Ledger(max_dollars=usd if math.isfinite(usd) else None)
    for spec in (settings.task_model, settings.proposer_model):
        if spec and not is_engine(spec):
            connect(spec, cache=False)
            priced.check(spec)


def _run(
    run_dir: Path,
    settings: RunSettings,
    task: Task,
    starts: list[Seed],
    session: LoopSettings,
    workers: int | None,
    data_dir: str | Path | None,
    events: LoopEvents | None,
    stop: StopRequest | None,
) -> Outcome:
    """Open the run directory, wire the models, the evaluator and the proposer of ``settings``, and run the loop."""
    run = RunDirectory.open(run_dir, settings.to_json())
    try:
        run.save_settings(settings.to_json())
        costs = run_ledger(run, settings.search.budget.per_run)
        task_client = connect(settings.task_model, ledger=costs.ledger)
        limits = SandboxLimits(average_seconds=settings.harness_seconds)  # the time bound of each evaluation
        proposer_client = connect_proposer(settings.proposer_model, costs.ledger) if settings.proposer_model else None
        # the search's share: LoopSettings.limit
        evaluator = TaskEvaluator(task, task_client, workers=workers, limits=limits)
        replaying = ReplayingClient.of(task_client)
        replay = (
            Replayer(
                TaskEvaluator(task, replaying, workers=REPLAY_WORKERS, limits=limits), run_dir / "proposer" / "replays"
            )
            if replaying is not None
            else None
        )
        model_free = ModelFreeCheck(
            task,
            lambda view, client: TaskEvaluator(view, client, workers=MODEL_FREE_WORKERS, limits=limits),
            run_dir / "model-free",
            context_window(task_client),
        )
        proposer = get_proposer(
            settings.proposer,
            options=settings.proposer_options,
            workers=workers,
            seed=settings.search.seed,
            task=task,
            task_model=task_client,
            model=proposer_client,
            run_dir=run_dir,
            data_dir=data_dir,
        )
        run.log(StartLine(settings.to_json(), session.iterations, costs.previous))
        optimizer = Optimizer(
            run,
            session,
            proposer,
            evaluator,
            starts,
            events=events,
            stop=stop,
            spending=costs,
            write_summary=lambda: write_summary_markdown(run),
            replay=replay,
            model_free=model_free,
            baseline=NeighbourVote.scorer(task),
        )
        return optimizer.run()
    finally:
        run.close()


def _plain(value: object) -> object:
    """``value`` as the stored settings hold it (JSON: tuples as lists)."""
    return json.loads(json.dumps(value))
