"""The four TPS stages and plan(): oracle stages on a toy domain, scripted model answers (good and malformed)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fakes import FixedPlans, ScriptedModel, TableLabeler, in_order

from metaharness.errors import InputError
from metaharness.models.protocol import StructuredOutputError
from metaharness.planner import subagents
from metaharness.planner.path.problem import path_problem
from metaharness.planner.subagents import CandidatePlan, PlanningTask, PredictedState, SimulatedStep
from metaharness.planner.tps import plan, replay

# --- a toy domain with a true environment: a corridor of cells 0..5, the goal is to stand on cell 3 ----------------


class CorridorSimulator:
    """Oracle: moves are exact; 'run' moves two cells but costs more money."""

    def simulate(self, task, candidate):
        at = int(task.current_state.split()[-1])
        steps = []
        for move in candidate.subplans:
            at += {"left": -1, "right": 1, "run right": 2}[move]
            steps.append(SimulatedStep(f"at cell {at}", (1.0, 2.0 if move == "run right" else 0.0), key=str(at)))
        return steps


ORACLE: dict[str, Any] = {
    "sampler": FixedPlans(["right", "right", "right"], ["run right", "right"], ["left", "right"]),
    "simulator": CorridorSimulator(),
    "merger": subagents.KeyJudgeMerger(),
    "labeler": TableLabeler({"3": 1}, by="key"),
}


def test_oracle_stages_give_the_best_route_within_budget():
    result = plan(["start", "at cell 0"], "stand on cell 3", {"steps": 3, "usd": 5}, start_key="0", **ORACLE)
    assert result.status == "route"
    assert [s.action for s in result.route] == ["run right", "right"]  # two steps beat three
    assert result.route[-1].expected_state == "at cell 3" and result.cost == {"steps": 2.0, "usd": 2.0}
    # Merging: the three plans share cells 1, 2 and 3, and "left, right" returns to the start: a graph with a cycle.
    assert result.graph is not None
    assert sorted(str(n.key) for n in result.graph.nodes) == ["-1", "0", "1", "2", "3"]
    assert {s["stage"] for s in result.stages} == {"sample", "simulate", "merge", "label"}
    dead = [n for n in result.graph.nodes if n.dead_end]
    assert [n.key for n in dead] == []  # cell -1 has a way out (right), so it is no dead end
    assert "Suggested route (2 steps" in result.guidance()


def test_budget_shapes_the_route_and_no_route_is_explained():
    cheap = plan("at cell 0", "stand on cell 3", {"steps": 3, "usd": 1}, start_key="0", **ORACLE)
    assert [s.action for s in cheap.route] == ["right", "right", "right"]
    none = plan("at cell 0", "stand on cell 3", {"steps": 1, "usd": 1}, start_key="0", **ORACLE)
    assert none.status == "no_route" and "within the remaining budget" in none.reason
    assert none.guidance().startswith("No feasible route")
    unreachable = plan(
        "at cell 0",
        "stand on cell 3",
        {"steps": 9, "usd": 9},
        start_key="0",
        **{**ORACLE, "sampler": FixedPlans(["left"])},
    )
    assert unreachable.status == "no_route" and "no predicted state satisfies the goal" in unreachable.reason
    assert unreachable.graph is not None
    assert [n.dead_end for n in unreachable.graph.nodes] == [False, True]  # a non-goal leaf is a dead end


def test_record_is_json_and_replays_to_the_same_route():
    result = plan("at cell 0", "stand on cell 3", {"steps": 3, "usd": 5}, start_key="0", **ORACLE)
    record = json.loads(json.dumps(result.to_json()))
    again = replay(record)
    assert again.graph is not None and result.graph is not None
    assert again.graph.to_json() == result.graph.to_json()
    assert [s.to_json() for s in again.route] == [s.to_json() for s in result.route]


def test_bad_stage_output_is_dropped_not_fatal():
    class Liar(CorridorSimulator):
        def simulate(self, task, candidate):
            steps = super().simulate(task, candidate)
            return steps[:-1] if candidate.subplans[0] == "run right" else steps  # one step short

    result = plan(
        "at cell 0", "stand on cell 3", {"steps": 3, "usd": 5}, start_key="0", **{**ORACLE, "simulator": Liar()}
    )
    assert [s.action for s in result.route] == ["right", "right", "right"]
    assert any("dropped" in s for s in result.stages if s["stage"] == "simulate")


def test_plan_needs_a_model_or_all_stages():
    with pytest.raises(InputError, match="needs model="):
        plan("x", "y", {"steps": 1}, sampler=ORACLE["sampler"])
    with pytest.raises(InputError, match="goal"):
        plan("x", " ", {"steps": 1}, **ORACLE)
    with pytest.raises(InputError, match="must map limit names"):
        plan("x", "y", [1], **ORACLE)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=">= 0"):
        plan("x", "y", {"steps": -1}, **ORACLE)


# --- model-backed stages against scripted answers --------------------------------------------------------------


STAGES = ("plan sampler", "state simulator", "state merger", "reward labeler")


def stage_of(request) -> str:
    return next(k for k in STAGES if request.messages[0]["content"].startswith(f"You are the {k}"))


def by_stage(script: dict[str, list]) -> ScriptedModel:
    """A model answering each stage (named by its system prompt) from its own list, in order (the last repeats).
    Answers pass unchecked (``raw``), so the stages' own JSON and schema checks run."""
    queues = {stage: in_order(*answers) for stage, answers in script.items()}
    return ScriptedModel(lambda request: queues[stage_of(request)](request), raw=True)


