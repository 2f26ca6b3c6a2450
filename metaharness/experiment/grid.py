"""The experiment grid: one ordinary run directory per (dataset, proposer, arm, seed) cell under one folder.

An *arm* is the loop's evaluation policy (``metaharness.search.staging``: the planner's staged evaluation, or a
baseline: greedy, best-of-n, halving, gate). Every arm of a (dataset, proposer, seed) gets the same task-model
budget per iteration (``evals_per_iter`` full evaluations' worth of example-evaluations), so the arms are compared
at equal spend; ``holdout`` validation examples are kept out of every search and score only the candidate each
run returns (its *judged* score, ``metaharness.experiment.results``).

``EXP/experiment.json`` keeps the grid's spec; ``EXP/cells.jsonl`` gets one line per finished attempt of a cell
(``"done"`` with the iterations it ran to, ``"capped"`` when the run stopped at its share of ``max_cost`` with what
it spent, or ``"failed"`` with the error; the last line of a cell wins); ``EXP/DATASET/PROPOSER/ARM/seedS`` is the
cell's run directory (``EXP/DATASET/PROPOSER/seedS`` in an experiment from before arms, whose runs evaluated
best-of-n), written by ``metaharness.runner.optimize.optimize``. A rerun with the same spec resumes: cells whose
last line is ``"done"`` are skipped, the others run again and their run directories continue where they stopped, so a
killed experiment loses only the model calls in flight. A rerun with more iterations continues every run to the new
count, and one with a larger ``max_cost`` continues the capped cells with the larger cap (``experiment.json``
records either under ``extended``).

>>> from metaharness.experiment import experiment_spec, run_experiment
>>> spec = experiment_spec(["symptom2disease"], ["offline"], [0, 1], arms=["planner", "greedy"], iterations=2,
...                        val_limit=20, holdout=10)
>>> [c.name for c in spec.cells()][:2]
['symptom2disease/offline/planner/seed0', 'symptom2disease/offline/greedy/seed0']
>>> records = run_experiment("runs/exp", spec, jobs=2)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from joblib import Parallel, delayed

from metaharness import __version__
from metaharness.budget import DEFAULT_EVALS_PER_ITER, Budget
from metaharness.errors import InputError
from metaharness.evaluation.cluster import cluster
from metaharness.models import connect
from metaharness.models.local import DEFAULT_TASK_MODEL_SPEC, require_llama_cpp
from metaharness.models.prices import PriceTable
from metaharness.models.protocol import Usage
from metaharness.models.spec import parse_spec
from metaharness.proposers import ProposerOptions, check_proposer_model, needs_model
from metaharness.runner.models import default_models
from metaharness.runner.optimize import optimize
from metaharness.runner.settings import RunSettings, SettingsChange
from metaharness.runner.task import seeds_of
from metaharness.search.staging import POLICIES
from metaharness.store.files import append_jsonl, atomic_write_json, read_json, read_jsonl
from metaharness.store.run_dir import RunDirectory

if TYPE_CHECKING:
    from metaharness.search.loop import Outcome

SPEC_FILE = "experiment.json"
CELLS_FILE = "cells.jsonl"
LOCK_FILE = ".experiment.lock"
PAPER_DATASETS = ("lawbench", "symptom2disease", "uspto")
PAPER_PROPOSERS = ("coding", "tps")
PAPER_SEEDS = (0, 1, 2)
PAPER_ITERATIONS = 12
# The evaluation policies a grid compares at equal spend (every policy a run can take).
ARMS = tuple(p for p in POLICIES if p != "all")
# Keys of experiment.json that define the grid; ABOUT_KEYS only describe it.
ABOUT_KEYS = ("created", "metaharness", "extended")
# The keys of experiment.json that the grid's template holds, and their names there (``SettingsChange``'s).
TEMPLATE_KEYS = {
    "evals_per_iter": "evals_per_iter",
    "val_limit": "val_limit",
    "task_model": "task_model",
    "proposer_model": "proposer_model",
    "options": "proposer_options",
    "holdout": "holdout",
}
SPEC_KEYS = (
    "datasets",
    "proposers",
    "seeds",
    "iterations",
    "evals_per_iter",
    "val_limit",
    "task_model",
    "proposer_model",
    "test",
    "max_cost",
    "options",
    "arms",
    "holdout",
)


@dataclass(frozen=True)
class Cell:
    """One grid cell: a search of ``dataset`` by ``proposer`` with seed ``seed``, evaluating with policy ``arm``
    (None: an experiment from before arms, whose runs evaluated best-of-n)."""

    dataset: str
    proposer: str
    seed: int
    arm: str | None = None

    @property
    def label(self) -> str:
        """What the results tables compare: ``PROPOSER/ARM`` (``PROPOSER`` without an arm)."""
        return f"{self.proposer}/{self.arm}" if self.arm else self.proposer

    @property
    def name(self) -> str:
        """``DATASET/PROPOSER/ARM/seedS``: the cell's key in cells.jsonl and its run directory relative to EXP."""
        return f"{self.dataset}/{self.label}/seed{self.seed}"


