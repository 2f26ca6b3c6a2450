"""Staged evaluation as a planning problem (metaharness.search.staging.allocation) and the typed budget
(metaharness.budget).

The exact solver is checked against brute force on small random problems: every combination of targets that keeps
the budget (with the reserve to complete a chosen arm) is valued and the best net value must equal the solver's.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from typing import Any

import numpy as np
import pytest

from metaharness.budget import Budget, SearchBudget, Spend
from metaharness.errors import InputError
from metaharness.search.staging.allocation import DEFAULT_PRICE_PER_SHARE, allocate
from metaharness.search.staging.arms import Arm, posterior, spread, stage_options, stages
from metaharness.search.staging.objective import value

PER_EXAMPLE = Spend(1, 100, 0)


def _arm(
    cid: str,
    mean: float,
    sd: float,
    *,
    examples: int = 0,
    share: int = 20,
    per: Spend = PER_EXAMPLE,
    predicted: float = 0.0,
    paired: tuple[float, ...] = (),
    fresh: bool = True,
) -> Arm:
    variance = sd**2 if not examples else 1 / (1 / sd**2 + examples / 0.2)
    return Arm(
        cid,
        mean,
        variance,
        0.2,
        examples,
        share,
        stage_options(examples, share, per),
        predicted,
        paired or (0.0,) * examples,
        fresh,
    )


def _brute_force(arms: list[Arm], budget: Budget, price: float) -> float:
    """The best net value over every combination of targets that fits with the completion reserve."""
    base = value(arms, {})
    best = 0.0
    for combo in itertools.product(*[[None, *a.options] for a in arms]):
        spent, reserve = np.zeros(3), np.zeros(3)
        for arm, option in zip(arms, combo, strict=True):
            if option is None:
                continue
            spent += option.cost.vector()
            reserve = np.maximum(reserve, np.subtract(arm.options[-1].cost.vector(), option.cost.vector()))
        if not budget.allows(Spend(*(spent + reserve))):
            continue
        targets = {a.id: o.target for a, o in zip(arms, combo, strict=True) if o is not None}
        best = max(best, value(arms, targets) - base - price * spent[0])
    return best


@pytest.mark.parametrize("seed", range(40))
def test_exact_matches_brute_force_on_small_problems(seed: int) -> None:
    rng = random.Random(seed)
    share = rng.choice([10, 25])
    arms = []
    for i in range(rng.randint(1, 4)):
        examples = rng.choice([0, 0, 3, 6])
        mean = rng.gauss(0.0, 0.04) if examples == 0 else rng.gauss(0.01, 0.04)
        arms.append(
            _arm(
                f"a{i}",
                mean,
                rng.choice([0.02, 0.05, 0.1]),
                examples=examples,
                share=share,
                per=Spend(1, rng.choice([100, 300]), 0),
            )
        )
    budget = Budget(evals=rng.choice([10, 20, 40, 60]), tokens=rng.choice([math.inf, 5000]))
    price = DEFAULT_PRICE_PER_SHARE / share
    plan = allocate(arms, budget, solver="exact")
    net = plan.value - value(arms, {}) - price * plan.cost.evals
    assert plan.status == "optimal"
    assert net == pytest.approx(_brute_force(arms, budget, price), abs=1e-9)
    assert budget.allows(plan.cost)


def test_auto_reports_how_far_from_optimal_it_may_be() -> None:
    """``auto`` stops at its node limit and says so: the plan is the exact solver's here, and its bound (an upper
    bound of the net objective over every feasible plan) is at least the exact optimum."""
    rng = random.Random(7)
    arms = [_arm(f"a{i}", rng.gauss(-0.02, 0.03), rng.choice([0.03, 0.06]), share=50) for i in range(40)]
    small = allocate(arms[:3], Budget(evals=150), solver="auto")
    assert small.status == "optimal" and small.solver == "auto" and small.gap == 0.0 and not small.truncated
    exact = allocate(arms[:8], Budget(evals=150), solver="exact")
    cut = allocate(arms[:8], Budget(evals=150), solver="auto", node_limit=3)
    assert cut.status == "feasible" and cut.truncated and cut.nodes == 4
    assert cut.bound is not None and cut.gap is not None
    assert cut.bound + 1e-9 >= exact.net >= cut.net - 1e-9
    assert cut.gap == pytest.approx(cut.bound - cut.net)
    record = cut.to_json()
    assert record["truncated"] is True and record["gap"] == round(cut.gap, 6)


def test_the_objective_is_the_expected_value_of_what_the_return_rule_returns() -> None:
    """Monte Carlo of the model: draw each arm's true gain from its posterior, its new examples' paired sum, then
    return the candidate with the highest raw gain over the whole share (a partly scored one counted at its
    expected raw gain, and only when its posterior mean is positive); the mean true gain of what is returned is the
    objective."""
    rng = np.random.default_rng(3)
    share = 25
    arms = [
        _arm("weak prior, lucky start", -0.06, 0.02, examples=6, share=share, paired=(1, 1, 0, 0, 0, 0)),
        _arm("good prior", 0.03, 0.05, share=share),
        _arm("unknown", 0.0, 0.1, share=share),
    ]
    targets = {"weak prior, lucky start": 25, "good prior": 12, "unknown": 25}
    n = 400_000
    best_rank, best_value = np.zeros(n), np.zeros(n)
    for arm in arms:
        t = targets[arm.id]
        more = t - arm.examples
        truth = rng.normal(arm.mean, math.sqrt(arm.variance), n)
        new = rng.normal(more * truth, math.sqrt(more * arm.noise))
        precision = 1 / arm.variance + more / arm.noise
        mean = (arm.mean / arm.variance + new / arm.noise) / precision
        rank = (arm.total + new + (share - t) * mean) / share
        wins = ((mean > 0) | (t == share)) & (rank > best_rank)
        best_rank, best_value = np.where(wins, rank, best_rank), np.where(wins, mean, best_value)
    error = best_value.std() / math.sqrt(n)
    assert value(arms, targets) == pytest.approx(best_value.mean(), abs=4 * error)


def test_a_full_evaluation_can_lower_the_value_when_luck_would_win() -> None:
    """The winner's curse: a candidate whose prior is well below the reference, completed, is returned whenever
    its raw score beats the reference by luck, so completing it lowers the expected true gain; the posterior mean
    after it (the old objective's view) never falls below 0."""
    bad = _arm("bad", -0.05, 0.02, share=20)
    assert value([bad], {"bad": 20}) < 0
    assert allocate([bad], Budget(evals=100), solver="exact").targets == {}


def test_the_value_of_a_target_is_its_posterior_mean_after_it() -> None:
    """An outcome's value (alpha + beta x rank) has the preposterior spread of the posterior mean."""
    arm = _arm("a", 0.01, 0.05, examples=6, share=50, paired=(1, 0, 0, 0, -1, 1))
    for target in (8, 16, 50):
        outcome = arm.outcome(target)
        assert outcome.alpha + outcome.beta * outcome.rank_mean == pytest.approx(arm.mean)
        assert outcome.beta * outcome.rank_sd == pytest.approx(arm.spread(target))
    assert arm.outcome(50).returnable_from == -math.inf
    assert arm.rank == pytest.approx((arm.total + 44 * arm.mean) / 50)


def test_nothing_worth_evaluating_allocates_nothing() -> None:
    """Evaluating nothing is a valid answer: a candidate far below the reference with a sure prediction."""
    plan = allocate([_arm("bad", -0.3, 0.01)], Budget(evals=100))
    assert plan.targets == {} and plan.cost == Spend()


def test_an_uncertain_candidate_is_evaluated_and_a_sure_one_screened_with_the_reserve_to_complete_it() -> None:
    arms = [_arm("sure", 0.01, 0.005, share=50), _arm("unsure", -0.02, 0.1, share=50)]
    assert allocate(arms, Budget(evals=40)).targets == {}  # nothing could be completed within 40
    assert allocate(arms, Budget(evals=60)).targets == {"unsure": 50}
    plan = allocate(arms, Budget(evals=120))
    assert plan.targets == {"sure": 4, "unsure": 50}
    assert plan.cost.evals + (50 - 4) <= 120  # the reserve to complete "sure" is kept


def test_a_post_processing_revision_costs_nothing_and_is_evaluated_for_free() -> None:
    """A revision that leaves the prompts alone repeats its parent's calls: its options cost no tokens."""
    free = _arm("free", 0.0, 0.05, share=20, per=Spend(0, 0, 0))
    costly = _arm("costly", 0.0, 0.05, share=20, per=Spend(1, 500, 0))
    plan = allocate([free, costly], Budget(evals=0, tokens=0))
    assert plan.targets == {"free": 20}


def test_posterior_shrinks_towards_the_prediction_and_spread_grows_with_examples() -> None:
    mean, variance, noise = posterior(0.05, 0.02**2, [0.0] * 10, noise_prior=0.2)
    assert 0 < mean < 0.05 and variance < 0.02**2
    assert spread(variance, noise, 0) == 0.0
    assert 0 < spread(variance, noise, 5) < spread(variance, noise, 50) < math.sqrt(variance)
    with pytest.raises(InputError):
        posterior(0.0, 0.0, [], noise_prior=0.2)


def test_stages_double_up_to_the_share() -> None:
    assert stages(50) == [4, 8, 16, 32, 50]
    assert stages(25) == [3, 6, 12, 25]
    assert stages(2) == [2]
    assert stages(100, first=10) == [10, 20, 40, 80, 100]
    assert stages(50, first=5) == [5, 10, 20, 40, 50]


def test_allocation_rejects_bad_input() -> None:
    arm = _arm("a", 0.0, 0.05)
    with pytest.raises(InputError, match="Unknown allocation solver"):
        allocate([arm], Budget(), solver="greedy")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="unique"):
        allocate([arm, arm], Budget())
    with pytest.raises(InputError, match="cannot be continued"):
        value([arm], {"a": 7})


