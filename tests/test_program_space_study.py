"""The program-space study's simulation on a small scale: every strategy runs, budgets hold, the graph lasts."""

from __future__ import annotations

import random

import pytest
from studies import load_study

from metaharness.planner.program import EVALUATED, PREDICTED


def _study():
    return load_study("program_space_study")


def test_a_small_study_reports_every_strategy() -> None:
    study = _study()
    results = study.study(["tight-0.06"], seeds=2, iterations=3, proposals=6, workers=1)
    by = results["tight-0.06"]
    assert set(by) == {*study.STRATEGIES, "optimum"}
    for strategy in study.STRATEGIES:
        assert len(by[strategy]) == 2, strategy
        for seed, final in enumerate(by[strategy]):
            # Between the seed harness and the best program the token budget lets anyone evaluate.
            assert study.Landscape(random.Random(seed)).score(frozenset()) <= final <= by["optimum"][seed]
    table = study.table(results, [*study.STRATEGIES, "optimum"], study.MAIN_PAIRS)
    header, _, row = table.splitlines()
    assert all(f" {s} " in header for s in study.STRATEGIES)
    assert "solver - greedy" in header and row.startswith("| tight-0.06 |")


@pytest.mark.parametrize("strategy", ["solver", "greedy", "base"])
def test_each_iteration_keeps_the_budget_and_the_graph_lasts(strategy: str) -> None:
    study = _study()
    setting = study.SETTINGS["tight-0.06"]
    search = study.Search(
        study.Landscape(random.Random(3)), study.STRATEGIES[strategy], setting, seed=3, proposals=6, iterations=4
    )
    evaluated = {"seed"}
    for iteration in range(4):
        search.step(iteration)
        now = {n.id for n in search.graph.nodes if n.status == EVALUATED}
        new = now - evaluated
        assert 1 <= len(new) <= study.EVALS
        assert sum(search.land.cost(search.program[n]) for n in new) <= setting.tokens + 1e-9
        evaluated = now
        predicted = [n for n in search.graph.nodes if n.status == PREDICTED]
        # Unchosen predictions stay for later iterations, except for "base", which keeps no program graph.
        assert (not predicted) if strategy == "base" else predicted
    assert search.best() == max(search.land.score(search.program[n]) for n in evaluated)