@dataclass(frozen=True)
class CellRecord:
    """A cell's line in ``cells.jsonl``: ``"done"`` (with the ``iterations`` it ran to), ``"failed"`` (the
    ``error`` on one line) or ``"capped"`` (the run stopped at its cap: why, the iterations done, what the run
    spent). A line from an earlier version may lack ``arm``, ``label`` and ``iterations``."""

    cell: str
    dataset: str
    proposer: str
    seed: int
    run_dir: str
    status: str
    error: str | None = None
    iterations: int | None = None
    seconds: float = 0.0
    finished: str = ""
    arm: str | None = None
    label: str | None = None
    stopped: str | None = None
    spent: Mapping[str, float] | None = None

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "cell": self.cell,
            "dataset": self.dataset,
            "proposer": self.proposer,
            "arm": self.arm,
            "label": self.label,
            "seed": self.seed,
            "run_dir": self.run_dir,
            "status": self.status,
            "error": self.error,
            "iterations": self.iterations,
            "seconds": self.seconds,
            "finished": self.finished,
        }
        if self.status == "capped":
            data.update(stopped=self.stopped, spent=None if self.spent is None else dict(self.spent))
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CellRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


RunCell = Callable[[Cell, Path, "ExperimentSpec"], object]


class GridProgress(Protocol):
    """What ``run_experiment`` reports. ``done`` counts cells whose last line is "done" (earlier sessions
    included) out of ``total``. A cell "starts" when it is handed to a worker (joblib dispatches one cell per free
    worker, in plan order)."""

    def cell_started(self, cell: Cell, done: int, total: int) -> None: ...

    def cell_finished(self, cell: Cell, record: CellRecord, done: int, total: int) -> None: ...


def plan_grid(
    datasets: Sequence[str], proposers: Sequence[str], seeds: Sequence[int], arms: Sequence[str] | None = None
) -> list[Cell]:
    """Every (dataset, proposer, seed, arm), dataset-major: a dataset's cells finish together, so its table fills
    first; within it a seed's arms run one after another: they share the response cache (the same first proposals,
    the same programs on the same examples), and a grid stopped part-way holds complete pairs of arms."""
    each: list[str | None] = list(arms) if arms else [None]
    return [Cell(d, p, s, a) for d in datasets for p in proposers for s in seeds for a in each]


