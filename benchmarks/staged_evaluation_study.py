"""Staged evaluation at equal spend: a noisy simulation of the loop's policies, with no model involved.

    python benchmarks/staged_evaluation_study.py                      # 200 seeds, 30 per sweep row
    python benchmarks/staged_evaluation_study.py --quick              # 40 seeds, 10 per sweep row
    python benchmarks/staged_evaluation_study.py --seeds 400 --out reports/staged-evaluation
    python benchmarks/staged_evaluation_study.py --point              # every seed on the point fit

Why a simulation: a real run measures each policy once, on one landscape, with a few seeds; here every policy
meets the same proposals (common random numbers per seed, iteration and proposal) hundreds of times, and the
metric is the *true* score of the candidate the run returns, which a real run cannot see.

What is real: the decisions. Candidates are ``Candidate`` objects with
``Evaluation`` s built stage by stage; each round builds a
``Standing`` and calls ``decide`` as
``Optimizer._evaluate`` does (a round's steps take each chosen candidate to its target in the run's
``ExampleOrder``; rounds until no steps); the returned candidate is
``metaharness.frontier.best``. What is simulated: the proposer and the evaluator.

- Examples: each candidate has a latent difficulty per example (uniform); it solves an example when the latent is
  below its true score. A child keeps its parent's latent on each example with probability ``1 - churn`` (else a
  fresh one), so parent and child outcomes are correlated and paired differences are informative.
- Proposals (``proposals`` an iteration): the parent is the run's returned candidate with probability
  ``parent_best``, else one of the other three best measured supported candidates. A revision is *identical*
  (behaves as its parent: gain 0), *quiet* (the probe saw no difference, but it has a small gain) or *loud* (the
  probe saw one). The prediction of identical and quiet revisions is the parent's measured score with a small std;
  of loud ones the parent's measured score plus the gain plus a probe error (optimistic by ``probe_bias``).
- Cost: a revision is *free* with probability ``free_share`` (it repeats its parent's calls, which the run cached:
  no example-evaluation is charged on its parent's examples); otherwise every example costs one example-evaluation
  and its tokens.

- Outputs: a candidate's output on an example is its behaviour's (an identical revision keeps its parent's
  behaviour, any other revision has its own), so the loop's `Standing` can merge candidates that behave alike.

The landscape is fitted to the committed runs (``fit``; every value says where it came from). Its parameters are
*bootstrapped*, not point-fitted: each seed draws the fitted runs' revisions with replacement (within each run) and
fits its own landscape from them (``bootstrap``), so the paired intervals over seeds carry the uncertainty of the fit
(the probe error sd, a difference of two nearly equal moments, ranges over [0.000, 0.048] in the bootstrap) as well
as the simulation's noise; ``--point`` runs every seed on the point fit instead. The sweep moves one family of
parameters at a time, on each seed's landscape. Predictions cost nothing here (the replay of recorded runs,
benchmarks/replay_study.py, charges them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from metaharness import frontier
from metaharness.budget import Budget, Spend
from metaharness.candidate import EVALUATED, IMPLEMENTED, Candidate, Evaluation, Increment, Prediction, candidate_id
from metaharness.search.staging import ExampleOrder, Policy, Standing, decide

Transform = Callable[["Landscape"], "Landscape"]  # a sweep row's change of a seed's landscape (`Move`)

ROOT = Path(__file__).resolve().parents[1]
# Runs whose summary.jsonl records every candidate with its prediction (offline-grid keeps only run-level results).
SOURCES = (
    "reports/program-graph/symptom2disease-8iter/summary.jsonl",
    "reports/offline-search/symptom2disease-val25/summary.jsonl",
    "reports/offline-search/lawbench-val25/summary.jsonl",
    "reports/offline-search/lawbench-val50/summary.jsonl",
    "reports/offline-search/uspto-val25/summary.jsonl",
)
CLEAN_CACHE = SOURCES[0]  # the only run made on an empty response cache: its cached calls are the revisions' own
ARMS: tuple[Policy, ...] = ("planner", "greedy", "threshold", "thompson", "best-of-n", "halving", "gate")
BASELINES: tuple[Policy, ...] = ("halving", "greedy", "threshold", "thompson", "best-of-n", "gate")
# The files whose code the study runs (a run with local changes to them says so beside its commit).
USED = (
    "metaharness/search/staging",
    "metaharness/budget.py",
    "metaharness/candidate.py",
    "metaharness/frontier.py",
    "benchmarks/staged_evaluation_study.py",
)


@dataclass(frozen=True)
class Landscape:
    """What the simulated proposer and evaluator do (module docstring)."""

    share: int = 50
    seed_score: float = 0.46
    proposals: int = 12
    evals_per_iter: int = 3
    parent_best: float = 0.6
    identical: float = 0.3
    quiet: float = 0.1
    quiet_mean: float = 0.0
    quiet_sd: float = 0.03
    quiet_std: float = 0.04
    loud_mean: float = -0.08
    loud_sd: float = 0.12
    loud_gains: tuple[float, ...] = ()  # measured gains to resample (shrunk to ``loud_sd``); empty: Normal
    probe_sd: float = 0.08
    probe_bias: float = 0.0
    loud_std: float = 0.15
    churn: float = 0.2
    free_share: float = 0.0
    tokens: float = 700.0
    token_log_sd: float = 0.3


# --- the fit ----------------------------------------------------------------------------------------------------
def _revisions(path: Path) -> list[dict[str, float | bool]]:
    """Every evaluated revision with a prediction whose base was evaluated on the same examples."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by_id = {r["id"]: r for r in rows if r["type"] == "candidate"}
    best = {r["iteration"]: r["best"] for r in rows if r["type"] == "iteration"}
    out: list[dict[str, float | bool]] = []
    for r in rows:
        prediction = r.get("prediction") or {}
        base = by_id.get(prediction.get("base") or r.get("parent"))
        if r["type"] != "candidate" or r["status"] != "evaluated" or not prediction or not base:
            continue
        if base["status"] != "evaluated" or base["evaluation"]["examples"] != r["evaluation"]["examples"]:
            continue
        probe, flips = prediction.get("probe") or {}, prediction.get("flips") or {}
        cost, base_cost = r["evaluation"]["cost"], base["evaluation"]["cost"]
        n = r["evaluation"]["examples"]
        out.append(
            {
                "n": n,
                "gain": r["score"] - base["score"],
                "error": r["score"] - prediction["score"],
                "std": float(prediction.get("std", 0.0)),
                "same": bool(prediction.get("same_as_base_on_probe")),
                "flips": (len(flips.get("gained", [])) + len(flips.get("lost", []))) / max(1, probe.get("examples", 1)),
                "parent_best": best.get(r["iteration"] - 1) == base["id"],
                "cached": cost.get("cached_calls", 0.0) >= cost.get("calls", 1.0),
                "token_ratio": _tokens(r) / max(1.0, _tokens(base)),
                "base_tokens": _tokens(base),
                "prompt_same": abs(cost.get("context_tokens", 0.0) - base_cost.get("context_tokens", 0.0)) < 1e-6,
            }
        )
    return out


