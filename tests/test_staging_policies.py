"""The evaluation policies of metaharness.search.staging (planner.py, baselines.py), round by round, against their
sources.

A small driver plays `StagedEvaluation.run`: build a `Standing`, `decide`, score the steps' examples (fixed outcomes
per candidate and example), again until a round has no steps. Every example costs one example-evaluation.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from metaharness.budget import Budget, Spend
from metaharness.candidate import EVALUATED, IMPLEMENTED, Candidate, Evaluation, Increment, Prediction
from metaharness.search.staging import (
    MERGE_EXAMPLES,
    POLICIES,
    PREDICTION_FREE,
    ExampleOrder,
    Round,
    Standing,
    decide,
)
from metaharness.search.staging.baselines import _better_half, _halving_schedule

SHARE = 24
IDS = [f"v{i:02d}" for i in range(SHARE)]
ORDER = ExampleOrder(tuple(IDS))


def _scores(rate: float, seed: int) -> dict[str, float]:
    """A fixed 0/1 outcome per example, ``round(rate x SHARE)`` of them solved, at places drawn with ``seed``."""
    solved = set(random.Random(seed).sample(IDS, round(rate * SHARE)))
    return {i: float(i in solved) for i in IDS}


def _evaluate(candidate: Candidate, ids: list[str], outcomes: dict[str, float], iteration: int) -> Candidate:
    more = Evaluation(
        "val",
        {"primary": sum(outcomes[i] for i in ids) / len(ids)},
        examples=len(ids),
        example_ids=list(ids),
        example_scores=[outcomes[i] for i in ids],
        share=SHARE,
        increments=[Increment(iteration, len(ids), Spend(float(len(ids))))],
    )
    evaluation = candidate.evaluation.merge(more) if candidate.evaluation else more
    return dataclasses.replace(candidate, status=EVALUATED, evaluation=evaluation)


def _seed(rate: float = 0.5) -> Candidate:
    return _evaluate(Candidate("c001", None, 0, "seed"), IDS, _scores(rate, 0), 0)


def _proposal(cid: str, predicted: float, std: float = 0.1, **extra: object) -> Candidate:
    prediction = Prediction(score=predicted, std=std, base="c001", **extra)  # type: ignore[arg-type]
    return Candidate(cid, "c001", 1, cid, IMPLEMENTED, prediction=prediction)


def _drive(
    candidates: list[Candidate],
    truth: dict[str, dict[str, float]],
    policy: str,
    budget: Budget,
    outputs: dict[str, dict[str, str]] | None = None,
) -> tuple[list[Candidate], Spend, list[Round]]:
    proposals = [c.id for c in candidates if c.iteration == 1]
    spent, rounds = Spend(), list[Round]()
    for _ in range(300):
        known = None
        if outputs:
            known = {c.id: {i: outputs[c.id][i] for i in c.evaluation.example_ids} for c in candidates if c.evaluation}
        standing = Standing(candidates, ORDER, budget.left(spent), 1, proposals, outputs=known)
        decision = decide(standing, policy)
        if not decision.steps:
            return candidates, spent, rounds
        rounds.append(decision)
        for cid, target in sorted(decision.steps.items()):
            index = next(k for k, c in enumerate(candidates) if c.id == cid)
            evaluation = candidates[index].evaluation
            scored = evaluation.example_ids if evaluation else []
            ids = decision.ids.get(cid) or ORDER.next_ids(scored, target - len(scored))
            candidates[index] = _evaluate(candidates[index], ids, truth[cid], 1)
            spent = spent + Spend(float(len(ids)))
    raise AssertionError("the policy never stopped")


def _landscape() -> tuple[list[Candidate], dict[str, dict[str, float]]]:
    rates = {"c002": 0.3, "c003": 0.7, "c004": 0.5, "c005": 0.6, "c006": 0.4, "c007": 0.55}
    predicted = {"c002": 0.45, "c003": 0.6, "c004": 0.5, "c005": 0.62, "c006": 0.52, "c007": 0.48}
    candidates = [_seed(), *(_proposal(cid, predicted[cid]) for cid in rates)]
    truth = {cid: _scores(rate, int(cid[1:])) for cid, rate in rates.items()}
    return candidates, truth


@pytest.mark.parametrize("policy", [p for p in POLICIES if p != "all"])
def test_every_policy_keeps_the_budget_and_ends_with_a_supported_candidate(policy: str) -> None:
    candidates, truth = _landscape()
    budget = Budget(evals=3 * SHARE)
    after, spent, rounds = _drive(candidates, truth, policy, budget)
    assert spent.evals <= budget.evals
    # the gate completes only a proposal that beat its parent on the minibatch: maybe none
    assert policy == "gate" or any(c.supported and c.iteration == 1 for c in after), policy
    assert all(set(r.alternatives) == {"greedy", "halving"} for r in rounds)  # recorded every round


def test_halving_splits_the_budget_over_log2_rounds_and_honours_the_first_stage() -> None:
    assert _halving_schedule(4, 72, SHARE, None) == [9, 24]
    assert _halving_schedule(12, 150, 50, 5)[0] >= 5  # a first stage of 5 on a share of 50 allots it
    assert _halving_schedule(3, 20, SHARE, None) == []  # cannot complete one: nothing
    candidates, truth = _landscape()
    standing = Standing(candidates, ORDER, Budget(evals=72), 1, [c.id for c in candidates[1:]], first_stage=5)
    first = decide(standing, "halving")
    assert set(first.steps) == {c.id for c in candidates[1:]}
    (count,) = set(first.steps.values())
    assert count >= 5


def test_halving_keeps_the_better_half_by_measured_score_and_completes_the_last() -> None:
    candidates, truth = _landscape()
    after, spent, rounds = _drive(candidates, truth, "halving", Budget(evals=3 * SHARE))
    first_round = rounds[0].steps
    assert len(first_round) == 6 and len(set(first_round.values())) == 1
    assert set(rounds[-1].steps.values()) == {SHARE}  # the last round's survivors are completed
    completed = [c for c in after if c.supported and c.iteration == 1]
    assert len(completed) >= 1
    assert spent.evals <= 72


def test_halving_never_waits_for_survivors_it_cannot_afford() -> None:
    """Round two's survivors need more than is left: it gives what fits, then moves on to the completion."""
    candidates, truth = _landscape()
    after, spent, rounds = _drive(candidates, truth, "halving", Budget(evals=40))
    assert spent.evals <= 40
    assert rounds and rounds[-1].steps and list(rounds[-1].steps.values()) == [SHARE]


