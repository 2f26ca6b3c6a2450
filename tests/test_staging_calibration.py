"""The run's calibration of its proposer's stds (metaharness.search.staging.Calibration, prior_of).

A proposer's reported stds can be far off (the offline proposer's were about 9 times too wide in the committed
runs). Once enough predictions are verified, the run's own measure of the misses rescales the reported stds.
"""

from __future__ import annotations

import pytest

from metaharness.candidate import Candidate, Evaluation, Prediction
from metaharness.search.staging import CALIBRATION_PAIRS, MIN_PRIOR_SD, Calibration, prior_of


def _scored(cid: str, score: float, predicted: float, std: float, examples: int = 400) -> Candidate:
    evaluation = Evaluation("val", {"primary": score}, examples=examples, share=examples)
    return Candidate(cid, "c000", 1, "", prediction=Prediction(score=predicted, std=std), evaluation=evaluation)


def _fresh(std: float) -> Candidate:
    return Candidate("c100", "c000", 2, "", status="implemented", prediction=Prediction(score=0.5, std=std))


def test_too_wide_stds_are_narrowed_once_enough_predictions_are_verified() -> None:
    # Misses of +-0.05 on 400 examples: about 0.044 beyond sampling noise, against a reported std of 0.15.
    verified = [_scored(f"c{i:03d}", 0.5 + (0.05 if i % 2 else -0.05), 0.5, 0.15) for i in range(1, 9)]
    calibration = Calibration.of(verified)
    assert calibration.std_scale is not None and 0.2 < calibration.std_scale < 0.4
    mean, sd = prior_of(_fresh(0.15), {}, calibration)
    assert mean == 0.5
    assert sd == pytest.approx(calibration.std_scale * 0.15)
    assert sd < 0.05


def test_too_narrow_stds_are_widened() -> None:
    verified = [_scored(f"c{i:03d}", 0.5 + (0.1 if i % 2 else -0.1), 0.5, 0.01) for i in range(1, 9)]
    _, sd = prior_of(_fresh(0.01), {}, Calibration.of(verified))
    assert sd > 0.08


def test_before_enough_verified_predictions_the_reported_std_is_a_floor() -> None:
    verified = [_scored(f"c{i:03d}", 0.5, 0.5, 0.15) for i in range(1, CALIBRATION_PAIRS)]
    calibration = Calibration.of(verified)
    assert calibration.std_scale is None
    assert prior_of(_fresh(0.15), {}, calibration)[1] == 0.15


def test_exact_predictions_never_give_a_prior_below_the_floor() -> None:
    verified = [_scored(f"c{i:03d}", 0.5, 0.5, 0.15) for i in range(1, 9)]
    calibration = Calibration.of(verified)
    assert calibration.std_scale == 0.0
    assert prior_of(_fresh(0.15), {}, calibration)[1] == MIN_PRIOR_SD


def test_a_prediction_without_a_std_does_not_stop_the_others_calibrating() -> None:
    verified = [_scored(f"c{i:03d}", 0.5 + (0.05 if i % 2 else -0.05), 0.5, 0.15) for i in range(1, 9)]
    no_std = Candidate("c050", "c000", 1, "", prediction=Prediction(score=0.5), evaluation=verified[0].evaluation)
    calibration = Calibration.of([*verified, no_std])
    assert calibration.std_scale is not None and 0.2 < calibration.std_scale < 0.4