def asked(model: ScriptedModel, stage: str) -> list:
    return [request for request in model.requests if stage_of(request) == stage]


TASK = PlanningTask.create(["You are at the door; the key is on the table."], "open the door", {"steps": 4})


def test_sampler_re_asks_after_malformed_json_and_drops_duplicates():
    client = by_stage(
        {
            "plan sampler": [
                "Sure! Here are plans: 1) take key",
                StructuredOutputError("the JSON does not match the schema"),
                {
                    "plans": [
                        {"subplans": ["take key", "open door"]},
                        {"subplans": ["take key", "open door"]},
                        {"subplans": ["kick door"]},
                    ]
                },
            ]
        }
    )
    sampler = subagents.ModelPlanSampler(client)
    plans = sampler.sample(TASK, 4)
    assert [p.subplans for p in plans] == [("take key", "open door"), ("kick door",)]
    calls = sampler.take_calls()
    assert [a["error"] is None for a in calls[0]["attempts"]] == [False, False, True]
    # The re-ask names the problem.
    assert "cannot be used" in asked(client, "plan sampler")[1].messages[-1]["content"]
    assert asked(client, "plan sampler")[0].json_schema["properties"]["plans"]["maxItems"] == 4


def test_simulator_checks_step_count_and_costs():
    client = by_stage(
        {
            "state simulator": [
                {"steps": [{"state": "holding key", "cost": [1]}]},  # one step short
                {"steps": [{"state": "holding key", "cost": [1]}, {"state": "door open", "cost": [-1]}]},  # negative
                {"steps": [{"state": "holding key", "cost": [1]}, {"state": "door open", "cost": [1]}]},
            ]
        }
    )
    simulator = subagents.ModelStateSimulator(client, canonical_key=lambda s: s.upper())
    steps = simulator.simulate(TASK, CandidatePlan(("take key", "open door")))
    assert steps == [
        SimulatedStep("holding key", (1.0,), "HOLDING KEY"),
        SimulatedStep("door open", (1.0,), "DOOR OPEN"),
    ]
    assert len(simulator.take_calls()[0]["attempts"]) == 3


def test_simulator_counts_a_steps_limit_instead_of_asking_the_model():
    """A small model predicts 1.06 steps for a step; the route of two then broke a budget of 2 steps."""
    client = by_stage(
        {"state simulator": [{"steps": [{"state": "a", "cost": [1.06, 0.4]}, {"state": "b", "cost": [0.2, 0.1]}]}]}
    )
    task = PlanningTask.create(["at the door"], "open the door", {"steps": 2, "usd": 1})
    steps = subagents.ModelStateSimulator(client).simulate(task, CandidatePlan(("take key", "open door")))
    assert [s.cost for s in steps] == [(1.0, 0.4), (1.0, 0.1)]