def test_budget_parses_checks_and_subtracts() -> None:
    budget = Budget.parse("evals=150,usd=0.5")
    assert budget == Budget(evals=150, usd=0.5)
    assert budget.left(Spend(evals=100, usd=0.6)) == Budget(evals=50, tokens=math.inf, usd=0.0)
    assert budget.left(Spend(evals=150)).exhausted()
    assert str(budget) == "evals=150,usd=0.5" and str(Budget()) == "unlimited"
    assert Budget.checked(budget.to_json()) == budget
    for text, message in [
        ("evals", "KEY=NUMBER"),
        ("evals=1,evals=2", "twice"),
        ("evals=-1", ">= 0"),
        ("evasl=3", "Unknown budget entry evasl"),
        ("", "empty"),
    ]:
        with pytest.raises(InputError, match=message):
            Budget.parse(text)


def test_search_budget_takes_the_tighter_of_iteration_and_run() -> None:
    search = SearchBudget(per_iteration=Budget(evals=75), per_run=Budget(evals=100, usd=1.0))
    assert search.for_iteration(Spend(evals=90), Spend(evals=10), share=20) == Budget(evals=10, usd=1.0)
    assert search.for_iteration(Spend(evals=0), Spend(evals=10), share=20) == Budget(evals=65, usd=1.0)
    # Evals not capped per iteration: evals_per_iter full evaluations of the share.
    full = SearchBudget(evals_per_iter=2, per_run=Budget(usd=1.0))
    assert full.for_iteration(Spend(), Spend(evals=5), share=20) == Budget(evals=35, usd=1.0)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"evals_per_iter": 0}, "--evals-per-iter must be a whole number >= 1, got 0."),
        ({"evals_per_iter": True}, "--evals-per-iter must be a whole number >= 1, got True."),
        ({"per_iteration": Budget(evals=0.5)}, "The per-iteration budget's evals must be at least 1"),
    ],
)
def test_a_search_budget_is_checked_when_made(given: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        SearchBudget(**given)