@dataclass(frozen=True)
class ExperimentSpec:
    """The grid's defining settings (``experiment.json``, ``SPEC_KEYS``); ``experiment_spec`` builds one from lists.

    ``template`` is what every cell's run is given (a ``SettingsChange``: the models, the example limit, the
    evaluations per iteration, the held-out examples, the proposer's ``-P`` options), to which each cell adds its
    dataset, proposer, seed, arm and share of the cap (``cell_settings``); its settings are checked as a run checks
    them (``check_cells``). ``max_cost`` is the dollar cap of the whole experiment, split evenly over the cells
    (``cell_cap``); ``arms`` are the evaluation policies compared (``ARMS``; None: the layout of an experiment from
    before arms). The grid's own settings are checked when constructed (``InputError`` naming the first bad one)."""

    datasets: tuple[str, ...]
    proposers: tuple[str, ...]
    seeds: tuple[int, ...]
    iterations: int = PAPER_ITERATIONS
    test: bool = True
    max_cost: float | None = None
    arms: tuple[str, ...] | None = None
    template: SettingsChange = field(default_factory=SettingsChange)

    def __post_init__(self) -> None:
        for key in ("datasets", "proposers", "seeds"):
            values = getattr(self, key)
            if not values:
                raise InputError(f"The experiment needs at least one of {key}.")
            if len(set(values)) != len(values):
                raise InputError(f"The experiment's {key} repeat a name: {', '.join(map(str, values))}.")
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in self.seeds):
            raise InputError(f"Seeds are integers >= 0, got {', '.join(map(str, self.seeds))}.")
        if self.iterations < 0:
            raise InputError(f"iterations (--iters) must be at least 0, got {self.iterations}.")
        if self.max_cost is not None and self.max_cost < 0:
            raise InputError(f"max_cost must be at least 0 USD, got {self.max_cost}.")
        if "seed" in self.options:
            raise InputError("The proposer option 'seed' is set per cell by the grid's seeds: do not pass it.")
        if self.arms is not None:
            unknown = [a for a in self.arms if a not in ARMS]
            if not self.arms or unknown:
                raise InputError(f"Unknown arm(s) {', '.join(unknown) or '(none given)'}: use {', '.join(ARMS)}.")
            if len(set(self.arms)) != len(self.arms):
                raise InputError(f"The experiment's arms repeat a name: {', '.join(self.arms)}.")

    @property
    def options(self) -> Mapping[str, object]:
        """The ``-P`` options every cell's proposer gets (``"seed"`` is set per cell)."""
        options = self.template.proposer_options
        return options.to_json() if isinstance(options, ProposerOptions) else dict(options or {})

    # -- the cells ------------------------------------------------------------------------------------------------

    def cells(self) -> list[Cell]:
        return plan_grid(self.datasets, self.proposers, self.seeds, self.arms)

    def labels(self) -> list[str]:
        """The compared labels (``PROPOSER/ARM``, or ``PROPOSER`` without arms), in the spec's order."""
        return list(dict.fromkeys(c.label for c in self.cells()))

    def cell_cap(self) -> float | None:
        """Each cell's dollar cap: the experiment's ``max_cost`` over the number of cells (None: no cap)."""
        return None if self.max_cost is None else self.max_cost / len(self.cells())

    def cell_settings(self, cell: Cell) -> SettingsChange:
        """What the run of ``cell`` is given: the template, with the cell's dataset, proposer, seed and arm (none:
        best-of-n, as runs before arms evaluated) and its share of the cap."""
        cap = self.cell_cap()
        return SettingsChange(
            dataset=cell.dataset,
            proposer=cell.proposer,
            seed=cell.seed,
            evaluation=cell.arm or "best-of-n",
            per_run=None if cap is None else Budget(usd=cap),
        ).over(self.template)

    def check_cells(self) -> ExperimentSpec:
        """Check, before any cell starts, every proposer's cell settings as a run checks them
        (``RunSettings.resolve``: model specs, the proposer, its need for a proposer model, its options, the
        example limit, the evaluations per iteration, the held-out examples) and the proposer model for each
        proposer (an engine: installed and logged in); the spec with its options normalised (``operators`` as a
        list)."""
        options = dict(self.options)
        for cell in {c.proposer: c for c in reversed(self.cells())}.values():
            settings = RunSettings.resolve(self.cell_settings(cell), None)
            if self.template.proposer_model is not None:
                check_proposer_model(cell.proposer, self.template.proposer_model)
            typed = settings.proposer_options
            options = {k: list(v) if isinstance(v, tuple) else v for k in options for v in [getattr(typed, k)]}
        return dataclasses.replace(self, template=self.template.replace(proposer_options=options))

    # -- a session's spec -----------------------------------------------------------------------------------------

    @classmethod
    def resolve(
        cls, given: Mapping[str, Any], stored: Mapping[str, object] | None
    ) -> tuple[ExperimentSpec, str | None]:
        """The spec of a session (``metaharness bench harness``): a setting ``given`` (``None``: not given; the
        grid's own settings, and a ``"template"``, the ``SettingsChange`` of the run options given) over the
        ``stored`` experiment's (its JSON; None for a new folder, so ``--out EXP`` alone resumes), else the
        paper's; with the line that says why, the offline proposer when neither a proposer model nor proposers are
        named (as ``metaharness.runner.models.default_models`` does for one run). Every cell's settings are
        checked (``check_cells``) and the spec against the stored one (``check_same_spec`` rules)."""
        template = given.get("template") or SettingsChange()
        given = {**given, **{key: getattr(template, name) for key, name in TEMPLATE_KEYS.items()}}
        old = {"arms": None, "holdout": 0, **stored} if stored else {}
        values: dict[str, Any] = {k: old.get(k) if given.get(k) is None else given[k] for k in SPEC_KEYS}
        values["datasets"] = values["datasets"] or list(PAPER_DATASETS)
        unknown = [d for d in values["datasets"] if d not in PAPER_DATASETS]
        if unknown:
            raise InputError(
                f"--datasets: unknown task(s) {', '.join(unknown)}; choose from {', '.join(PAPER_DATASETS)}."
            )
        values["seeds"] = values["seeds"] or list(PAPER_SEEDS)
        values["options"] = given.get("options") or old.get("options") or {}
        if given.get("arms") is None and not stored:
            values["arms"] = list(ARMS)
        models = default_models(values["task_model"], "tps", values["proposer_model"])
        notice = None
        if not values["proposers"]:
            values["proposers"] = list(PAPER_PROPOSERS if models.proposer_model else ["offline"])
            if not models.proposer_model:
                notice = (
                    f"No proposer model (no API key configured, no --proposer-model): running the offline proposer "
                    f"with {models.task_model}. For the paper's grid pass --proposer-model anthropic:claude-sonnet-4-5 "
                    "(or set ANTHROPIC_API_KEY) and --task-model."
                )
        values["task_model"] = models.task_model
        uses_model = any(needs_model(p) for p in values["proposers"])
        values["proposer_model"] = models.proposer_model if uses_model else None
        values["test"] = True if values["test"] is None else values["test"]
        if values["holdout"] is None:
            values["holdout"] = (values["val_limit"] or 0) // 3
        for key in ("iterations", "evals_per_iter"):  # the others' None is a value (no limit, no cap)
            if values[key] is None:
                del values[key]
        spec = experiment_spec(**values)
        # The cells are checked with the proposer model named, also where no proposer needs it (an engine for
        # offline is refused).
        named = spec.template.replace(proposer_model=models.proposer_model)
        checked = dataclasses.replace(spec, template=named).check_cells().options
        return dataclasses.replace(spec, template=spec.template.replace(proposer_options=checked)), notice

    # -- JSON -----------------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, object]:
        """experiment.json's defining keys (lists for the tuples)."""
        data: dict[str, object] = {}
        for key in SPEC_KEYS:
            if key == "options":
                value: object = dict(self.options)
            elif key in TEMPLATE_KEYS:
                value = getattr(self.template, TEMPLATE_KEYS[key])
            else:
                value = getattr(self, key)
            data[key] = list(value) if isinstance(value, tuple) else value
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ExperimentSpec:
        """A spec from its JSON form (experiment.json; the ``ABOUT_KEYS`` are ignored; one from before arms
        and holdout reads them as None and 0); InputError for unknown or missing keys."""
        unknown = sorted(set(data) - {*SPEC_KEYS, *ABOUT_KEYS})
        missing = [k for k in SPEC_KEYS[:3] if k not in data]
        if unknown or missing:
            raise InputError(
                f"The experiment spec has unknown settings ({', '.join(unknown) or 'none'}) or lacks "
                f"{', '.join(missing) or 'none'}: its settings are {', '.join(SPEC_KEYS)}."
            )
        values: dict[str, Any] = {k: data[k] for k in SPEC_KEYS if k in data}
        return experiment_spec(**values)