def test_simulator_gives_up_cleanly():
    client = by_stage({"state simulator": ["no idea"]})
    assert subagents.ModelStateSimulator(client, attempts=2).simulate(TASK, CandidatePlan(("x",))) == []


def test_merger_never_merges_on_a_single_yes_and_trusts_keys():
    client = by_stage({"state merger": [{"same": True}, {"same": False}, {"same": True}, {"same": True}]})
    merger = subagents.KeyJudgeMerger(client)
    states = [
        PredictedState("door closed, key on table"),
        PredictedState("door closed, key on the table"),
        PredictedState("Door closed,  key on table."),
        PredictedState("door closed; key on table"),
        PredictedState("door open", key="A"),
        PredictedState("door open", key="B"),
        PredictedState("something else entirely, unrelated"),
    ]
    groups = merger.merge(TASK, states)
    # 1: yes then no -> kept apart; 2: identical up to case/spacing -> merged without asking;
    # 3: yes and yes -> merged; 4/5: keys differ -> apart; 6: too dissimilar to ask.
    assert groups == [0, 1, 0, 0, 4, 5, 6]
    assert len(asked(client, "state merger")) == 4


def test_labeler_falls_back_to_neutral():
    client = by_stage({"reward labeler": [{"labels": [1]}]})  # wrong count every time
    labels = subagents.ModelRewardLabeler(client, attempts=2).label(TASK, [PredictedState("a"), PredictedState("b")])
    assert labels == [0, 0]


def test_plan_with_a_model_end_to_end_and_malformed_answers():
    client = by_stage(
        {
            "plan sampler": [
                "{not json",
                {"plans": [{"subplans": ["take key", "open door"]}, {"subplans": ["kick door"]}]},
            ],
            "state simulator": [
                {"steps": [{"state": "holding key", "cost": [1]}, {"state": "door open", "cost": [1]}]},
                {"steps": [{"state": "door broken", "cost": [1, 2]}]},  # wrong cost length, then fixed
                {"steps": [{"state": "door broken", "cost": [1]}]},
            ],
            "reward labeler": [{"labels": [0, 0, 1, -1]}],
            "state merger": [{"same": False}],
        }
    )
    result = plan(TASK.history, TASK.goal, {"steps": 4}, model=client)
    assert result.status == "route"
    assert [s.action for s in result.route] == ["take key", "open door"]
    assert result.graph is not None and result.solution is not None
    path_problem(result.graph).check_walk(result.solution.path)
    stages = json.loads(json.dumps(result.to_json()))["stages"]
    assert [s["stage"] for s in stages] == ["sample", "simulate", "simulate", "merge", "label"]
    assert stages[0]["calls"][0]["attempts"][0]["error"]


def test_plan_with_a_model_that_never_answers_well_says_no_route():
    client = by_stage(
        {"plan sampler": ["nope"], "state simulator": ["nope"], "reward labeler": ["nope"], "state merger": ["nope"]}
    )
    result = plan("somewhere", "elsewhere", {"steps": 3}, model=client)
    assert result.status == "no_route" and result.reason == "the plan sampler produced no plan."


def test_a_steps_budget_caps_how_long_a_sampled_plan_may_be():
    """With each step costing exactly 1 step, a plan longer than the steps budget could never be followed, so the
    model sampler is asked for no longer ones (the embedded model filled 8 calls for a 2-step budget and then
    could not simulate them within its answer cap)."""
    for budget, longest in (({"steps": 2}, 2), ({"steps": 2.5, "usd": 1}, 2), ({"usd": 1}, 8), ({"steps": 30}, 8)):
        client = by_stage({"plan sampler": ["nope"]})
        plan("at the door", "the door is open", budget, model=client)
        schema = asked(client, "plan sampler")[0].json_schema
        assert schema["properties"]["plans"]["items"]["properties"]["subplans"]["maxItems"] == longest, budget
