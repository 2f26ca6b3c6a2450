"""An experiment's results: per-run figures read from the run directories, the table per dataset and proposer, and
the average over datasets, written as ``results.json``, ``RESULTS.md`` and ``results.html`` (``.page``).

Everything is recomputed from the experiment folder (``experiment.json``, ``cells.jsonl`` and the run directories),
so the results can be rewritten at any time, also while the grid is still running.

The arithmetic (every figure a ``stat``: ``{"mean", "sd", "n"}``):

- per run (``run_figures``): the best validation score and its candidate (highest score among the supported
  candidates, the earliest on a tie), that candidate's *judged* score (on the validation examples the search held
  out, ``holdout``; else ``None``) and test score when the run evaluated it on the test split (else ``None``), the
  validation example-evaluations the search spent (``evals``, every stage of every candidate), tokens and dollars as
  the total of ``spend.jsonl`` (every role, every session), the best-so-far per iteration as the ``best_score`` of
  the iteration's last ``summary.jsonl`` line, and the mean absolute error ``|actual - predicted|`` over the
  candidates with a result (scored on every search example: a partly scored one has no actual score yet) that
  carried ``prediction["score"]`` (``None`` without predictions);
- per dataset and proposer: over the seeds' runs, the mean and the sample sd (n - 1; ``None`` for one value) of each
  figure; a run without the figure (no test score, no predictions) is left out of that figure only, ``n`` says how
  many runs it holds. The curve is, per iteration, the mean best-so-far over the runs that reached that iteration;
- the average over datasets, per proposer: the mean is the mean over datasets of the per-dataset means (datasets
  without the figure left out); the sd is the sample sd over seeds of the per-seed averages across datasets, counting
  only the seeds that have the figure in every dataset (``n`` is the number of such seeds); the curve is, per
  iteration, the mean over datasets of the per-dataset curve points;
- paired differences (``paired_differences``), per pair of proposers (a, b) in the experiment's order: for each
  seed that both have in every dataset, the mean over datasets of a's figure minus b's (the best validation score;
  again for the judged score); the difference is the ``stat`` of these per-seed values with a 95% interval
  (Student's t over the seeds). Beside it, over every (dataset, seed) both ran, how often a ended above, level with
  (within 1e-9) or below b. Same seed, same probe sample and sampler state, so the pairing takes out what a seed's
  draws share.

"Proposer" in the tables is the cell's label: ``PROPOSER/ARM`` in a grid of evaluation arms
(``metaharness.experiment.grid``). Cells stopped at their cap (``"capped"``) are listed apart with what they
spent and are in no mean: a capped run is not a finished one.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, TypedDict

from scipy.stats import t as student_t

from metaharness.errors import InputError
from metaharness.experiment.grid import SPEC_FILE, ExperimentSpec, read_cells
from metaharness.json_types import JSONObject
from metaharness.report.summary import markdown_cell, markdown_table
from metaharness.report.view import RunView
from metaharness.store.files import read_json
from metaharness.store.run_dir import RunDirectory

RESULTS_JSON = "results.json"
RESULTS_MD = "RESULTS.md"
RESULTS_HTML = "results.html"
Figure = Literal["best_val", "judged", "test", "evals", "tokens", "usd", "mae"]
# The per-run figures that get a mean and sd in the table, in column order.
FIGURES: tuple[Figure, ...] = ("best_val", "judged", "test", "evals", "tokens", "usd", "mae")


class Stat(TypedDict):
    """A figure over runs (``stat``)."""

    mean: float | None
    sd: float | None
    n: int
    ci95: list[float] | None


class RunFigures(TypedDict):
    """One run's figures (``run_figures``)."""

    best_id: str | None
    best_val: float | None
    judged: float | None
    test: float | None
    evals: float
    tokens: float
    usd: float
    mae: float | None
    curve: list[list[float]]
    iterations: int
    candidates: int
    failed: int