def test_greedy_takes_the_best_predicted_and_the_threshold_rule_only_those_above_the_reference() -> None:
    candidates = [_seed(0.5), _proposal("c002", 0.4), _proposal("c003", 0.6), _proposal("c004", 0.52)]
    standing = Standing(candidates, ORDER, Budget(evals=2 * SHARE), 1, ["c002", "c003", "c004"])
    assert decide(standing, "greedy").steps == {"c003": SHARE, "c004": SHARE}
    high = [_seed(0.5), _proposal("c002", 0.4), _proposal("c003", 0.6), _proposal("c004", 0.49)]
    standing = Standing(high, ORDER, Budget(evals=2 * SHARE), 1, ["c002", "c003", "c004"])
    assert decide(standing, "threshold").steps == {"c003": SHARE}
    assert decide(standing, "greedy").steps == {"c003": SHARE, "c004": SHARE}


def test_the_gate_needs_a_strictly_higher_minibatch_sum() -> None:
    """GEPA's StrictImprovementAcceptance: a proposal that ties its parent on the minibatch is not evaluated."""
    seed = _seed()
    batch = list(ORDER.search[:3])
    same = _evaluate(_proposal("c002", 0.9), batch, _scores(0.5, 0), 1)  # the seed's own outcomes
    better = _evaluate(_proposal("c003", 0.1), batch, dict.fromkeys(IDS, 1.0), 1)
    standing = Standing([seed, same, better], ORDER, Budget(evals=100), 1, ["c002", "c003"])
    assert decide(standing, "gate").steps == {"c003": SHARE}


def test_policies_that_read_no_prediction_decide_the_same_whatever_the_predictions_say() -> None:
    candidates, truth = _landscape()
    other = [
        dataclasses.replace(c, prediction=Prediction(score=1 - c.score, std=0.01, tokens_per_example=9e3, repeat=1.0))
        if c.prediction is not None
        else c
        for c in candidates
    ]
    for policy in PREDICTION_FREE - {"all"}:
        a = _drive(list(candidates), truth, policy, Budget(evals=3 * SHARE))
        b = _drive(list(other), truth, policy, Budget(evals=3 * SHARE))
        assert [r.steps for r in a[2]] == [r.steps for r in b[2]], policy
        assert [r.predicted for r in a[2]] == [r.predicted for r in b[2]], policy


def test_top_two_thompson_sampling_is_repeatable_and_completes_its_recommendation() -> None:
    candidates, truth = _landscape()
    first = _drive(list(candidates), truth, "thompson", Budget(evals=3 * SHARE))
    second = _drive(list(candidates), truth, "thompson", Budget(evals=3 * SHARE))
    assert [r.steps for r in first[2]] == [r.steps for r in second[2]]
    assert first[2][-1].steps and list(first[2][-1].steps.values()) == [SHARE]


