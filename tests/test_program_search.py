"""Both planning proposers over the run's lasting program graph: selection within the iteration's budget, chains
as intermediates, predictions that last across iterations and are chosen later."""

from __future__ import annotations

import json

import pytest
from fakes import ScriptedModel
from test_proposers_offline import NoValTask, _state, keyword_model, starved_proposer

from metaharness.candidate import Candidate, Evaluation
from metaharness.planner.program import (
    IMPLEMENTED,
    PREDICTED,
    add_evaluated,
    add_predicted,
    mark,
    nodes_with,
    program_graph,
)
from metaharness.proposers import get_proposer
from metaharness.proposers.program_search import GainCalibration, base_of, choose, proposals, recalibrate
from metaharness.search.protocol import RunState
from metaharness.store.program_graph import load, save, sync
from metaharness.tasks import get_task


@pytest.fixture
def task(shared_data_dir):
    return NoValTask(get_task("symptom2disease", data_dir=shared_data_dir))


def _seed(score: float = 0.3) -> Candidate:
    return Candidate(id="c1", parent=None, source="", iteration=0, evaluation=Evaluation("val", {"primary": score}))


def test_the_selection_implements_as_many_programs_as_the_iteration_takes() -> None:
    """The proposer's selection chooses what to implement (``RunState.proposals`` of them); how many validation
    examples each then gets is the loop's staged evaluation, so evaluation cost does not narrow the choice."""

    def chosen(proposals: int) -> list[str]:
        graph = program_graph("c1")
        add_evaluated(graph, "c1", 0.3)
        add_predicted(graph, "p1.0", "c1", 0.60, cost={"tokens": 90_000.0}, summary="long prompt")
        add_predicted(graph, "p1.1", "c1", 0.50, cost={"tokens": 2_000.0}, summary="vote")
        state = RunState(task="t", iteration=1, candidates=[_seed()], proposals=proposals)
        result = choose(state, graph, "auto", seed=0)
        assert result is not None
        return sorted(str(n) for n in result.evaluate)

    assert chosen(1) == ["p1.0"]
    assert chosen(2) == ["p1.0", "p1.1"]


def test_a_chosen_chain_becomes_one_proposal_with_its_intermediates() -> None:
    graph = program_graph("c1")
    add_evaluated(graph, "c1", 0.3)
    add_predicted(graph, "p1.0", "c1", 0.35, summary="step one", data={"source": "A", "summary": "step one"})
    add_predicted(graph, "p1.1", "p1.0", 0.6, summary="step two", data={"source": "B", "summary": "step two"})
    state = RunState(task="t", iteration=1, candidates=[_seed()], proposals=1)
    result = choose(state, graph, "auto", seed=0)
    assert result is not None and result.evaluate == ["p1.1"]
    (proposal,) = proposals(state, graph, result)
    assert proposal.parent == "c1" and proposal.node == "p1.1" and proposal.source == "B"
    assert [(s.node, s.source) for s in proposal.intermediates] == [("p1.0", "A")]
    assert proposal.summary == "step two"
    assert proposal.prediction is not None and proposal.prediction.extra["chain"] == ["step one", "step two"]
    assert proposal.prediction.edit_cost == {"tokens": 0.0, "usd": 0.0}


def test_predictions_are_re_predicted_as_the_calibration_learns() -> None:
    graph = program_graph("c1")
    add_evaluated(graph, "c1", 0.3)
    add_predicted(graph, "p1.0", "c1", 0.5, std=0.05, data={"base": "c1", "raw_gain": 0.2, "raw_std": 0.05})
    state = RunState(task="t", iteration=2, candidates=[_seed()], proposals=1)
    assert recalibrate(graph, state, GainCalibration(slope=0.5, residual=0.1, pairs=3)) == 1
    node = graph.node("p1.0")
    assert node.score == pytest.approx(0.4) and node.std == pytest.approx(0.1)
    assert recalibrate(graph, state, GainCalibration(slope=0.5, residual=0.1, pairs=3)) == 0


def test_an_offline_prediction_made_in_one_iteration_is_chosen_in_a_later_one(task, tmp_path) -> None:
    """Iteration 1 predicts more candidates than it may evaluate; the rest stay in the graph (saved and loaded
    as JSON between iterations), and iteration 2, whose probe budget allows no new prediction, chooses one of them."""
    state = _state(iteration=1, evals=1)
    first = get_proposer("offline", task=task, task_model=keyword_model(), probe_size=4, plans=4, seed=1)
    state.graph = sync(None, state.candidates)
    (chosen,) = first.propose(state)
    left = {n.id for n in nodes_with(state.graph, PREDICTED)} - {chosen.node}
    assert left, "iteration 1 should leave predictions nobody chose"

    # The loop commits the chosen candidate (evaluated) and saves the graph; the next iteration loads it.
    done = Candidate(
        id="c10",
        parent=chosen.parent,
        source=chosen.source,
        iteration=1,
        prediction=chosen.prediction,
        evaluation=Evaluation("val", {"primary": 0.05}, {"input_tokens": 900.0, "output_tokens": 40.0}),
    )
    save(tmp_path, state.graph)
    graph = sync(load(tmp_path), [*state.candidates, done])
    later = _state(iteration=2, evals=1)
    later.candidates.append(done)
    later.graph = graph
    second = starved_proposer(task, seed=1)
    (again,) = second.propose(later)
    assert again.node in left and again.prediction is not None and again.prediction.extra["iteration"] == 1