def _tokens(row: dict) -> float:
    ev = row["evaluation"]
    return (ev["cost"].get("input_tokens", 0.0) + ev["cost"].get("output_tokens", 0.0)) / max(1, ev["examples"])


def fit(root: Path = ROOT) -> tuple[Landscape, dict[str, str]]:
    """The landscape fitted to the committed runs (method of moments; the measurement noise of a gain, the
    per-example flip rate over its examples, is subtracted from the spread of measured gains), and where each
    value came from."""
    return fit_rows({source: _revisions(root / source) for source in SOURCES})


def bootstrap(seed: int, root: Path = ROOT) -> Landscape:
    """A landscape fitted to a bootstrap sample of the committed runs' revisions (drawn with replacement within
    each run, with ``seed``): one draw of the fit's uncertainty."""
    rng = np.random.default_rng([seed, 7919])
    runs = {}
    for source, rows in _sources(root).items():
        picks = rng.integers(0, len(rows), len(rows)) if rows else []
        runs[source] = [rows[int(k)] for k in picks]
    return fit_rows(runs)[0]


_SOURCE_CACHE: dict[Path, dict[str, list[dict[str, float | bool]]]] = {}


def _sources(root: Path) -> dict[str, list[dict[str, float | bool]]]:
    if root not in _SOURCE_CACHE:
        _SOURCE_CACHE[root] = {source: _revisions(root / source) for source in SOURCES}
    return _SOURCE_CACHE[root]