def test_candidates_with_identical_outputs_are_one_arm() -> None:
    seed = _seed()
    outcomes = _scores(0.6, 2)
    seen = IDS[:MERGE_EXAMPLES]
    twins = [_evaluate(_proposal(cid, 0.6), seen, outcomes, 1) for cid in ("c002", "c003", "c004")]
    differs = _evaluate(_proposal("c005", 0.6), seen, outcomes, 1)
    outputs = {c.id: {i: f"answer {i}" for i in seen} for c in twins}
    outputs["c005"] = {i: f"other {i}" for i in seen}
    outputs["c001"] = {i: f"seed {i}" for i in IDS}
    standing = Standing(
        [seed, *twins, differs], ORDER, Budget(evals=100), 1, ["c002", "c003", "c004", "c005"], outputs=outputs
    )
    assert standing.merged == {"c002": ["c003", "c004"]}
    assert {a.id for a in standing.arms} == {"c002", "c005"}
    assert decide(standing, "planner").to_json()["merged"] == {"c002": ["c003", "c004"]}
    alone = Standing([seed, *twins, differs], ORDER, Budget(evals=100), 1, ["c002", "c003", "c004", "c005"])
    assert len(alone.arms) == 4  # without outputs nothing is merged


def test_the_all_policy_scores_a_candidate_merged_into_its_twin_in_full() -> None:
    """A recording (``--evaluation all``) needs every candidate on every example: a candidate whose free examples
    equal a supported candidate's outputs is merged into it for the other rules, not for ``all`` (a recorded
    uspto run left one on 15 of 30 examples before)."""
    seed = _seed()
    seen = IDS[:MERGE_EXAMPLES]
    twin = _evaluate(_proposal("c002", 0.6), seen, _scores(0.5, 0), 1)  # the seed's outcomes and outputs
    outputs = {"c001": {i: f"seed {i}" for i in IDS}, "c002": {i: f"seed {i}" for i in seen}}
    standing = Standing([seed, twin], ORDER, Budget(evals=100), 1, ["c002"], outputs=outputs)
    assert standing.merged == {"c001": ["c002"]} and standing.arms == []
    assert decide(standing, "greedy").steps == {}
    recorded = decide(standing, "all")
    assert recorded.steps == {"c002": SHARE} and recorded.merged == {}
    assert standing.cost_to("c002", SHARE) == Spend(float(SHARE - MERGE_EXAMPLES))


def test_a_few_identical_outputs_merge_nothing() -> None:
    """Agreeing on 10 examples is no evidence of one behaviour (a candidate differing on a quarter of them would
    agree there 6% of the time): a candidate that agrees with the supported seed on its first 10 examples stays an
    arm of its own, as a recorded run's best did not when 3 were enough."""
    seed = _seed()
    few = IDS[:10]
    later = _evaluate(_proposal("c002", 0.6), few, _scores(0.5, 0), 1)  # the seed's outcomes
    outputs = {"c001": {i: f"seed {i}" for i in IDS}, "c002": {i: f"seed {i}" for i in few}}
    standing = Standing([seed, later], ORDER, Budget(evals=100), 1, ["c002"], outputs=outputs)
    assert standing.merged == {}
    assert [a.id for a in standing.arms] == ["c002"]


def test_the_planner_takes_its_leader_on_and_its_rounds_record_the_solver_gap() -> None:
    seed = _seed(0.5)
    leading = _evaluate(_proposal("c002", 0.6), IDS[:6], dict.fromkeys(IDS, 1.0), 1)
    fresh = _proposal("c003", 0.55)
    standing = Standing([seed, leading, fresh], ORDER, Budget(evals=60), 1, ["c002", "c003"])
    assert standing.leader() == "c002"
    assert decide(standing, "planner").steps == {"c002": 12}
    standing = Standing([seed, fresh, _proposal("c004", 0.5)], ORDER, Budget(evals=60), 1, ["c003", "c004"])
    record = decide(standing, "planner").to_json()
    allocation = record["allocation"]
    assert isinstance(allocation, dict) and {"gap", "truncated", "bound", "net"} <= set(allocation)


def _free_child(cid: str, rate: float) -> Candidate:
    """A supported child of the seed scored entirely for free (every stage charged nothing), as a post-processing
    revision is when its calls repeat its parent's."""
    free = _evaluate(_proposal(cid, rate), IDS, _scores(rate, 9), 1)
    assert free.evaluation is not None
    increments = [dataclasses.replace(i, spend=Spend()) for i in free.evaluation.increments]
    return dataclasses.replace(free, evaluation=dataclasses.replace(free.evaluation, increments=increments))


