"""The staged-evaluation study on a small scale: the fit reads the committed runs, every policy keeps the budget and
returns a supported candidate, and the arms meet the same proposals."""

from __future__ import annotations

import dataclasses

from studies import load_study


def _study():
    return load_study("staged_evaluation_study")


def test_the_fit_reads_every_source_and_gives_a_usable_landscape() -> None:
    study = _study()
    landscape, where = study.fit()
    assert set(where) == {f.name for f in dataclasses.fields(landscape)}
    assert 0 < landscape.identical + landscape.quiet < 1 and 0 <= landscape.free_share <= 1
    assert landscape.loud_sd > 0 and 0 <= landscape.churn <= 1 and landscape.loud_gains


def test_every_policy_keeps_the_iteration_budget_on_the_same_proposals() -> None:
    study = _study()
    landscape, _ = study.fit()
    small = dataclasses.replace(landscape, share=12, proposals=5, free_share=0.0)
    budget = small.evals_per_iter * small.share
    firsts = {}
    for policy in study.ARMS:
        world = study.World(small, 3, policy)
        before = 0.0
        for iteration in (1, 2):
            world.iterate(iteration)
            assert world.spent.evals - before <= budget, policy
            before = world.spent.evals
        assert study.frontier.best(world.candidates).supported
        firsts[policy] = [(c.parent, c.prediction.score) for c in world.candidates if c.iteration == 1]
    assert len({tuple(v) for v in firsts.values()}) == 1  # common random numbers: one set of proposals


def test_the_summary_pairs_by_seed_and_finds_the_spend_that_reaches_a_score() -> None:
    study = _study()
    runs = {arm: [[(0.5, 10.0, 0.0), (0.6, 20.0, 0.0)]] * 2 for arm in study.ARMS}
    runs["planner"] = [[(0.55, 5.0, 0.0), (0.7, 10.0, 0.0)]] * 2
    result = study.summarise(runs, [1, 2])
    assert result["paired"]["greedy"]["2"][0] == 0.1
    assert result["reach"]["greedy"]["planner_evals"] == round(5.0 + 5.0 * (0.6 - 0.55) / (0.7 - 0.55), 1)