def fit_rows(runs: dict[str, list[dict[str, float | bool]]]) -> tuple[Landscape, dict[str, str]]:
    """The landscape of the revisions ``runs`` holds (source -> rows of `_revisions`); see `fit`."""
    revs = [r for rows in runs.values() for r in rows]
    loud = [r for r in revs if not r["same"]]
    same = [r for r in revs if r["same"]]
    identical = [r for r in same if r["gain"] == 0]
    quiet = [r for r in same if r["gain"] != 0]
    flip = statistics.fmean(float(r["flips"]) for r in loud)

    def noise(rows: Sequence[dict]) -> float:
        return statistics.fmean(flip / float(r["n"]) for r in rows)

    def moments(values: Sequence[float], rows: Sequence[dict]) -> tuple[float, float]:
        return statistics.fmean(values), math.sqrt(max(0.0, statistics.pvariance(values) - noise(rows)))

    loud_mean, loud_sd = moments([float(r["gain"]) for r in loud], loud)
    quiet_mean, quiet_sd = moments([float(r["gain"]) for r in quiet], quiet) if len(quiet) > 1 else (0.0, 0.0)
    errors = [float(r["error"]) for r in loud]
    bias, probe_sd = moments(errors, loud)
    # churn: a child's flip rate is (1 - churn) |gain| + churn * 2 s (1 - s) near a score s (uniform latents)
    abs_gain = _mean_abs(loud_mean, loud_sd)
    churn = min(1.0, max(0.0, (flip - abs_gain) / (0.5 - abs_gain)))
    clean = runs[CLEAN_CACHE]
    ratios = [math.log(float(r["token_ratio"])) for r in loud if float(r["token_ratio"]) > 0]
    landscape = Landscape(
        parent_best=statistics.fmean(float(r["parent_best"]) for r in revs),
        identical=len(identical) / len(revs),
        quiet=len(quiet) / len(revs),
        quiet_mean=quiet_mean,
        quiet_sd=quiet_sd,
        quiet_std=statistics.fmean(float(r["std"]) for r in same) if same else Landscape.quiet_std,
        loud_mean=loud_mean,
        loud_sd=loud_sd,
        loud_gains=tuple(sorted(float(r["gain"]) for r in loud)),
        probe_sd=probe_sd,
        probe_bias=-bias,
        loud_std=statistics.fmean(float(r["std"]) for r in loud),
        churn=churn,
        free_share=statistics.fmean(float(r["cached"]) for r in clean) if clean else 0.0,
        token_log_sd=statistics.pstdev(ratios),
    )
    n_runs = f"{len(revs)} revisions of the {len(SOURCES)} runs"
    where = {
        "share": "50: the whole validation split of reports/program-graph/symptom2disease-8iter (the fitted "
        "runs use 25 or 50)",
        "seed_score": "0.46: the retrieval seed's measured score in reports/program-graph/symptom2disease-8iter",
        "proposals": "12: the offline proposer's plans per iteration (its default)",
        "evals_per_iter": "3 full evaluations per iteration: the loop's default (evals_per_iter), as in every "
        "fitted run",
        "parent_best": f"share of the {n_runs} whose base was the run's best after the previous iteration",
        "identical": f"share of the {n_runs} that were the same as their base on the probe and measured a gain of "
        "exactly 0",
        "quiet": "share that were the same on the probe but measured a non-zero gain",
        "quiet_mean": "mean measured gain of those",
        "quiet_sd": "sd of their measured gains minus the measurement noise (flip rate / examples)",
        "quiet_std": "mean std the proposer reported for revisions the same on the probe",
        "loud_mean": f"mean measured gain of the {len(loud)} revisions the probe saw differ",
        "loud_sd": "sd of their measured gains minus the measurement noise",
        "loud_gains": "their measured gains, resampled and shrunk towards their mean to loud_sd (module docstring)",
        "probe_sd": "sd of their (actual - predicted) minus the measurement noise",
        "probe_bias": "minus the mean of their (actual - predicted): how optimistic the predictions were",
        "loud_std": "mean std the proposer reported for them",
        "churn": f"from their mean flip rate on the probe ({flip:.3f} of examples changed outcome), less what their "
        "gains explain",
        "free_share": f"share of the {len(clean)} revisions of {CLEAN_CACHE} (empty response cache) whose every "
        "validation call repeated a cached call",
        "tokens": "700: the retrieval seed's task-model tokens per example there (699)",
        "token_log_sd": "sd of log(child / base tokens per example) over the loud revisions",
    }
    return landscape, where