def test_the_planner_leaves_its_budget_when_nothing_is_worth_completing() -> None:
    """Two proposals predicted well below the seed and no free child in the run: the solver buys nothing and no
    completion is worth its cost, so the planner spends nothing (the budget stays with the user)."""
    seed = _seed(0.5)
    low, lower = _proposal("c002", 0.3, std=0.02), _proposal("c003", 0.2, std=0.02)
    standing = Standing([seed, low, lower], ORDER, Budget(evals=2 * SHARE), 1, ["c002", "c003"])
    assert standing.child_lift == 0.0
    assert decide(standing, "planner").steps == {}


def test_the_planner_completes_what_free_children_make_worth_completing() -> None:
    """In a run where a supported parent's free child beat it by 0.25, completing a candidate buys that option
    too: the planner completes the proposal predicted 0.15 below the reference (-0.15 + 0.25 >= 0) a stage at a time,
    never the one predicted 0.45 below it."""
    seed, child = _seed(0.5), _free_child("c004", 0.75)
    low, lower = _proposal("c002", 0.6, std=0.02), _proposal("c003", 0.3, std=0.02)
    standing = Standing([seed, child, low, lower], ORDER, Budget(evals=2 * SHARE), 1, ["c002", "c003"])
    assert standing.child_lift == pytest.approx(0.25)
    assert child.evaluation is not None
    unrecorded = dataclasses.replace(child, evaluation=dataclasses.replace(child.evaluation, increments=[]))
    assert Standing([seed, unrecorded, low], ORDER, Budget(evals=10), 1, ["c002"]).child_lift == 0.0  # cost unknown
    first = decide(standing, "planner")
    assert first.rule == "fill" and list(first.steps) == ["c002"]
    truth = {"c002": _scores(0.6, 2), "c003": _scores(0.3, 3)}
    candidates, spent, rounds = _drive([seed, child, low, lower], truth, "planner", Budget(evals=2 * SHARE))
    assert {r.rule for r in rounds} == {"fill"} and spent.evals == SHARE
    assert next(c for c in candidates if c.id == "c002").supported


def test_the_fill_does_not_complete_a_candidate_whose_outputs_so_far_are_a_supported_ones() -> None:
    """A proposal scored free on most of its share with the outputs of the run's free child (its twin so far) could
    differ only on the rest: it is expected to score what its twin did (not what it was predicted), so it is no
    leader, and the fill, which would complete it for the free-children option, leaves it (that option is the
    twin's); the same proposal with outputs of its own is completed as before."""
    seed, child = _seed(0.5), _free_child("c004", 0.75)
    assert child.evaluation is not None
    seen = IDS[:8]  # fewer than MERGE_EXAMPLES: not merged into its twin
    twin = _evaluate(_proposal("c002", 0.6, std=0.02), seen, _scores(0.75, 9), 1)
    outputs = {"c001": {i: f"seed {i}" for i in IDS}, "c004": {i: f"child {i}" for i in IDS}}
    as_twin = {**outputs, "c002": {i: f"child {i}" for i in seen}}
    standing = Standing([seed, child, twin], ORDER, Budget(evals=2 * SHARE), 1, ["c002"], outputs=as_twin)
    assert standing.twin("c002") == "c004" and standing.twin("c001") is None
    assert decide(standing, "planner").rule != "fill"
    assert standing.arm("c002").mean == pytest.approx(0.0) and standing.leader() is None  # expected: the twin's
    own = {**outputs, "c002": {i: f"own {i}" for i in seen}}
    standing = Standing([seed, child, twin], ORDER, Budget(evals=2 * SHARE), 1, ["c002"], outputs=own)
    assert standing.twin("c002") is None and decide(standing, "planner").rule == "fill"


def test_candidates_scored_on_examples_that_are_not_a_prefix_of_the_order() -> None:
    """A candidate replayed for free holds its parent's examples, anywhere in the order: it is continued on the
    next examples of the order it lacks, and halving compares survivors on the examples they all have."""
    seed = _seed()
    middle = IDS[8:14]
    good = _evaluate(_proposal("c002", 0.5), middle, dict.fromkeys(IDS, 1.0), 1)
    poor = _evaluate(_proposal("c003", 0.5), middle, dict.fromkeys(IDS, 0.0), 1)
    standing = Standing([seed, good, poor], ORDER, Budget(evals=100), 1, ["c002", "c003"])
    assert standing.cost_to("c002", 10).evals == 4  # v00-v03, the first four it lacks
    assert [a.id for a in _better_half(standing, standing.arms, 4)] == ["c002"]
