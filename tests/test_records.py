"""The typed records that cross the loop's seams read the JSON runs stored before them, and write it unchanged."""

from __future__ import annotations

import dataclasses

from metaharness.budget import Budget, Spend
from metaharness.candidate import Candidate, Evaluation, PlanEntry, Prediction
from metaharness.store.log import (
    CandidateLine,
    EvaluationLine,
    IterationFacts,
    IterationLine,
    PhaseSpendLine,
    ProposerFailureLine,
    RebuiltIterationLine,
    SplitLine,
    StagingReport,
    StopLine,
)

# A prediction as the offline proposer stored it (candidate.json, the plan, the summary line), with keys of its own.
STORED = {
    "node": "n7",
    "score": 0.61,
    "std": 0.05,
    "label": 1,
    "cost": {"evals": 1.0, "tokens": 1800.0, "usd": 0.004},
    "edit_cost": {"tokens": 0.0, "usd": 0.0},
    "base": "c003",
    "raw_gain": 0.08,
    "probe_std": 0.11,
    "pair_variance": 0.09,
    "tokens_per_example": 450.0,
    "usd_per_example": 0.001,
    "repeat": 0.75,
    "flips": {"gained": ["e1"], "lost": []},
    "chain": ["add the label list"],
    "selection": "exact",
}


def test_a_stored_prediction_reads_into_fields_and_writes_back_unchanged() -> None:
    prediction = Prediction.from_json(STORED)
    assert (prediction.score, prediction.std, prediction.node, prediction.base) == (0.61, 0.05, "n7", "c003")
    assert prediction.cost == {"evals": 1.0, "tokens": 1800.0, "usd": 0.004} and prediction.repeat == 0.75
    assert set(prediction.extra) == {"label", "flips", "chain", "selection"}
    assert prediction.to_json() == STORED


def test_a_value_of_another_type_stays_as_stored_and_reads_as_not_predicted() -> None:
    odd = {"score": "high", "std": True, "node": None, "cost": {"tokens": "many"}, "base": 3, "raw_gain": 2}
    prediction = Prediction.from_json(odd)
    assert (prediction.score, prediction.std, prediction.node, prediction.cost, prediction.base) == (None,) * 5
    assert prediction.raw_gain == 2 and isinstance(prediction.to_json()["raw_gain"], int)  # an int stays an int
    assert prediction.to_json() == odd
    assert Prediction.from_json({}).to_json() == {}


def test_a_candidate_keeps_its_prediction_json_through_its_metadata() -> None:
    data = {"id": "c004", "parent": "c003", "iteration": 2, "source": "x", "prediction": STORED}
    candidate = Candidate.from_dict(data)
    assert candidate.prediction is not None and candidate.prediction.node == "n7"
    assert candidate.metadata()["prediction"] == STORED
    assert Candidate.from_dict({**data, "prediction": None}).metadata()["prediction"] is None


def test_a_plan_entry_reads_plans_of_every_version() -> None:
    written = {
        "id": "c005",
        "parent": "c004",
        "source": "x",
        "summary": "s",
        "hypothesis": "h",
        "prediction": {"score": 0.5, "node": "n2"},
        "node": "n2",
        "evaluate": False,
    }
    entry = PlanEntry.from_json(written)
    assert (entry.id, entry.parent, entry.node, entry.evaluate) == ("c005", "c004", "n2", False)
    assert entry.to_json() == written
    old = PlanEntry.from_json({"id": "c002", "parent": None, "source": "x", "prediction": None})  # before chains
    assert (old.summary, old.node, old.evaluate, old.prediction) == ("", None, True, None)


def test_log_lines_write_the_documented_json() -> None:
    ev = Evaluation("val", {"primary": 0.5}, {"usd": 0.01}, 4, share=4)
    c = Candidate("c002", "c001", 1, "x", summary="s", prediction=Prediction(score=0.4), evaluation=ev)
    assert CandidateLine.of(c).to_json() == {
        "type": "candidate",
        "id": "c002",
        "parent": "c001",
        "iteration": 1,
        "status": "evaluated",
        "score": 0.5,
        "evaluation": ev.to_dict(),
        "prediction": {"score": 0.4},
        "error": None,
        "summary": "s",
    }
    spent = {"usd": 0.2, "tokens": 900.0}
    assert StopLine("capped", spent).to_json() == {"type": "stop", "reason": "capped", "spent": spent}
    assert SplitLine("holdout", "c002", ev).to_json() == {"type": "holdout", "id": "c002", "evaluation": ev.to_dict()}
    assert EvaluationLine("c002", 1, 4, 4, 2, 0.5, Spend(2.0, 10.0, 0.01), True).to_json()["spend"] == {
        "evals": 2.0,
        "tokens": 10.0,
        "usd": 0.01,
    }
    assert PhaseSpendLine(2, "predict", Spend(8.0, 1200.0)).to_json() == {
        "type": "phase",
        "iteration": 2,
        "phase": "predict",
        "spend": {"evals": 8.0, "tokens": 1200.0, "usd": 0.0},
    }
    failure = ProposerFailureLine(3, "ValueError: x", "Traceback", spent).to_json()
    assert failure == {
        "type": "proposer_failure",
        "iteration": 3,
        "proposer_error": "ValueError: x",
        "proposer_traceback": "Traceback",
        "spent": spent,
    }
    counts = {"candidates": ["c002"], "evaluated": 1, "implemented": 0, "failed": 0, "best": "c002", "best_score": 0.5}
    facts = IterationFacts.of(1, [c, dataclasses.replace(c, id="c001", iteration=0, evaluation=None)])
    staging = StagingReport(
        "planner",
        ["c002"],
        {"c002": (0, 4)},
        Spend(4.0),
        Spend(4.0, 90.0),
        Budget(evals=8.0),
        None,
        {},
        {},
        [],
        spend={"predict": Spend(2.0, 30.0), "measure": Spend(4.0, 90.0)},
        replayed={"c003": 4},
    )
    line = IterationLine(facts, None, spent, staging, 1.5).to_json()
    assert line == {
        "type": "iteration",
        "iteration": 1,
        **counts,
        "holdout": None,
        "frontier": ["c002"],
        "spent": spent,
        "policy": "planner",
        "considered": ["c002"],
        "allotted": {"c002": [0, 4]},
        "replayed": {"c003": 4},
        "model_free": {},
        "checks": {"candidates": 0, "model_free": 0, "runs": 0, "seconds": 0.0},
        "identical": {"charged": 0.0, "same_as": {}},
        "cost": {
            "predicted": {"evals": 4.0, "tokens": 0.0, "usd": 0.0},
            "realised": {"evals": 4.0, "tokens": 90.0, "usd": 0.0},
        },
        "spend": {
            "predict": {"evals": 2.0, "tokens": 30.0, "usd": 0.0},
            "check": {"evals": 0.0, "tokens": 0.0, "usd": 0.0},
            "measure": {"evals": 4.0, "tokens": 90.0, "usd": 0.0},
        },
        "budget": {"evals": 8.0, "tokens": None, "usd": None},
        "reference": None,
        "calibration": {},
        "alternatives": {},
        "rounds": [],
        "seconds": 1.5,
    }
    rebuilt = RebuiltIterationLine(facts, "from git").to_json()
    assert rebuilt == {"type": "iteration", "iteration": 1, **counts, "frontier": ["c002"], "rebuilt": "from git"}