def experiment_spec(
    datasets: Sequence[str],
    proposers: Sequence[str],
    seeds: Sequence[int],
    *,
    iterations: int = PAPER_ITERATIONS,
    evals_per_iter: int = DEFAULT_EVALS_PER_ITER,
    val_limit: int | None = None,
    task_model: str | None = None,
    proposer_model: str | None = None,
    test: bool = True,
    max_cost: float | None = None,
    options: Mapping[str, object] | None = None,
    arms: Sequence[str] | None = None,
    holdout: int = 0,
) -> ExperimentSpec:
    """The grid's spec (``ExperimentSpec``) from lists; ``task_model`` None is the embedded model. The run settings
    (``evals_per_iter``, ``val_limit``, the models, ``options``, ``holdout``) make its template."""
    template = SettingsChange(
        task_model=task_model or DEFAULT_TASK_MODEL_SPEC,
        proposer_model=proposer_model,
        val_limit=val_limit,
        evals_per_iter=evals_per_iter,
        holdout=holdout,
        proposer_options=dict(options or {}),
    )
    arms = tuple(arms) if arms is not None else None
    return ExperimentSpec(tuple(datasets), tuple(proposers), tuple(seeds), iterations, test, max_cost, arms, template)


# The rough cost model of ``estimate_cost`` (tokens per model call / per iteration).
EXAMPLE_TOKENS = 400  # an example's own text in a prompt, on top of the harness's prompt
OUTPUT_TOKENS = 150  # a task model's answer
ASSUMED_VAL_EXAMPLES = 100  # when no val_limit is set (the paper's val splits are in the low hundreds)
PROPOSER_INPUT_TOKENS = 300_000  # one iteration of a coding-agent proposer: files read, traces, several turns
PROPOSER_OUTPUT_TOKENS = 20_000