class RunRow(RunFigures):
    """A finished cell's run in ``results.json``'s ``runs``: where it ran and its figures."""

    dataset: str
    proposer: str
    seed: int
    run_dir: str


class CappedCell(TypedDict):
    cell: str
    dataset: str
    proposer: str
    seed: int
    spent: dict[str, float] | None
    stopped: str | None


class FailedCell(TypedDict):
    cell: str
    dataset: str
    proposer: str
    seed: int
    error: str | None


class FigureStats(TypedDict):
    """The stat over runs of each of ``FIGURES``."""

    best_val: Stat
    judged: Stat
    test: Stat
    evals: Stat
    tokens: Stat
    usd: Stat
    mae: Stat


class Group(FigureStats):
    """The runs of one dataset and proposer (or, as ``Average``, of one proposer over datasets); its dict's keys
    are runs, seeds, the figures, curve (``_group``)."""

    runs: int
    seeds: list[int]
    curve: list[list[float]]


class Average(Group):
    datasets: int


class Pair(TypedDict):
    """A paired difference (``paired_differences``)."""

    a: str
    b: str
    difference: Stat
    better: int
    tied: int
    worse: int


class ExperimentTable(TypedDict):
    """``results.json`` (``experiment_table``)."""

    experiment: JSONObject
    runs: dict[str, RunRow]
    failed: list[FailedCell]
    capped: list[CappedCell]
    datasets: dict[str, dict[str, Group]]
    average: dict[str, Average]
    paired: list[Pair]
    paired_judged: list[Pair]


def run_figures(run_dir: Path) -> RunFigures:
    """One run's figures (see the module docstring): ``best_id``, ``best_val``, ``judged``, ``test``, ``evals``,
    ``tokens``, ``usd``, ``mae``, ``curve`` (``[[iteration, best so far], ...]``), ``iterations``, ``candidates``,
    ``failed``."""
    run = RunDirectory.browse(Path(run_dir))
    view = RunView.load(run)
    best = view.best
    test = view.test.get(best.id) if best is not None else None
    judged = view.holdout.get(best.id) if best is not None else None
    evals = sum(
        increment.spend.evals
        for record in view.records
        if record.evaluation is not None
        for increment in record.evaluation.increments
    )
    spent = run.spent()
    lines = {int(e["iteration"]): e for e in view.log if e.get("type") == "iteration"}
    curve = [
        [it, float(lines[it]["best_score"])]
        for it in sorted(lines)
        if isinstance(lines[it].get("best_score"), (int, float))
    ]
    return {
        "best_id": best.id if best is not None else None,
        "best_val": best.score if best is not None else None,
        "judged": judged.primary if judged is not None else None,
        "test": test.primary if test is not None else None,
        "evals": float(evals),
        "tokens": float(spent["tokens"]),
        "usd": float(spent["usd"]),
        "mae": view.prediction_error(),
        "curve": curve,
        "iterations": len(lines),
        "candidates": len(view.records),
        "failed": sum(1 for r in view.records if r.failed),
    }


def stat(values: list[float | None]) -> Stat:
    """Mean and sample sd (n - 1) of the values that are not ``None``, and the 95% interval of the mean (Student's
    t): ``{"mean", "sd", "n", "ci95"}`` (sd and interval ``None`` below two values, mean ``None`` for none)."""
    present = [float(v) for v in values if v is not None]
    mean = statistics.fmean(present) if present else None
    sd = statistics.stdev(present) if len(present) > 1 else None
    return {"mean": mean, "sd": sd, "n": len(present), "ci95": interval95(mean, sd, len(present))}


def interval95(mean: float | None, sd: float | None, n: int) -> list[float] | None:
    """The 95% interval of a mean of ``n`` values with sample sd ``sd`` (Student's t), None below two values."""
    if mean is None or sd is None or n < 2:
        return None
    half = float(student_t.ppf(0.975, n - 1)) * sd / n**0.5
    return [mean - half, mean + half]


