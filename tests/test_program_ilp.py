"""The program-space selection ILP on hand-made graphs, and against brute force on small random ones."""

from __future__ import annotations

import itertools
import random

import networkx as nx
import pytest

from metaharness.errors import InputError
from metaharness.proposers.program_ilp import ProgramGraph, chain, scenarios, select
from metaharness.proposers.selection import choose


def _chain_graph() -> ProgramGraph:
    g = ProgramGraph()
    g.add_existing("seed", 0.30)
    g.add_predicted("a", "seed", 0.35, edit_cost={"tokens": 100}, eval_cost={"tokens": 1000})
    g.add_predicted("b", "a", 0.50, edit_cost={"tokens": 100}, eval_cost={"tokens": 1000})
    g.add_predicted("c", "b", 0.60, edit_cost={"tokens": 100}, eval_cost={"tokens": 1000})
    g.add_predicted("d", "seed", 0.45, edit_cost={"tokens": 100}, eval_cost={"tokens": 1000})
    return g


def test_chain_end_is_chosen_with_its_whole_chain() -> None:
    result = select(_chain_graph().graph, {"evals": 1})
    assert result.status == "optimal"
    assert result.evaluate == ["c"]
    assert result.implement == ["a", "b", "c"]
    assert sorted(result.edges) == [("a", "b"), ("b", "c"), ("seed", "a")]
    assert result.value == pytest.approx(0.60)


def test_budget_exactly_met_picks_the_best_that_fits() -> None:
    g = _chain_graph().graph
    # c needs 3 revisions (300) + its evaluation (1000) = 1300 tokens: exactly the cap.
    result = select(g, {"evals": 1, "tokens": 1300})
    assert result.evaluate == ["c"]
    assert result.cost == {"evals": 1.0, "tokens": 1300.0}
    # One token less and the chain no longer fits: b (1200) is the best that does.
    result = select(g, {"evals": 1, "tokens": 1299})
    assert result.evaluate == ["b"]
    assert result.cost["tokens"] == 1200.0


def test_two_evaluations_share_the_chain_cost() -> None:
    g = _chain_graph().graph
    # b lies on c's chain, so evaluating it too costs only its evaluation: 300 + 2000 = 2300, and b beats d.
    result = select(g, {"evals": 2, "tokens": 2300})
    assert sorted(result.evaluate) == ["b", "c"]
    assert result.cost["tokens"] == 2300.0
    assert result.cost["evals"] == 2.0


def test_infeasible_budget() -> None:
    g = _chain_graph().graph
    result = select(g, {"evals": 3, "tokens": 500})  # the cheapest candidate costs 1100
    assert result.status == "infeasible"
    assert result.evaluate == []
    assert select(g, {"evals": 0}).status == "infeasible"
    assert choose("greedy", g, {"evals": 3, "tokens": 500}).status == "infeasible"


def test_dead_ends_are_never_evaluated() -> None:
    g = ProgramGraph()
    g.add_existing("seed", 0.2)
    g.add_predicted("broken", "seed", 0.9, label=-1)
    g.add_predicted("ok", "broken", 0.95)  # a dead end may still be a step of a chain
    g.add_predicted("meh", "seed", 0.25)
    result = select(g.graph, {"evals": 2})
    assert "broken" not in result.evaluate
    assert result.evaluate[0] == "ok" or "ok" in result.evaluate
    assert "broken" in result.implement


def test_merged_node_needs_only_one_chain() -> None:
    g = ProgramGraph()
    g.add_existing("s1", 0.2)
    g.add_existing("s2", 0.3)
    g.add_predicted("a", "s1", 0.4, edit_cost={"tokens": 50})
    g.add_predicted("m", "a", 0.7, edit_cost={"tokens": 50})
    g.add_predicted("m", "s2", 0.7, edit_cost={"tokens": 10})  # merged: the same behaviour reached from s2
    result = select(g.graph, {"evals": 1, "tokens": 20})
    assert result.evaluate == ["m"]
    assert result.edges == [("s2", "m")]


