"""How far the run's predictions held (`Calibration`), and what a candidate's score is believed to be before its
own evidence (`prior_of`): the priors of staged evaluation."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from metaharness.candidate import Candidate, Prediction
from metaharness.search.staging.arms import MIN_NOISE, shrunk_variance
from metaharness.search.staging.evidence import evaluated_ancestor, sample_variance, scores_of

DEFAULT_PRIOR_SD = 0.1  # the spread of a revision's gain when nothing better is known (no prediction, few data)
MIN_PRIOR_SD = 0.02  # no prediction is believed to within less than 2 points of score
DEFAULT_NOISE = 0.2  # per-example variance of paired differences before any is measured (1 in 5 examples differ)
# The calibration's priors (`_fit_calibration`): the reported stds are right within a factor of about e^(2 x 1.5)
# = 20 either way (95%), and a predicted gain is realised in full, give or take SLOPE_PRIOR_SD.
SCALE_PRIOR_LOG_SD = 1.5
SLOPE_PRIOR_SD = 0.5


@dataclass(frozen=True)
class _Fit:
    """The posterior of one calibration model: scale^2 (``scale2``, its posterior geometric mean), the slope's mean
    and sd, the rows."""

    scale2: float
    slope: float
    slope_sd: float
    rows: int


def _fit_calibration(rows: Sequence[tuple[float, float, float, float]], prior_scale: float) -> _Fit:
    """Bayesian calibration of predictions from paired evidence (a hierarchical Normal model on a grid).

    Each row is ``(measured gain, predicted gain, reported sd, sampling variance)``: the candidate's mean paired
    difference over its base on the examples both scored, the prediction's gain over that base, the sd the proposer
    reported (1 when it reported none) and the paired sampling variance of the measured gain (per-example variance
    of the differences over the examples). The model: measured gain ~ Normal(slope x predicted gain, scale^2 x
    reported sd^2 + sampling variance), with weakly informative priors slope ~ Normal(1, ``SLOPE_PRIOR_SD``^2) and
    log scale ~ Normal(log ``prior_scale``, ``SCALE_PRIOR_LOG_SD``^2). This is the random-effects model of
    meta-analysis with known within-study variances (Gelman et al., Bayesian Data Analysis, 3rd ed., section 5.6),
    with a slope on the predictor. The posterior is evaluated on a grid (slope x log scale^2): exact up to the grid,
    never 0 (the prior keeps mass away from 0 however well a few predictions happened to land, where a moment
    estimate that subtracts noise from squared misses reaches 0), and with no rows it is the prior's centre. The
    scale reported is the posterior geometric mean (the mean of log scale^2, on which the prior is symmetric): with
    a log-normal prior the arithmetic mean would sit far in the tail on a handful of rows."""
    if not rows:
        return _Fit(prior_scale**2, 1.0, SLOPE_PRIOR_SD, 0)
    centre = math.log(prior_scale**2)
    widest = max((measured - predicted) ** 2 / (sd * sd) for measured, predicted, sd, _ in rows)
    top = max(centre + 6 * SCALE_PRIOR_LOG_SD, math.log(max(widest, 1e-12)) + 4.0)
    log_s2 = np.linspace(centre - 6 * SCALE_PRIOR_LOG_SD, top, 321)
    s2 = np.exp(log_s2)
    slopes = np.linspace(1 - 5 * SLOPE_PRIOR_SD, 1 + 5 * SLOPE_PRIOR_SD, 81)
    # log prior on the (slope, log s2) grid: log s2 = 2 log scale ~ Normal(centre, (2 x its sd)^2)
    log_post = (-0.5 * ((log_s2 - centre) / (2 * SCALE_PRIOR_LOG_SD)) ** 2)[None, :] - 0.5 * (
        (slopes - 1) / SLOPE_PRIOR_SD
    )[:, None] ** 2
    for measured, predicted, sd, sampling in rows:
        variance = s2[None, :] * sd * sd + sampling
        miss = measured - slopes[:, None] * predicted
        log_post = log_post - 0.5 * np.log(variance) - 0.5 * miss * miss / variance
    weights = np.exp(log_post - log_post.max())
    weights /= weights.sum()
    slope = float((weights.sum(axis=1) * slopes).sum())
    slope_var = float((weights.sum(axis=1) * (slopes - slope) ** 2).sum())
    scale2 = math.exp(float((weights.sum(axis=0) * log_s2).sum()))  # the geometric mean: where the prior is centred
    return _Fit(scale2, slope, math.sqrt(slope_var), len(rows))


@dataclass(frozen=True)
class Calibration:
    """How far the run's predictions held, from paired evidence (`_fit_calibration`, over every scored candidate
    whose base was scored on some of the same examples): ``std_scale`` rescales the stds the proposer reported,
    ``spread`` is the sd of a true gain around a prediction without a std,
    ``gain_spread`` that of a child's gain over its parent (candidates without a prediction), and ``slope`` how much
    of a predicted gain is realised (posterior mean, sd ``slope_sd``: below 1 when the large predictions miss
    towards their base). ``pairs`` counts the predictions the fit read; a prediction with a std of 0 (exact by
    construction, e.g. measured on recorded calls) is not one. With no evidence every value is its prior
    (``std_scale`` 1: the reported stds are taken at their word)."""

    spread: float = DEFAULT_PRIOR_SD
    gain_spread: float = DEFAULT_PRIOR_SD
    pairs: int = 0
    std_scale: float = 1.0
    slope: float = 1.0
    slope_sd: float = SLOPE_PRIOR_SD
    spread_slope: float = 1.0
    spread_slope_sd: float = SLOPE_PRIOR_SD

    @classmethod
    def of(cls, candidates: Sequence[Candidate]) -> Calibration:
        by_id = {c.id: c for c in candidates}
        evidence = []  # (candidate, base, paired differences)
        for c in candidates:
            base = evaluated_ancestor(c, by_id) if c.evaluated and not c.failed else None
            if base is None:
                continue
            mine, theirs = scores_of(c), scores_of(base)
            diffs = [s - theirs[i] for i, s in mine.items() if i in theirs]
            if diffs:
                evidence.append((c, base, diffs))
        variances = [sample_variance(d) for _, _, d in evidence if len(d) > 1]
        pooled = max(MIN_NOISE, sum(variances) / len(variances)) if variances else DEFAULT_NOISE
        scaled, unscaled, gains = [], [], []
        for c, base, diffs in evidence:
            sampling = max(MIN_NOISE, shrunk_variance(diffs, pooled, 5.0)) / len(diffs)
            measured = sum(diffs) / len(diffs)
            prediction = c.prediction or Prediction()
            if prediction.score is None:
                gains.append((measured, 0.0, 1.0, sampling))
                continue
            if prediction.std == 0:  # exact by construction (e.g. measured on recorded calls): says nothing of misses
                continue
            predicted = float(prediction.score) - base.score
            if prediction.std is not None and prediction.std > 0:
                scaled.append((measured, predicted, float(prediction.std), sampling))
            else:
                unscaled.append((measured, predicted, 1.0, sampling))
        scale = _fit_calibration(scaled, 1.0)
        plain = _fit_calibration(unscaled, DEFAULT_PRIOR_SD)
        gain = _fit_calibration(gains, DEFAULT_PRIOR_SD)
        return cls(
            spread=math.sqrt(plain.scale2),
            gain_spread=math.sqrt(gain.scale2),
            pairs=len(scaled) + len(unscaled),
            std_scale=math.sqrt(scale.scale2),
            slope=scale.slope,
            slope_sd=scale.slope_sd,
            spread_slope=plain.slope,
            spread_slope_sd=plain.slope_sd,
        )

    def to_json(self) -> dict[str, float | None]:
        return {
            "spread": round(self.spread, 4),
            "gain_spread": round(self.gain_spread, 4),
            "pairs": self.pairs,
            "std_scale": round(self.std_scale, 4),
            "slope": round(self.slope, 4),
            "slope_sd": round(self.slope_sd, 4),
        }


def prior_of(candidate: Candidate, by_id: Mapping[str, Candidate], calibration: Calibration) -> tuple[float, float]:
    """(mean, sd) of the candidate's score before its own evidence.

    With a prediction: its gain over its base (the prediction's ``base``, else the nearest evaluated ancestor)
    times the calibrated slope, and an sd of its reported std times the calibrated scale (or the calibrated spread
    when it reported none), widened by the slope's uncertainty on that gain; a std of 0 (exact by construction) is
    taken at its word. Without one: its nearest evaluated
    ancestor's score with the calibrated spread of the run's revisions. Never below ``MIN_PRIOR_SD``."""
    prediction = candidate.prediction or Prediction()
    score = prediction.score
    if score is not None:
        base = evaluated_ancestor(candidate, by_id)
        gain = float(score) - base.score if base is not None else 0.0
        anchor = base.score if base is not None else float(score)
        sd = float(prediction.std) if prediction.std is not None else None
        if sd == 0:  # exact by construction
            return float(score), MIN_PRIOR_SD
        if sd is not None:
            slope, slope_sd, width = calibration.slope, calibration.slope_sd, calibration.std_scale * sd
        else:
            slope, slope_sd, width = calibration.spread_slope, calibration.spread_slope_sd, calibration.spread
        return anchor + slope * gain, max(MIN_PRIOR_SD, math.hypot(width, slope_sd * gain))
    parent = evaluated_ancestor(candidate, by_id)
    return (parent.score if parent is not None else 0.0), max(MIN_PRIOR_SD, calibration.gain_spread)
