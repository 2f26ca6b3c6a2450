"""The fold-choice study (benchmarks/fold_choice.py) on a made-up run: candidates that fit the recorded examples only
and fail elsewhere are what the search's score alone returns, and what the training folds keep out."""

from __future__ import annotations

import pytest
from studies import load_study

RECORDED = [f"r{i}" for i in range(10)]
UNSEEN = [f"u{i}" for i in range(10)]
FOLDS = [f"t{i}" for i in range(20)]


def candidate(name: str, recorded: float, unseen: float, folds: float) -> dict[str, object]:
    """Right on the first ``recorded`` share of the recorded examples, on every unseen one when ``unseen`` is 1, and
    on the first ``folds`` share of the training folds; its outputs are its own."""
    right = round(recorded * len(RECORDED))
    val = {i: float(k < right) for k, i in enumerate(RECORDED)} | {i: unseen for i in UNSEEN}
    return {
        "summary": name,
        "val": val,
        "outputs": {i: f"{name}-{i}" for i in RECORDED},
        "folds": {t: float(k < round(folds * len(FOLDS))) for k, t in enumerate(FOLDS)},
    }


RUN = {
    "run": "made-up",
    "recorded": RECORDED,
    "unseen": UNSEEN,
    "candidates": {
        "c001": candidate("fits-a", 1.0, 0.0, 0.0),
        "c002": candidate("fits-b", 1.0, 0.0, 0.0),
        "c003": candidate("general-a", 0.1, 1.0, 1.0),
        "c004": candidate("general-b", 0.1, 1.0, 1.0),
    },
    "baseline": dict.fromkeys(RECORDED + UNSEEN, 0.5),
}


def test_the_pooled_rule_returns_what_the_folds_vouch_for_and_the_search_score_alone_does_not() -> None:
    load_study("replay_study")  # what fold_choice imports
    study = load_study("fold_choice")
    found = study.study([RUN], replicates=50, share=5, confirm=3)
    row = found["runs"]["made-up"]
    # Without the folds the two that fit the search's examples are the contenders, whatever the confirm examples say.
    assert row["no folds"] == row["folds on ties"] < 0.5 < row["pooled"]
    mean, low, _ = found["differences"]["pooled - no folds"]
    assert mean > 0.2 and low > 0


def test_a_share_that_leaves_nothing_to_judge_is_refused() -> None:
    load_study("replay_study")
    study = load_study("fold_choice")
    with pytest.raises(SystemExit, match="leave no judge example"):
        study.study([RUN], replicates=1, share=5, confirm=10)