@dataclass(frozen=True)
class CostEstimate:
    """Dollars per cell (None: a model without a known price) and over the grid (None if any cell is unknown)."""

    per_cell: dict[str, float | None]
    total: float | None


def estimate_cost(spec: ExperimentSpec) -> CostEstimate:
    """A rough dollar estimate of the grid before it starts, from the price table.

    Per cell: (seeds + iterations x evals_per_iter) evaluations, each of ``val_limit`` examples (else
    ``ASSUMED_VAL_EXAMPLES``) with one task-model call of (mean seed source size / 4 + ``EXAMPLE_TOKENS``)
    input tokens and ``OUTPUT_TOKENS`` output; plus, for a proposer with a proposer model, a flat
    ``PROPOSER_INPUT_TOKENS`` / ``PROPOSER_OUTPUT_TOKENS`` per iteration. Harnesses that make several calls
    per example, retrieval prompts and agent turns all vary by a factor of several: read it as an order of
    magnitude, and keep a ``max_cost`` cap for the real bound. Local and self-hosted models cost $0.
    """
    prices = PriceTable()
    run = spec.template
    task_price = prices.lookup(run.task_model or DEFAULT_TASK_MODEL_SPEC)
    proposer_price = prices.lookup(run.proposer_model) if run.proposer_model else None
    examples = run.val_limit or ASSUMED_VAL_EXAMPLES
    per_cell: dict[str, float | None] = {}
    for cell in spec.cells():
        seeds = seeds_of(cell.dataset)
        prompt = sum(len(s.source) for s in seeds) / len(seeds) / 4 + EXAMPLE_TOKENS
        calls = (len(seeds) + spec.iterations * (run.evals_per_iter or DEFAULT_EVALS_PER_ITER)) * examples
        task = Usage(input_tokens=int(prompt * calls), output_tokens=OUTPUT_TOKENS * calls)
        dollars = task_price.dollars(task) if task_price else None
        if needs_model(cell.proposer) and run.proposer_model:
            agent = Usage(
                input_tokens=PROPOSER_INPUT_TOKENS * spec.iterations,
                output_tokens=PROPOSER_OUTPUT_TOKENS * spec.iterations,
            )
            dollars = None if dollars is None or proposer_price is None else dollars + proposer_price.dollars(agent)
        per_cell[cell.name] = dollars
    values = list(per_cell.values())
    return CostEstimate(per_cell, None if None in values else sum(v for v in values if v is not None))


def optimize_cell(
    cell: Cell,
    run_dir: Path,
    spec: ExperimentSpec,
    *,
    data_dir: str | Path | None = None,
    dask_scheduler: str | None = None,
    ray_address: str | None = None,
) -> Outcome:
    """The default cell: ``metaharness.runner.optimize.optimize`` in ``run_dir`` (continued when it exists), given
    the cell's settings (``ExperimentSpec.cell_settings``), its examples on the cluster when one is named
    (``cluster``, entered in the cell's own process); its ``Outcome``. The cap is the spec's share, which a rerun
    may have raised (``check_same_spec``), so the run takes it as given."""
    with cluster(dask_scheduler, ray_address):
        return optimize(
            run_dir,
            spec.cell_settings(cell),
            iterations=spec.iterations,
            test=spec.test,
            data_dir=data_dir,
            raise_caps=True,
        )


