"""Staged evaluation as a planning problem (metaharness.planner.allocation) and the typed budget (metaharness.budget).

The exact solver is checked against brute force on small random problems: every combination of targets that keeps
the budget (with the reserve to complete a chosen arm) is valued and the best net value must equal the solver's.
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from metaharness.budget import Budget, SearchBudget, Spend
from metaharness.errors import InputError
from metaharness.planner.allocation import (
    DEFAULT_PRICE_PER_SHARE,
    Arm,
    allocate,
    posterior,
    spread,
    stage_options,
    stages,
    value,
)

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


def test_auto_is_exact_on_a_small_problem_and_reports_a_bound_when_it_stops_early() -> None:
    rng = random.Random(7)
    arms = [_arm(f"a{i}", rng.gauss(-0.02, 0.03), rng.choice([0.03, 0.06]), share=50) for i in range(40)]
    small = allocate(arms[:5], Budget(evals=150), solver="auto")
    assert small.status == "optimal" and small.solver == "auto"
    big = allocate(arms, Budget(evals=150), solver="auto", node_limit=3)
    assert big.status == "feasible" and big.bound is not None and big.bound >= big.value
    assert big.nodes == 4


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


def test_greedy_evaluates_the_best_predicted_fully_while_they_fit() -> None:
    arms = [_arm("a", 0, 0.05, predicted=0.4), _arm("b", 0, 0.05, predicted=0.6), _arm("c", 0, 0.05, predicted=0.5)]
    plan = allocate(arms, Budget(evals=40), solver="greedy")
    assert plan.targets == {"b": 20, "c": 20}


def test_successive_halving_races_the_fresh_arms_by_their_measured_scores() -> None:
    share = 25  # stages 3, 6, 12, 25
    fresh = [_arm(f"f{i}", 0.0, 0.05, share=share) for i in range(4)]
    old = _arm("old", 0.5, 0.05, share=share, fresh=False)
    first = allocate([*fresh, old], Budget(evals=1000), solver="halving")
    assert first.targets == {f"f{i}": 3 for i in range(4)}
    # after the first stage: f2 and f0 measured best; they go on to 6 examples
    scored = [
        _arm(f"f{i}", 0.0, 0.05, share=share, examples=3, paired=p)
        for i, p in enumerate([(1, 0, 0), (0, 0, 0), (1, 1, 0), (-1, 0, 0)])
    ]
    second = allocate(scored, Budget(evals=1000), solver="halving")
    assert second.targets == {"f2": 6, "f0": 6}
    tight = allocate(scored, Budget(evals=3), solver="halving")
    assert tight.targets == {"f2": 6}


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


def test_allocation_rejects_bad_input() -> None:
    arm = _arm("a", 0.0, 0.05)
    with pytest.raises(InputError, match="Unknown allocation solver"):
        allocate([arm], Budget(), solver="ilp")  # type: ignore[arg-type]
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
    assert search.for_iteration(Spend(evals=90), Spend(evals=10)) == Budget(evals=10, usd=1.0)
    assert search.for_iteration(Spend(evals=0), Spend(evals=10)) == Budget(evals=65, usd=1.0)
    assert SearchBudget.from_json(search.to_json()) == search