def mean_curve(curves: list[list[list[float]]]) -> list[list[float]]:
    """Per iteration, the mean of the curves' points at that iteration (over the curves that have it)."""
    points: dict[int, list[float]] = {}
    for curve in curves:
        for it, value in curve:
            points.setdefault(int(it), []).append(float(value))
    return [[it, statistics.fmean(points[it])] for it in sorted(points)]


def experiment_table(exp_dir: Path) -> ExperimentTable:
    """The experiment's results (arithmetic in the module docstring):

    ``{"experiment": experiment.json, "runs": {cell: {"dataset", "proposer", "seed", "run_dir", **figures}},
    "failed": [{"cell", "dataset", "proposer", "seed", "error"}], "capped": [{"cell", ..., "spent", "stopped"}],
    "datasets": {dataset: {proposer: group}}, "average": {proposer: group}, "paired": [...], "paired_judged":
    [...]}``, a group being ``{"runs": n, "seeds": [...], figure: stat, ..., "curve": [[iteration, mean], ...]}``;
    datasets and proposers (labels) in ``experiment.json``'s order.
    """
    exp_dir = Path(exp_dir)
    if not (exp_dir / SPEC_FILE).exists():
        raise InputError(f"{exp_dir} is not an experiment folder (no {SPEC_FILE}).")
    spec = read_json(exp_dir / SPEC_FILE)
    if not isinstance(spec, dict):
        raise InputError(f"{exp_dir / SPEC_FILE} is not a JSON object.")
    runs: dict[str, RunRow] = {}
    failed: list[FailedCell] = []
    capped: list[CappedCell] = []
    for cell, line in read_cells(exp_dir).items():
        dataset, proposer, seed = line.dataset, line.label or line.proposer, line.seed
        if line.status == "done":
            figures = run_figures(exp_dir / line.run_dir)
            runs[cell] = RunRow(dataset=dataset, proposer=proposer, seed=seed, run_dir=line.run_dir, **figures)
        elif line.status == "capped":
            spent = None if line.spent is None else dict(line.spent)
            capped.append(
                CappedCell(cell=cell, dataset=dataset, proposer=proposer, seed=seed, spent=spent, stopped=line.stopped)
            )
        else:
            failed.append(FailedCell(cell=cell, dataset=dataset, proposer=proposer, seed=seed, error=line.error))
    datasets = _ordered(spec.get("datasets", []), [r["dataset"] for r in runs.values()])
    declared = ExperimentSpec.from_json(spec).labels() if spec.get("proposers") else []
    proposers = _ordered(declared, [r["proposer"] for r in runs.values()])
    table: dict[str, dict[str, Group]] = {}
    for dataset in datasets:
        groups = {}
        for proposer in proposers:
            members = [r for r in runs.values() if r["dataset"] == dataset and r["proposer"] == proposer]
            if members:
                groups[proposer] = _group(members)
        table[dataset] = groups
    average = {}
    for proposer in proposers:
        per_dataset = [(table[d][proposer], _by_seed(runs, d, proposer)) for d in datasets if proposer in table[d]]
        if per_dataset:
            average[proposer] = _average(per_dataset)
    return {
        "experiment": spec,
        "runs": runs,
        "failed": failed,
        "capped": capped,
        "datasets": table,
        "average": average,
        "paired": paired_differences(runs, datasets, proposers),
        "paired_judged": paired_differences(runs, datasets, proposers, "judged"),
    }