def check_models(spec: ExperimentSpec) -> None:
    """Raise, before any cell starts, the error a cell would meet connecting to the grid's models: the embedded
    engine not installed, or a hosted model without its API key (``ConfigurationError``,
    checked without a request)."""
    for model in filter(None, (spec.template.task_model, spec.template.proposer_model)):
        if parse_spec(model).provider == "local":
            require_llama_cpp(model)
        else:
            connect(model, cache=False)


def read_cells(exp_dir: str | Path) -> dict[str, CellRecord]:
    """The last record of every cell in ``EXP/cells.jsonl``; a line torn by a kill is ignored."""
    lines = read_jsonl(Path(exp_dir) / CELLS_FILE)
    return {r["cell"]: CellRecord.from_json(r) for r in lines if isinstance(r.get("cell"), str)}


def run_experiment(
    exp_dir: str | Path,
    spec: ExperimentSpec | Mapping[str, object],
    *,
    jobs: int = 1,
    run_cell: RunCell | None = None,
    progress: GridProgress | None = None,
    data_dir: str | Path | None = None,
    dask_scheduler: str | None = None,
    ray_address: str | None = None,
) -> list[CellRecord]:
    """Run (or resume) the grid of ``spec`` (an ``ExperimentSpec``, or its JSON form) in ``exp_dir``; the
    cells' last records.

    ``jobs`` cells run at once in worker processes (joblib's loky backend; ``jobs=1`` runs in this process).
    ``run_cell(cell, run_dir, spec)`` runs one cell (default ``optimize_cell`` with ``data_dir`` and the
    cluster, ``dask_scheduler`` or ``ray_address``, its evaluations go to); an
    exception fails that cell only: it is recorded with its message and the others go on. Each finished cell is
    appended to cells.jsonl and fsynced before the next result is taken (``append_jsonl``:
    a line torn by a kill is closed off, and skipped on reading). A folder holding another spec is refused
    (``InputError`` naming the differing keys), except a larger ``iterations``: then every run continues to it
    (``check_same_spec``). So is a folder another process is running. A worker process that dies (killed, out
    of memory) breaks the pool: the cells in flight run again one at a time, and one whose worker dies again is
    recorded failed. With the default ``run_cell`` the cells' settings and models are checked first
    (``check_cells``, ``check_models``), so a bad setting or a missing key stops the grid before any cell starts.
    Returns the last record of every cell that has one, in plan order.
    """
    if jobs < 1:
        raise InputError(f"jobs must be at least 1, got {jobs}.")
    spec = spec if isinstance(spec, ExperimentSpec) else ExperimentSpec.from_json(spec)
    if run_cell is None:
        spec.check_cells()
        check_models(spec)
    exp = Path(exp_dir)
    exp.mkdir(parents=True, exist_ok=True)
    run = run_cell or functools.partial(
        optimize_cell, data_dir=data_dir, dask_scheduler=dask_scheduler, ray_address=ray_address
    )
    with _locked(exp):
        before = _write_or_check_spec(exp, spec)
        cells = spec.cells()
        last = read_cells(exp)
        pending = [c for c in cells if not _finished(last.get(c.name), spec, before)]
        done = len(cells) - len(pending)

        def finish(record: CellRecord) -> None:
            nonlocal done
            append_jsonl(exp / CELLS_FILE, record.to_json())
            last[record.cell] = record
            done += record.status == "done"
            if progress:
                progress.cell_finished(by_name[record.cell], record, done, len(cells))

        def begin(cell: Cell) -> None:
            if progress:
                progress.cell_started(cell, done, len(cells))

        by_name = {c.name: c for c in pending}
        while pending:
            dispatched: list[Cell] = []
            ended: set[str] = set()
            try:
                for record in _pool_round(run, pending, exp, spec, jobs, dispatched, begin):
                    finish(record)
                    ended.add(record.cell)
                pending = []
            except BrokenProcessPool:
                # A worker died (killed, out of memory, a crash in native code) and took the pool with it. Which of
                # the cells in flight killed it is unknown, so each runs again alone in a fresh pool; one whose
                # worker dies again is recorded failed, and the grid goes on.
                suspects = [c for c in dispatched if c.name not in ended]
                for cell in suspects:
                    try:
                        for record in _pool_round(run, [cell], exp, spec, jobs, [], begin):
                            finish(record)
                    except BrokenProcessPool as exc:
                        finish(_record(cell, f"its worker process died twice ({type(exc).__name__}): {exc}", 0.0))
                pending = [c for c in pending if c.name not in ended and c not in suspects]
    return [last[c.name] for c in cells if c.name in last]


