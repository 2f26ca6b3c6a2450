"""The run's calibration of its proposer's predictions from paired evidence (metaharness.search.staging.Calibration,
prior_of).

A prediction is a gain over its base; what a candidate measured is its mean paired difference over that base on the
examples both were scored on, with the paired sampling variance of that mean. The calibration is a posterior (scale
of the reported stds, slope of the predicted gains), so it rescales stds that were far too wide or too narrow, and it
cannot collapse to 0 on a few predictions that happened to land.
"""

from __future__ import annotations

import random

import pytest

from metaharness.candidate import Candidate, Evaluation, Prediction
from metaharness.search.staging import MIN_PRIOR_SD, Calibration, prior_of

SHARE = 40


def _evaluated(cid: str, parent: str | None, outcomes: list[float], prediction: Prediction | None = None) -> Candidate:
    ids = [f"v{i:02d}" for i in range(len(outcomes))]
    evaluation = Evaluation(
        "val",
        {"primary": sum(outcomes) / len(outcomes)},
        examples=len(outcomes),
        example_ids=ids,
        example_scores=outcomes,
        share=SHARE,
    )
    return Candidate(cid, parent, 1, "", prediction=prediction, evaluation=evaluation)


def _base() -> Candidate:
    return _evaluated("c001", None, [float(i % 2) for i in range(SHARE)])  # 0.5


def _child(cid: str, gain_examples: int, predicted: float, std: float | None, examples: int = SHARE) -> Candidate:
    """A revision of c001 that flips ``gain_examples`` of the base's failures to successes (negative: successes to
    failures), predicted to score ``predicted``."""
    outcomes = [float(i % 2) for i in range(SHARE)]
    flips = [i for i in range(SHARE) if outcomes[i] == (0.0 if gain_examples > 0 else 1.0)][: abs(gain_examples)]
    for i in flips:
        outcomes[i] = 1.0 - outcomes[i]
    return _evaluated(cid, "c001", outcomes[:examples], Prediction(score=predicted, std=std, base="c001"))


def _fresh(std: float | None, predicted: float = 0.55) -> Candidate:
    return Candidate(
        "c100", "c001", 2, "", status="implemented", prediction=Prediction(score=predicted, std=std, base="c001")
    )


def test_without_evidence_the_reported_stds_are_taken_at_their_word() -> None:
    calibration = Calibration.of([_base()])
    assert calibration.pairs == 0 and calibration.std_scale == 1.0 and calibration.slope == 1.0
    by_id = {"c001": _base()}
    mean, sd = prior_of(_fresh(0.05), by_id, calibration)
    assert mean == pytest.approx(0.55)
    assert sd == pytest.approx((0.05**2 + (0.5 * 0.05) ** 2) ** 0.5)  # the slope's prior sd widens it a little


def test_too_wide_stds_are_narrowed() -> None:
    # twelve revisions predicted +0.05 (std 0.15, as the old proposer reported) that realised +0.05 +- 0.025
    children = [_child(f"c{k + 2:03d}", 2 + (k % 3 - 1), 0.55, 0.15) for k in range(12)]
    calibration = Calibration.of([_base(), *children])
    assert calibration.pairs == 12
    assert calibration.std_scale < 0.5
    by_id = {c.id: c for c in [_base(), *children]}
    _, sd = prior_of(_fresh(0.15), by_id, calibration)
    assert sd < 0.08


def test_too_narrow_stds_are_widened() -> None:
    # predicted +0.05 with std 0.005; realised anywhere between -0.15 and +0.2
    rng = random.Random(1)
    children = [_child(f"c{k + 2:03d}", rng.randint(-6, 8), 0.55, 0.005) for k in range(12)]
    calibration = Calibration.of([_base(), *children])
    assert calibration.std_scale > 5
    by_id = {c.id: c for c in [_base(), *children]}
    assert prior_of(_fresh(0.005), by_id, calibration)[1] > 0.05


def test_a_few_exact_predictions_do_not_collapse_the_scale() -> None:
    """Two predictions that landed exactly: the scale shrinks, but stays well above 0 (the old moment estimator
    gave 0.000 here, putting every prior on its floor)."""
    exact = [_child("c002", 2, 0.55, 0.05), _child("c003", -2, 0.45, 0.05)]
    calibration = Calibration.of([_base(), *exact])
    assert 0.2 < calibration.std_scale < 1.0
    by_id = {c.id: c for c in [_base(), *exact]}
    assert prior_of(_fresh(0.05), by_id, calibration)[1] > MIN_PRIOR_SD


def test_predicted_gains_that_are_only_half_realised_give_a_slope_below_one() -> None:
    children = [_child(f"c{k + 2:03d}", 4, 0.7, 0.02) for k in range(10)]  # predicted +0.2, realised +0.1
    calibration = Calibration.of([_base(), *children])
    assert 0.35 < calibration.slope < 0.65
    by_id = {c.id: c for c in [_base(), *children]}
    mean, _ = prior_of(_fresh(0.02, predicted=0.7), by_id, calibration)
    assert 0.56 < mean < 0.64


def test_partly_scored_candidates_count_with_their_wider_sampling_variance() -> None:
    """A candidate scored on 4 examples is evidence too (stopping early on what was seen does not bias a
    likelihood), weighted by its paired sampling variance."""
    few = [_child(f"c{k + 2:03d}", 1, 0.55, 0.15, examples=4) for k in range(6)]
    calibration = Calibration.of([_base(), *few])
    assert calibration.pairs == 6
    many = Calibration.of([_base(), *[_child(f"c{k + 2:03d}", 2, 0.55, 0.15) for k in range(6)]])
    assert many.std_scale < calibration.std_scale  # full evaluations say more about how far off 0.15 is


def test_a_prediction_without_a_std_calibrates_the_spread() -> None:
    children = [_child(f"c{k + 2:03d}", 2, 0.55, None) for k in range(10)]
    calibration = Calibration.of([_base(), *children])
    assert calibration.spread < 0.06 and calibration.std_scale == 1.0
    record = calibration.to_json()
    assert set(record) == {"spread", "gain_spread", "pairs", "std_scale", "slope", "slope_sd"}