def _mean_abs(mean: float, sd: float) -> float:
    """E|X| for X ~ Normal(mean, sd)."""
    if sd <= 0:
        return abs(mean)
    z = mean / sd
    return sd * math.sqrt(2 / math.pi) * math.exp(-z * z / 2) + mean * math.erf(z / math.sqrt(2))


def _loud_gain(land: Landscape, z: float, u: float) -> float:
    """A loud revision's true gain: a measured gain of the fitted runs drawn with ``u`` and shrunk towards their
    mean so that its spread is ``loud_sd`` (what the measurements hold beyond their noise; the shape, skew and
    tail of the measured gains kept), else Normal (``z``)."""
    if not land.loud_gains:
        return land.loud_mean + land.loud_sd * z
    gains = land.loud_gains
    raw = statistics.pstdev(gains)
    measured = gains[min(len(gains) - 1, int(u * len(gains)))]
    return land.loud_mean + (measured - land.loud_mean) * (land.loud_sd / raw if raw > 0 else 0.0)


# --- the simulation ---------------------------------------------------------------------------------------------
@dataclass
class _Truth:
    score: float
    latent: np.ndarray
    tokens: float
    free: bool
    behaviour: str = ""


class World:
    """One seed's run under one policy: the candidates, what is true of each, and the loop's rounds."""

    def __init__(self, landscape: Landscape, seed: int, policy: Policy) -> None:
        self.land, self.seed, self.policy = landscape, seed, policy
        ids = [f"v{i:03d}" for i in range(landscape.share)]
        self.position = {cid: i for i, cid in enumerate(ids)}
        self.order = ExampleOrder.of(ids, seed=seed)
        self.candidates: list[Candidate] = []
        self.truth: dict[str, _Truth] = {}
        self.spent = Spend()
        rng = np.random.default_rng([seed, 0])
        seed_truth = _Truth(landscape.seed_score, rng.random(landscape.share), landscape.tokens, False, "c001")
        self._add(None, 0, None, seed_truth)
        self._rounds(0, [self.candidates[0].id], "all", Budget())

    def _add(self, parent: str | None, iteration: int, prediction: dict | None, truth: _Truth) -> str:
        cid = candidate_id(len(self.candidates) + 1)
        predicted = Prediction.from_json(prediction) if prediction is not None else None
        self.candidates.append(Candidate(cid, parent, iteration, "", IMPLEMENTED, prediction=predicted))
        self.truth[cid] = truth
        return cid

    def iterate(self, iteration: int) -> None:
        """Propose (common random numbers per seed, iteration and proposal), then the loop's rounds."""
        land = self.land
        supported = sorted((c for c in self.candidates if c.supported), key=lambda c: -c.score)
        best = frontier.best(self.candidates)
        assert best is not None
        others = [c for c in supported if c.id != best.id][:3]
        fresh = []
        for k in range(land.proposals):
            rng = np.random.default_rng([self.seed, iteration, k])
            u_parent, u_other, u_kind, u_free, u_gain = rng.random(5)
            effect, error, token = rng.standard_normal(3)
            keep, renew = rng.random(land.share), rng.random(land.share)
            parent = best if u_parent < land.parent_best or not others else others[int(u_other * len(others))]
            mother = self.truth[parent.id]
            if u_kind < land.identical:
                gain, churn, loud = 0.0, 0.0, False
            elif u_kind < land.identical + land.quiet:
                gain, churn, loud = land.quiet_mean + land.quiet_sd * effect, land.churn, False
            else:
                gain, churn, loud = _loud_gain(land, effect, u_gain), land.churn, True
            score = min(0.99, max(0.01, mother.score + gain))
            tokens = mother.tokens * (math.exp(land.token_log_sd * token) if loud else 1.0)
            latent = np.where(keep < churn, renew, mother.latent)
            predicted = parent.score + (score - mother.score + land.probe_bias + land.probe_sd * error if loud else 0.0)
            prediction = {
                "base": parent.id,
                "score": min(1.0, max(0.0, predicted)),
                "std": land.loud_std if loud else land.quiet_std,
                "tokens_per_example": tokens,
                "usd_per_example": 0.0,
                "repeat": 1.0 if u_free < land.free_share else 0.0,
            }
            same = u_kind < land.identical  # behaves as its parent: its outputs are its parent's
            truth = _Truth(score, latent, tokens, u_free < land.free_share, mother.behaviour if same else "")
            cid = self._add(parent.id, iteration, prediction, truth)
            truth.behaviour = truth.behaviour or cid
            fresh.append(cid)
        self._rounds(iteration, fresh, self.policy, Budget(evals=float(land.evals_per_iter * land.share)))

    def _rounds(self, iteration: int, proposals: list[str], policy: Policy, limit: Budget) -> None:
        """``Optimizer._evaluate``: decide, take every step, again, until a round has no steps."""
        this = Spend()
        while True:
            standing = Standing(
                self.candidates, self.order, limit.left(this), iteration, proposals, outputs=self._outputs()
            )
            decision = decide(standing, policy, compare=False)
            if not decision.steps:
                return
            progressed = False
            for cid in sorted(decision.steps):
                spend = self._score(cid, decision.steps[cid], iteration, decision.ids.get(cid))
                if spend is not None:
                    this, progressed = this + spend, True
            if not progressed:
                return

    def _outputs(self) -> dict[str, dict[str, str]]:
        """What each scored candidate output on its examples: its behaviour's answer (alike behaviours agree)."""
        out = {}
        for c in self.candidates:
            if c.evaluation is not None:
                truth = self.truth[c.id]
                out[c.id] = {
                    i: f"{truth.behaviour}:{truth.latent[self.position[i]] < truth.score}"
                    for i in c.evaluation.example_ids
                }
        return out

    def _score(self, cid: str, target: int, iteration: int, ids: list[str] | None) -> Spend | None:
        """``Optimizer._score`` with the simulated evaluator; the spend charged, None when nothing was scored."""
        index = next(i for i, c in enumerate(self.candidates) if c.id == cid)
        candidate = self.candidates[index]
        scored = candidate.evaluation.example_ids if candidate.evaluation else []
        ids = ids or self.order.next_ids(scored, target - len(scored))
        if not ids:
            return None
        truth = self.truth[cid]
        outcomes = [float(truth.latent[self.position[i]] < truth.score) for i in ids]
        charged = 0 if truth.free else len(ids)  # a free revision's parent is supported: all its calls are cached
        spend = Spend(float(charged), charged * truth.tokens, 0.0)
        more = Evaluation(
            "val",
            {"primary": sum(outcomes) / len(outcomes)},
            {
                "input_tokens": truth.tokens * len(ids),
                "output_tokens": 0.0,
                "usd": 0.0,
                "charged_examples": float(charged),
                "charged_tokens": spend.tokens,
            },
            examples=len(ids),
            example_ids=list(ids),
            example_scores=outcomes,
            share=self.order.share,
            increments=[Increment(iteration, len(ids), spend)],
        )
        evaluation = candidate.evaluation.merge(more) if candidate.evaluation else more
        self.candidates[index] = dataclasses.replace(candidate, status=EVALUATED, evaluation=evaluation)
        if iteration > 0:
            self.spent = self.spent + spend
        return spend

    def returned(self) -> float:
        """The true score of the candidate the run returns."""
        best = frontier.best(self.candidates)
        assert best is not None
        return self.truth[best.id].score