def _pool_round(
    run: RunCell,
    pending: list[Cell],
    exp: Path,
    spec: ExperimentSpec,
    jobs: int,
    dispatched: list[Cell],
    begin: Callable[[Cell], None],
) -> Iterator[CellRecord]:
    """One pass of a joblib pool (loky workers, one cell per task) over ``pending``: records as cells finish.
    ``dispatched`` gets each cell as joblib takes it (a superset of the cells running when a worker dies);
    ``begin`` is told when a cell starts, reckoned in order as one per free worker (for progress lines)."""

    def tasks() -> Iterator[Any]:
        for cell in pending:
            dispatched.append(cell)
            yield delayed(_attempt)(run, cell, exp, spec, owner=os.getpid())

    queue = iter(pending)
    for _ in range(min(jobs, len(pending))):
        begin(next(queue))
    # Cells always run in local processes (loky), also inside a cluster's context: a cell sends only its
    # evaluations to the cluster (optimize_cell).
    parallel = Parallel(
        n_jobs=jobs, backend="loky", return_as="generator_unordered", pre_dispatch="n_jobs", batch_size=1
    )
    for record in parallel(tasks()):
        yield record
        following = next(queue, None)
        if following is not None:
            begin(following)


def _finished(record: CellRecord | None, spec: ExperimentSpec, before: Mapping[str, object] | None) -> bool:
    """Whether a cell's last record is "done" with the spec's iterations (a record without the field counts the
    iterations the folder's spec had before this session)."""
    if record is None or record.status != "done":
        return False
    ran: object = record.iterations
    if ran is None:  # a line of an earlier version: the iterations of the folder's spec before this session
        ran = spec.iterations if before is None else before.get("iterations")
    return isinstance(ran, int) and ran >= spec.iterations


def _attempt(run_cell: RunCell, cell: Cell, exp: Path, spec: ExperimentSpec, owner: int | None = None) -> CellRecord:
    """One cell, in a worker: its record, "failed" with the exception's text on one line if it raised. ``owner`` is
    the experiment's process: a worker exits when it is gone (``_exit_with``)."""
    if owner is not None and owner != os.getpid():
        _exit_with(owner)
    started = time.perf_counter()
    error: str | None = None
    outcome: object = None
    try:
        outcome = run_cell(cell, exp / cell.name, spec)
    except Exception as exc:  # a failed cell is recorded and the grid goes on
        error = f"{type(exc).__name__}: {exc}"
    record = _record(cell, error, time.perf_counter() - started, iterations=spec.iterations)
    if error is None and getattr(outcome, "capped", False):
        spent = RunDirectory.browse(exp / cell.name).spent() if RunDirectory.exists(exp / cell.name) else None
        stopped, iterations = getattr(outcome, "stopped", None), getattr(outcome, "iterations_done", None)
        record = dataclasses.replace(record, status="capped", stopped=stopped, iterations=iterations, spent=spent)
    return record


@functools.cache
def _exit_with(owner: int) -> None:
    """Make this worker process exit as soon as its parent ``owner`` (the experiment's process) is gone. A worker
    otherwise runs its cell to the end after the experiment was killed, holding the run directory's lock against the
    rerun that resumes it. Exiting mid-cell is safe: a run directory survives a kill at any moment."""

    def watch() -> None:
        while os.getppid() == owner:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="metaharness-exit-with-experiment", daemon=True).start()