def test_tps_extends_a_predicted_node_and_merges_by_behaviour(task, tmp_path) -> None:
    """The tps sampler may set out from a predicted node; two revisions of one base predicted to behave the same
    share one node."""
    from metaharness.proposers.tps import TPSProposer

    answers = iter(
        [
            json.dumps(
                {"plans": [{"start": "c1", "revisions": ["use label list"]}, {"start": "c1", "revisions": ["snap"]}]}
            ),
            json.dumps(
                {
                    "correct": [True, True, False, False],
                    "implementation_tokens": 300,
                    "context_tokens": 500,
                    "breaks_harness": False,
                }
            ),
            json.dumps(
                {
                    "correct": [True, True, False, False],
                    "implementation_tokens": 200,
                    "context_tokens": 400,
                    "breaks_harness": False,
                }
            ),
        ]
    )
    model = ScriptedModel(lambda request: next(answers), spec="scripted:planner")
    proposer = TPSProposer(model, task, keyword_model(), probe_size=4, run_dir=tmp_path, plans=2)
    state = _state(iteration=1, evals=1)
    state.graph = sync(None, state.candidates)
    result, record = proposer.planning(state)
    predicted = nodes_with(state.graph, PREDICTED)
    assert len(predicted) == 1, record  # the second revision behaves like the first: one node, two revisions
    assert len(state.graph.in_edges(predicted[0].id)) == 2
    assert result is not None and result.evaluate == [predicted[0].id]
    # The simulator saw the start's whole source and its probe runs with the prompts the harness sent.
    simulation = model.requests[1].messages[-1]["content"]
    assert "## Candidate c1" in simulation and "on the probe examples (training split)" in simulation
    assert "[system]\nYou are an expert medical diagnostician" in simulation  # the seed's prompt, verbatim


def test_an_implemented_candidate_is_evaluated_as_it_is_once() -> None:
    """An intermediate committed earlier (implemented, not evaluated) can be chosen later: the proposal is its own
    program as its child; once that child is evaluated, it is not chosen again."""
    graph = program_graph("c1")
    add_evaluated(graph, "c1", 0.3)
    add_predicted(graph, "p1.0", "c1", 0.7, summary="step one", data={"summary": "step one"})
    mark(graph, "p1.0", IMPLEMENTED, new_id="c2")
    implemented = Candidate(id="c2", parent="c1", source="B", iteration=1, status=IMPLEMENTED)
    state = RunState(task="t", iteration=2, candidates=[_seed(), implemented], proposals=1)
    result = choose(state, graph, "auto", seed=0)
    assert result is not None and result.evaluate == ["c2"]
    (proposal,) = proposals(state, graph, result)
    assert (proposal.parent, proposal.source, proposal.node, proposal.intermediates) == ("c2", "B", "c2", [])
    again = Candidate(id="c3", parent="c2", source="B", iteration=2, evaluation=Evaluation("val", {"primary": 0.5}))
    state.candidates.append(again)
    assert choose(state, graph, "auto", seed=0) is None


def test_a_prediction_builds_on_the_nearest_evaluated_candidate() -> None:
    """An evaluated candidate that realised a prediction is its own base (its node still carries the base it was
    predicted from); an implemented one builds on its nearest evaluated ancestor."""
    graph = program_graph("c1")
    add_evaluated(graph, "c1", 0.3)
    add_evaluated(graph, "c3", 0.6, "c1", data={"base": "c1"})
    add_predicted(graph, "p2.0", "c3", 0.7, data={"base": "c3"})
    evaluated = Candidate(id="c3", parent="c2", source="", iteration=2, evaluation=Evaluation("val", {"primary": 0.6}))
    implemented = Candidate(id="c2", parent="c1", source="", iteration=1, status=IMPLEMENTED)
    candidates = {"c1": _seed(), "c2": implemented, "c3": evaluated}
    assert base_of(graph.node("c3"), candidates) is evaluated
    assert base_of(graph.node("p2.0"), candidates) is evaluated
    add_evaluated(graph, "c2", 0.0)
    assert base_of(graph.node("c2"), candidates) is candidates["c1"]