def simulate(
    landscape: Landscape | Transform, seed: int, policy: Policy, iterations: int, point: bool = False
) -> list[tuple[float, float, float]]:
    """Per iteration 1..``iterations``: (true score returned, example-evaluations spent so far, tokens so far).
    ``landscape``: a landscape, or a transform of the seed's landscape (its bootstrap draw, or with ``point`` the
    point fit)."""
    if not isinstance(landscape, Landscape):
        landscape = landscape(fit()[0] if point else bootstrap(seed))
    world = World(landscape, seed, policy)
    out = []
    for iteration in range(1, iterations + 1):
        world.iterate(iteration)
        out.append((world.returned(), world.spent.evals, world.spent.tokens))
    return out


# --- the report -------------------------------------------------------------------------------------------------
def interval(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and its 95% interval (normal approximation; the study pairs >= 200 seeds)."""
    mean = statistics.fmean(values)
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan
    return mean, mean - half, mean + half


def study(
    landscape: Landscape | Transform, seeds: int, iterations: int, jobs: int = 1, point: bool = False
) -> dict[str, list[list[tuple[float, float, float]]]]:
    """Every arm on the same seeds (in ``jobs`` processes; the results do not depend on how many)."""
    tasks = [(landscape, s, arm, iterations, point) for arm in ARMS for s in range(seeds)]
    if jobs > 1:
        with multiprocessing.Pool(jobs) as pool:
            done = pool.starmap(simulate, tasks, chunksize=4)
    else:
        done = [simulate(*task) for task in tasks]
    return {arm: done[k * seeds : (k + 1) * seeds] for k, arm in enumerate(ARMS)}


def summarise(runs: dict[str, list[list[tuple[float, float, float]]]], at: Sequence[int]) -> dict[str, object]:
    """Per arm the mean true score and spend by iteration; planner - baseline paired by seed at ``at``; the
    example-evaluations the planner needed to reach each baseline's final mean true score."""
    iterations = len(runs["planner"][0])
    curves = {
        arm: {
            "true": [statistics.fmean(r[t][0] for r in rows) for t in range(iterations)],
            "evals": [statistics.fmean(r[t][1] for r in rows) for t in range(iterations)],
            "tokens": [statistics.fmean(r[t][2] for r in rows) for t in range(iterations)],
        }
        for arm, rows in runs.items()
    }
    paired: dict[str, dict[str, list[float]]] = {}
    for base in BASELINES:
        paired[base] = {}
        for t in at:
            diffs = [p[t - 1][0] - b[t - 1][0] for p, b in zip(runs["planner"], runs[base], strict=True)]
            paired[base][str(t)] = [round(x, 4) for x in interval(diffs)]
    reach = {}
    planner = curves["planner"]
    for base in BASELINES:
        goal = curves[base]["true"][-1]
        reach[base] = {"goal": round(goal, 4), "baseline_evals": round(curves[base]["evals"][-1], 1)}
        reach[base]["planner_evals"] = _reach(planner["true"], planner["evals"], goal)
    return {
        "curves": {a: {k: [round(x, 4) for x in v] for k, v in c.items()} for a, c in curves.items()},
        "paired": paired,
        "reach": reach,
    }


def _reach(true: Sequence[float], evals: Sequence[float], goal: float) -> float | None:
    """Example-evaluations at which the mean true score first reaches ``goal`` (linear between iterations)."""
    before_t, before_e = None, 0.0
    for t, e in zip(true, evals, strict=True):
        if t >= goal:
            if before_t is None or t == before_t:
                return round(e, 1)
            return round(before_e + (e - before_e) * (goal - before_t) / (t - before_t), 1)
        before_t, before_e = t, e
    return None


@dataclass(frozen=True)
class Move:
    """One row of the sweep: what changes in a seed's landscape (every field None or False: nothing)."""

    free_share: float | None = None
    error: float | None = None  # the probe error (sd and bias) and the loud std reported, times this
    calibrated_std: bool = False  # the loud std reported is the probe error itself, the quiet std their spread
    same: float | None = None  # the share of revisions the same on the probe (identical and quiet, in proportion)
    loud_spread: float | None = None  # the loud gains' sd times this

    def __call__(self, land: Landscape) -> Landscape:
        if self.free_share is not None:
            land = dataclasses.replace(land, free_share=self.free_share)
        if self.error is not None:
            land = dataclasses.replace(
                land,
                probe_sd=land.probe_sd * self.error,
                probe_bias=land.probe_bias * self.error,
                loud_std=land.loud_std * self.error,
            )
        if self.calibrated_std:
            land = dataclasses.replace(
                land, loud_std=math.hypot(land.probe_sd, land.probe_bias), quiet_std=land.quiet_sd
            )
        if self.same is not None:
            total = land.identical + land.quiet
            share = (lambda part: self.same * part / total) if total > 0 else (lambda part: 0.0)
            land = dataclasses.replace(land, identical=share(land.identical), quiet=share(land.quiet))
        if self.loud_spread is not None:
            land = dataclasses.replace(land, loud_sd=land.loud_sd * self.loud_spread)
        return land


def sweep() -> dict[str, Move]:
    """The fitted landscape, then one family of parameters moved at a time. With the fitted cache share almost
    every revision is free to evaluate and the budget seldom binds, so the other families are moved with every
    example charged (``charged``), where it does."""
    return {
        "fitted": Move(),
        "half cached (free share 0.5)": Move(free_share=0.5),
        "charged (every example charged)": Move(free_share=0.0),
        "charged, std calibrated (= the probe error)": Move(free_share=0.0, calibrated_std=True),
        "charged, error small (probe error and std x0.5)": Move(free_share=0.0, error=0.5),
        "charged, error large (x2)": Move(free_share=0.0, error=2.0),
        "charged, effects sparse (80% same on probe)": Move(free_share=0.0, same=0.8),
        "charged, effects dense (every revision loud)": Move(free_share=0.0, same=0.0),
        "charged, effects wide (loud spread x2)": Move(free_share=0.0, loud_spread=2.0),
    }


def _rounded(value: object) -> object:
    """A parameter as printed and written (the study runs on the unrounded values)."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, tuple):
        return [round(v, 4) for v in value]
    return value


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *USED], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() + (" (with local changes to the modules it runs)" if dirty.stdout.strip() else "")


def _spread_of_fits(seeds: int) -> dict[str, list[float]]:
    """The 2.5% and 97.5% quantiles of each scalar parameter over the seeds' bootstrap fits."""
    fits = [bootstrap(s) for s in range(seeds)]
    out = {}
    for f in dataclasses.fields(Landscape):
        values = [getattr(x, f.name) for x in fits]
        if isinstance(values[0], float) and len(set(values)) > 1:
            out[f.name] = [round(float(v), 4) for v in np.quantile(values, [0.025, 0.975])]
    return out


def _row(name: str, result: dict, at: Sequence[int]) -> str:
    cells = [name]
    for base in BASELINES:
        for t in at:
            m, lo, hi = result["paired"][base][str(t)]
            cells.append(f"{m:+.4f} [{lo:+.4f}, {hi:+.4f}]")
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200, help="paired seeds of the fitted landscape (default 200)")
    parser.add_argument("--sweep-seeds", type=int, default=30, help="seeds per sweep row (default 30)")
    parser.add_argument("--iterations", type=int, default=6, help="iterations per run (default 6)")
    parser.add_argument("--jobs", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--quick", action="store_true", help="40 seeds, 10 per sweep row")
    parser.add_argument("--no-sweep", action="store_true", help="the fitted landscape only")
    parser.add_argument("--out", type=Path, default=None, help="write results.json and results.md here")
    parser.add_argument("--point", action="store_true", help="every seed on the point fit (no bootstrap)")
    args = parser.parse_args()
    seeds = 40 if args.quick else args.seeds
    sweep_seeds = 10 if args.quick else args.sweep_seeds
    at = sorted({min(3, args.iterations), args.iterations})
    landscape, where = fit()
    started = time.perf_counter()
    results: dict[str, object] = {
        "commit": _commit(),
        "seeds": seeds,
        "sweep_seeds": sweep_seeds,
        "iterations": args.iterations,
        "parameters": "point fit" if args.point else "bootstrapped per seed",
        "landscape": {k: _rounded(v) for k, v in dataclasses.asdict(landscape).items()},
        "where": where,
    }
    if not args.point:
        results["bootstrap"] = _spread_of_fits(seeds)
    print(f"commit {results['commit']}; fitted landscape ({results['parameters']}):")
    for key, value in results["landscape"].items():  # type: ignore[union-attr]
        ranges = results.get("bootstrap", {}).get(key)  # type: ignore[union-attr]
        print(f"  {key} = {value}{f' (bootstrap 95%: {ranges})' if ranges else ''}  ({where[key]})")
    rows = {}
    for name, move in sweep().items():
        if name != "fitted" and args.no_sweep:
            continue
        n = seeds if name == "fitted" else sweep_seeds
        t0 = time.perf_counter()
        rows[name] = {"seeds": n, **summarise(study(move, n, args.iterations, args.jobs, args.point), at)}
        print(f"\n{name}: {n} seeds, {time.perf_counter() - t0:.0f} s")
        _print(rows[name], at)
    results["rows"] = rows
    results["seconds"] = round(time.perf_counter() - started, 1)
    header = "| landscape | " + " | ".join(f"- {b} @{t}" for b in BASELINES for t in at)
    table = [header + " |", "|" + " --- |" * (1 + len(BASELINES) * len(at))]
    table += [_row(f"{name} ({row['seeds']})", row, at) for name, row in rows.items()]
    print("\nplanner - baseline, true score of the returned candidate, mean [95% interval], paired by seed:")
    print("\n".join(table))
    print(f"\n{results['seconds']} s in all")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
        (args.out / "results.md").write_text("\n".join(table) + "\n")


def _print(result: dict, at: Sequence[int]) -> None:
    print("  arm         true score by iteration                      evals spent by iteration")
    for arm, curve in result["curves"].items():
        true = " ".join(f"{x:.3f}" for x in curve["true"])
        evals = " ".join(f"{x:.0f}" for x in curve["evals"])
        print(f"  {arm:11s} {true}   {evals}")
    for base in BASELINES:
        parts = []
        for t in at:
            m, lo, hi = result["paired"][base][str(t)]
            parts.append(f"@{t} {m:+.4f} [{lo:+.4f}, {hi:+.4f}]")
        reach = result["reach"][base]
        print(
            f"  planner - {base:9s} {'  '.join(parts)}; reaches its final {reach['goal']:.4f} at "
            f"{reach['planner_evals']} evals ({base}: {reach['baseline_evals']})"
        )


if __name__ == "__main__":
    main()