def _record(cell: Cell, error: str | None, seconds: float, *, iterations: int | None = None) -> CellRecord:
    """A cell's record: "done" (with the iterations it ran to) or "failed" (the error on one line);
    ``_attempt`` makes it "capped" when the run stopped at its cap."""
    return CellRecord(
        cell.name,
        cell.dataset,
        cell.proposer,
        cell.seed,
        cell.name,
        "failed" if error else "done",
        error=" ".join(error.split()) if error else None,
        iterations=iterations,
        seconds=round(seconds, 3),
        finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        arm=cell.arm,
        label=cell.label,
    )


def stored_spec(exp_dir: str | Path) -> dict[str, object] | None:
    """The spec kept in ``EXP/experiment.json`` as stored (its JSON, with the ``ABOUT_KEYS``), None when there
    is none yet."""
    path = Path(exp_dir) / SPEC_FILE
    if not path.exists():
        return None
    try:
        stored = read_json(path)
    except ValueError as exc:
        raise InputError(f"{path} is not valid JSON ({exc}): fix it or choose another --out folder.") from exc
    return stored if isinstance(stored, dict) else {}


def check_same_spec(exp_dir: str | Path, spec: ExperimentSpec) -> None:
    """Refuse (``InputError`` naming the differing keys) a spec other than the one ``exp_dir`` holds. More
    ``iterations`` than stored is allowed: every run continues to the new count. Fewer is refused, since the runs
    went further already. A larger ``max_cost`` is allowed too (capped cells continue with their larger share).
    An experiment from before ``arms`` and ``holdout`` reads them as None and 0."""
    stored = stored_spec(exp_dir)
    if stored is None:
        return
    stored = {"arms": None, "holdout": 0, **stored}
    new = spec.to_json()
    differing = [k for k in SPEC_KEYS if stored.get(k) != new[k] and not _extends(k, stored, spec)]
    if differing:
        changes = "; ".join(f"{k}: {stored.get(k)!r} there, {new[k]!r} now" for k in differing)
        fewer = " (more iterations continue every run; fewer cannot undo them)" if "iterations" in differing else ""
        raise InputError(
            f"{exp_dir} holds an experiment with other settings ({changes}){fewer}. Rerun with its settings to "
            "resume it, or choose another --out folder."
        )


def _more(stored: Mapping[str, object], spec: ExperimentSpec) -> bool:
    old = stored.get("iterations")
    return isinstance(old, int) and spec.iterations > old


def _larger_cap(stored: Mapping[str, object], spec: ExperimentSpec) -> bool:
    old, new = stored.get("max_cost"), spec.max_cost
    return isinstance(old, (int, float)) and (new is None or new > old)


def _extends(key: str, stored: Mapping[str, object], spec: ExperimentSpec) -> bool:
    """A change the rerun may make: more iterations, or a larger cap."""
    return (key == "iterations" and _more(stored, spec)) or (key == "max_cost" and _larger_cap(stored, spec))


def _write_or_check_spec(exp: Path, spec: ExperimentSpec) -> dict[str, object] | None:
    """The folder's spec before this session (None for a new folder), after writing the new one: a new folder's,
    or the stored one with more iterations (and a line of ``extended`` that says when)."""
    check_same_spec(exp, spec)
    stored = stored_spec(exp)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if stored is None:
        atomic_write_json(exp / SPEC_FILE, {**spec.to_json(), "created": now, "metaharness": __version__})
    elif _more(stored, spec) or _larger_cap(stored, spec):
        key = "iterations" if _more(stored, spec) else "max_cost"
        line: dict[str, object] = {"from": stored[key], "to": getattr(spec, key), "at": now}
        if key == "max_cost":
            line["key"] = key
        before = stored.get("extended")
        extended = [*(before if isinstance(before, list) else []), line]
        changed = {"iterations": spec.iterations, "max_cost": spec.max_cost}
        atomic_write_json(exp / SPEC_FILE, {**stored, **changed, "extended": extended})
    return stored


@contextlib.contextmanager
def _locked(exp: Path) -> Iterator[None]:
    """One process per experiment folder (the lock goes with the process, even when it is killed)."""
    with open(exp / LOCK_FILE, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise InputError(f"Another process is running the experiment in {exp}: wait for it or stop it.") from exc
        yield