def paired_differences(
    runs: dict[str, RunRow], datasets: list[str], proposers: list[str], figure: Figure = "best_val"
) -> list[Pair]:
    """Every pair of proposers (a before b in ``proposers``): ``{"a", "b", "difference": stat, "better", "tied",
    "worse"}``, a's ``figure`` minus b's paired by seed (arithmetic in the module docstring)."""
    pairs: list[Pair] = []
    for i, a in enumerate(proposers):
        for b in proposers[i + 1 :]:
            both: dict[tuple[str, int], tuple[float, float]] = {}
            for d in datasets:
                others = _by_seed(runs, d, b)
                for s, ra in _by_seed(runs, d, a).items():
                    rb = others.get(s)
                    if rb is not None and (x := ra[figure]) is not None and (y := rb[figure]) is not None:
                        both[d, s] = (x, y)
            seeds = sorted({s for _, s in both})
            complete = [s for s in seeds if all((d, s) in both for d in datasets)]
            per_seed = [statistics.fmean(both[d, s][0] - both[d, s][1] for d in datasets) for s in complete]
            gaps = [x - y for x, y in both.values()]
            pairs.append(
                {
                    "a": a,
                    "b": b,
                    "difference": stat(list(per_seed)),
                    "better": sum(g > 1e-9 for g in gaps),
                    "tied": sum(abs(g) <= 1e-9 for g in gaps),
                    "worse": sum(g < -1e-9 for g in gaps),
                }
            )
    return pairs


def _ordered(declared: list[str], seen: list[str]) -> list[str]:
    return list(dict.fromkeys([*declared, *seen]))


def _group(members: list[RunRow]) -> Group:
    stats = {name: stat([r[name] for r in members]) for name in FIGURES}
    return Group(
        runs=len(members),
        seeds=sorted(r["seed"] for r in members),
        **_figure_stats(stats),
        curve=mean_curve([r["curve"] for r in members]),
    )


def _figure_stats(stats: Mapping[Figure, Stat]) -> FigureStats:
    """The stat of each of ``FIGURES``, as a group's keys."""
    return FigureStats(
        best_val=stats["best_val"],
        judged=stats["judged"],
        test=stats["test"],
        evals=stats["evals"],
        tokens=stats["tokens"],
        usd=stats["usd"],
        mae=stats["mae"],
    )


def _by_seed(runs: dict[str, RunRow], dataset: str, proposer: str) -> dict[int, RunRow]:
    return {r["seed"]: r for r in runs.values() if r["dataset"] == dataset and r["proposer"] == proposer}


def _average(per_dataset: list[tuple[Group, dict[int, RunRow]]]) -> Average:
    groups = [group for group, _ in per_dataset]
    seeds = sorted(set.intersection(*(set(by_seed) for _, by_seed in per_dataset)))
    stats: dict[Figure, Stat] = {}
    for name in FIGURES:
        means = [m for g in groups if (m := g[name]["mean"]) is not None]
        complete = [s for s in seeds if all(by_seed[s][name] is not None for _, by_seed in per_dataset)]
        per_seed = [statistics.fmean(_present(by_seed[s][name]) for _, by_seed in per_dataset) for s in complete]
        mean = statistics.fmean(means) if means else None
        sd = statistics.stdev(per_seed) if len(per_seed) > 1 else None
        stats[name] = Stat(mean=mean, sd=sd, n=len(per_seed), ci95=interval95(mean, sd, len(per_seed)))
    return Average(
        runs=sum(g["runs"] for g in groups),
        datasets=len(groups),
        seeds=seeds,
        **_figure_stats(stats),
        curve=mean_curve([g["curve"] for g in groups]),
    )


def _present(value: float | None) -> float:
    """A figure the caller has checked is there."""
    if value is None:
        raise ValueError("a figure checked as present is missing")
    return value


COLUMNS = [
    "proposer",
    "runs",
    "best val mean (sd)",
    "judged mean (sd)",
    "test mean (sd)",
    "val evals",
    "tokens",
    "USD",
    "|pred-actual|",
]
MARKDOWN_COLUMNS = [markdown_cell(c) for c in COLUMNS]


def table_rows(groups: Mapping[str, Group]) -> list[list[str]]:
    """One row per proposer under ``COLUMNS`` (shared by ``RESULTS.md`` and the page)."""
    return [
        [
            proposer,
            str(g["runs"]),
            _figure(g["best_val"], "{:.3f}"),
            _figure(g["judged"], "{:.3f}"),
            _figure(g["test"], "{:.3f}"),
            _figure(g["evals"], "{:.0f}"),
            _figure(g["tokens"], "{:.0f}"),
            _figure(g["usd"], "{:.4f}"),
            _figure(g["mae"], "{:.3f}"),
        ]
        for proposer, g in groups.items()
    ]