def test_uncertainty_prefers_diverse_bets() -> None:
    """Two near-equal siblings of one risky chain vs. one independent candidate: with noise and shared chain errors
    the expected max is higher when the second evaluation goes to the independent branch."""
    g = ProgramGraph()
    g.add_existing("seed", 0.5)
    g.add_predicted("r", "seed", 0.60, std=0.15)
    g.add_predicted("r1", "r", 0.62, std=0.15)
    g.add_predicted("r2", "r", 0.62, std=0.15)
    g.add_predicted("x", "seed", 0.58, std=0.15)
    greedy = choose("greedy", g.graph, {"evals": 2})
    assert sorted(greedy.evaluate) == ["r1", "r2"]
    planned = select(g.graph, {"evals": 2}, correlation=0.9, n_scenarios=200)
    assert "x" in planned.evaluate


def test_bad_input_is_rejected() -> None:
    g = _chain_graph().graph
    with pytest.raises(InputError):
        select(g, {"evals": -1})
    orphan = nx.DiGraph()
    orphan.add_node("p", existing=False, score=0.5)
    with pytest.raises(InputError, match="no parent"):
        select(orphan, {"evals": 1})
    with pytest.raises(InputError, match="Unknown selection strategy"):
        choose("psychic", g, {"evals": 1})


def test_chain_and_scenarios_follow_the_graph() -> None:
    g = _chain_graph().graph
    assert chain(g, "c") == [("seed", "a"), ("a", "b"), ("b", "c")]
    nodes = scenarios(g, 3)
    assert all(s["c"] == pytest.approx(0.60) for s in nodes)  # std 0: the prediction itself


def _brute_force(g: nx.DiGraph, budget: dict[str, float]) -> float | None:
    predicted = [n for n, d in g.nodes(data=True) if not d["existing"]]
    best = None
    for size in range(1, int(budget["evals"]) + 1):
        for subset in itertools.combinations(predicted, size):
            edges = {e for n in subset for e in chain(g, n)}  # trees here: one chain per node
            tokens = sum(g.edges[e]["cost"].get("tokens", 0) for e in edges)
            tokens += sum(g.nodes[n]["eval_cost"].get("tokens", 0) for n in subset)
            if tokens <= budget["tokens"]:
                value = max(g.nodes[n]["score"] for n in subset)
                best = value if best is None else max(best, value)
    return best


@pytest.mark.parametrize("seed", range(25))
def test_matches_brute_force_on_random_trees(seed: int) -> None:
    rng = random.Random(seed)
    g = ProgramGraph()
    g.add_existing("s0", 0.0)
    nodes = ["s0"]
    for i in range(rng.randint(2, 8)):
        parent = rng.choice(nodes)
        name = f"n{i}"
        g.add_predicted(
            name, parent, rng.random(), edit_cost={"tokens": rng.randint(0, 5)}, eval_cost={"tokens": rng.randint(1, 5)}
        )
        nodes.append(name)
    budget = {"evals": rng.randint(1, 3), "tokens": rng.randint(0, 15)}
    expected = _brute_force(g.graph, budget)
    result = select(g.graph, budget)
    if expected is None:
        assert result.status == "infeasible"
    else:
        assert result.status == "optimal"
        assert result.value == pytest.approx(max(expected, 0.0), abs=1e-6)
        assert result.cost["tokens"] <= budget["tokens"]
        assert len(result.evaluate) <= budget["evals"]


def test_a_token_budget_in_the_run_state_changes_what_is_chosen() -> None:
    """The iteration's token budget reaches the selection through ``RunState.budget``: the expensive best bet
    gives way to a cheaper one."""
    from metaharness.candidate import Candidate, Evaluation
    from metaharness.proposal import RunState
    from metaharness.proposers.program_plan import Predicted, plan

    seed = Candidate(id="c1", parent=None, source="", iteration=0, evaluation=Evaluation("val", {"primary": 0.3}))
    predicted = [
        Predicted("~0", "c1", "long prompt", 0.60, eval_cost={"tokens": 90_000.0}, source="a"),
        Predicted("~1", "c1", "vote", 0.50, eval_cost={"tokens": 2_000.0}, source="b"),
    ]

    def chosen(budget: dict[str, float]) -> list[str]:
        state = RunState(task="t", iteration=1, candidates=[seed], evals_left=1, budget=budget)
        return plan(state, predicted).selection.evaluate

    assert chosen({}) == ["~0"]
    assert chosen({"tokens": 50_000.0}) == ["~1"]