def _figure(value: Stat, form: str, mean_form: str | None = None) -> str:
    if value["mean"] is None:
        return "-"
    text = (mean_form or form).format(value["mean"])
    return text + (f" ({form.format(value['sd'])})" if value["sd"] is not None else "")


PAIRED_COLUMNS = [
    "a - b",
    "seeds",
    "mean difference (sd over seeds)",
    "95% interval",
    "runs a above / level / below b",
]


def paired_rows(table: ExperimentTable, key: Literal["paired", "paired_judged"] = "paired") -> list[list[str]]:
    """One row per pair of ``table[key]`` (``paired``: best val; ``paired_judged``) under ``PAIRED_COLUMNS``
    (shared by ``RESULTS.md`` and the page)."""
    return [
        [
            f"{p['a']} - {p['b']}",
            str(p["difference"]["n"]),
            _figure(p["difference"], "{:.3f}", mean_form="{:+.3f}"),
            _interval(p["difference"].get("ci95")),
            f"{p['better']} / {p['tied']} / {p['worse']}",
        ]
        for p in table.get(key, [])
    ]


def _interval(ci: list[float] | None) -> str:
    return f"[{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "-"


PAIRED_NOTE = (
    "Best val score of a minus b, paired by seed: per seed the mean over datasets of the difference, then the mean "
    "(sample sd, 95% interval by Student's t) over the seeds both have in every dataset; the last column counts the "
    "(dataset, seed) runs."
)
JUDGED_NOTE = (
    "The same for the judged score: the returned candidate on the validation examples its search never scored."
)


def capped_rows(table: ExperimentTable) -> list[list[str]]:
    return [[c["cell"], str(c.get("spent") or ""), str(c.get("stopped") or "")[:300]] for c in table.get("capped", [])]


def failed_rows(table: ExperimentTable) -> list[list[str]]:
    return [[f["cell"], str(f["error"] or "")[:300]] for f in table["failed"]]


def render_markdown(table: ExperimentTable) -> str:
    spec = table["experiment"]
    lines = [
        "# Experiment results",
        "",
        f"Task model `{spec.get('task_model')}`, proposer model `{spec.get('proposer_model')}`; "
        f"{spec.get('iterations')} iterations, {spec.get('evals_per_iter')} evaluations per iteration, "
        f"val limit {spec.get('val_limit')}; seeds {spec.get('seeds')}. Mean (sample sd) over seeds.",
    ]
    for dataset, groups in table["datasets"].items():
        lines += ["", f"## {dataset}", "", *markdown_table(MARKDOWN_COLUMNS, table_rows(groups))]
    lines += [
        "",
        "## Average over datasets",
        "",
        "Mean over datasets of the per-dataset means; sd over seeds of the per-seed averages across datasets.",
        "",
        *markdown_table(MARKDOWN_COLUMNS, table_rows(table["average"])),
    ]
    if table["paired"]:
        lines += ["", "## Paired differences", "", PAIRED_NOTE, "", *markdown_table(PAIRED_COLUMNS, paired_rows(table))]
    if any(p["difference"]["n"] for p in table.get("paired_judged", [])):
        rows = paired_rows(table, "paired_judged")
        lines += ["", "## Paired differences, judged", "", JUDGED_NOTE, "", *markdown_table(PAIRED_COLUMNS, rows)]
    if table.get("capped"):
        lines += ["", "## Capped cells (not in the means)", ""]
        lines += markdown_table(["cell", "spent", "stopped"], capped_rows(table))
    if table["failed"]:
        lines += ["", "## Failed cells", "", *markdown_table(["cell", "error"], failed_rows(table))]
    return "\n".join(lines) + "\n"
