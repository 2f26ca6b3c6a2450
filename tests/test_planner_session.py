"""The planning session: plan, continue while the predictions hold, replan on a state or cost mismatch, async."""

from __future__ import annotations

import asyncio
import threading

import pytest
from fakes import FixedPlans, ScriptedModel, TableLabeler, TableSimulator

from metaharness.errors import InputError
from metaharness.planner import Observation, PlanningSession, RouteStep
from metaharness.planner.subagents import CandidatePlan, PlanningTask, SimulatedStep

# A door domain: two plans, one through the key (2 steps of cost 1), one kicking the door (cost 3, a dead end).
STEPS = {
    "take key": SimulatedStep("holding the key", (1.0,)),
    "open door": SimulatedStep("door open", (1.0,)),
    "kick door": SimulatedStep("door broken", (3.0,)),
    "wait": SimulatedStep("holding the key", (1.0,)),
}
PLANS = (("take key", "open door"), ("kick door",))


def session(budget=None, **options) -> PlanningSession:
    stages = {
        "sampler": FixedPlans(*PLANS),
        "simulator": TableSimulator(STEPS),
        "labeler": TableLabeler({"door open": 1, "door broken": -1}),
        **options,
    }
    return PlanningSession("the door is open", budget or {"steps": 4}, **stages)


def test_the_session_continues_while_predictions_hold_and_finishes_at_the_goal():
    s = session()
    result = s.plan(["At the door; the key is on the table."])
    assert result.status == "route" and [step.action for step in s.route] == ["take key", "open door"]
    assert s.step is not None and s.step.action == "take key" and s.step.expected_state == "holding the key"
    seen = s.observe("Holding the key.", {"steps": 1})  # equal up to case, spacing and the full stop
    assert isinstance(seen, Observation)
    assert seen.step is not None and seen.checked is not None
    assert (seen.status, seen.matched, seen.step.action, seen.checked.action) == (
        "continue",
        True,
        "open door",
        "take key",
    )
    assert s.remaining == {"steps": 3.0} and s.planning_calls == 1
    seen = s.observe("door open", [1])
    assert (seen.status, seen.step, seen.planning) == ("done", None, None)
    assert s.spent == {"steps": 2.0} and s.planning_calls == 1


def test_a_different_state_replans_from_the_observed_state_with_the_remaining_budget():
    sampler = FixedPlans(("take key", "open door"))
    s = session(sampler=sampler)
    s.plan(["At the door; the key is on the table."])
    seen = s.observe("the key fell under the table", {"steps": 1})
    assert seen.status == "replanned" and not seen.matched and "not the predicted one" in seen.reason
    assert seen.checked is not None and seen.checked.action == "take key"
    assert seen.planning is s.result and s.planning_calls == 2
    replanned = sampler.tasks[-1]
    assert replanned.history == (
        "At the door; the key is on the table.",
        "carried out: take key",
        "the key fell under the table",
    )
    assert replanned.budget == (3.0,)
    assert seen.step is not None and seen.step.action == "take key"  # the new route, from the observed state
    # an explicit history replaces the session's own
    s.observe("still no key", {"steps": 1}, history=["h1", "no key"])
    assert sampler.tasks[-1].history == ("h1", "no key") and sampler.tasks[-1].budget == (2.0,)


def test_a_step_that_costs_more_than_predicted_replans():
    s = session({"steps": 5})
    s.plan(["at the door"])
    seen = s.observe("holding the key", {"steps": 2})
    assert seen.status == "replanned" and "cost more than predicted (steps 2 > predicted 1)" in seen.reason
    assert s.remaining == {"steps": 3.0}
    # spending less than predicted is fine, and once the goal state is reached the last step's cost is moot
    s = session({"steps": 5})
    s.plan(["at the door"])
    assert s.observe("holding the key", {"steps": 0.5}).status == "continue"
    assert s.observe("door open", {"steps": 3}).status == "done" and s.remaining == {"steps": 1.5}


def test_canonical_keys_decide_when_given_and_a_custom_check_otherwise():
    keyed = TableSimulator({a: SimulatedStep(st.state, st.cost, st.state.upper()) for a, st in STEPS.items()})
    s = session(simulator=keyed)
    s.plan(["at the door"], key="AT THE DOOR")
    assert s.step is not None and s.step.key == "HOLDING THE KEY"
    assert s.observe("any text at all", {"steps": 1}, key="HOLDING THE KEY").status == "continue"
    assert s.observe("door open", {"steps": 1}, key="SOMETHING ELSE").status == "replanned"
    judged = []

    def same(observed: str, step: RouteStep) -> bool:
        judged.append((observed, step.expected_state))
        return True

    s = session(same=same)
    s.plan(["at the door"])
    assert s.observe("whatever", {"steps": 1}).status == "continue" and judged == [("whatever", "holding the key")]


def test_the_model_judge_decides_similar_texts():
    def answer(request):  # the judge: "same" only for the key-holding pair
        return {"same": request.messages[-1]["content"].count("holding the key") == 2}

    judge = ScriptedModel(answer)
    s = session(model=judge)
    s.plan(["at the door"])
    judge.requests.clear()
    seen = s.observe("holding the key now", {"steps": 1})
    assert seen.status == "continue" and len(judge.requests) == 2  # asked in both orders
    assert len(seen.calls) == 2 and all(call["system"].startswith("You are the state merger") for call in seen.calls)


def test_without_a_route_observe_plans_again():
    s = session({"steps": 1})  # two steps needed: no route
    result = s.plan(["at the door"])
    assert result.status == "no_route" and s.step is None
    seen = s.observe("at the door", {"steps": 0})
    assert seen.status == "replanned" and seen.checked is None and seen.step is None and s.planning_calls == 2


def test_horizon_may_follow_the_remaining_budget():
    horizons = []

    def horizon(left: dict[str, float]) -> int:
        horizons.append(left)
        return 2

    s = session({"steps": 4}, horizon=horizon)
    s.plan(["at the door"])
    assert s.result is not None and s.result.graph is not None
    assert horizons == [{"steps": 4.0}] and s.result.graph.horizon == 2


def test_bad_input_is_refused_with_the_problem_named():
    with pytest.raises(InputError, match="needs model="):
        PlanningSession("goal", {"steps": 3})
    with pytest.raises(InputError, match="must be a number >= 0"):
        session({"steps": -1})
    s = session()
    s.plan(["at the door"])
    with pytest.raises(InputError, match="does not have"):
        s.observe("holding the key", {"usd": 1})
    with pytest.raises(InputError, match="one per limit"):
        s.observe("holding the key", [1, 2])
    with pytest.raises(InputError, match="finite number >= 0"):
        s.observe("holding the key", {"steps": -1})


class GatedPlans(FixedPlans):
    """Samples only after the event loop has opened its gate while the sampling is under way: were the stage run on
    the loop's thread, the loop could not open it and the sampler would give up (after 30 s)."""

    def __init__(self, *plans: tuple[str, ...]) -> None:
        super().__init__(*plans)
        self.gate = threading.Event()
        self.threads: list[int] = []

    def sample(self, task: PlanningTask, plans: int) -> list[CandidatePlan]:
        self.threads.append(threading.get_ident())
        self.gate.clear()
        assert self.gate.wait(30), "the event loop did not run while the stage worked"
        return super().sample(task, plans)


def test_async_calls_run_off_the_event_loop():
    sampler = GatedPlans(*PLANS)
    s = session(sampler=sampler)

    async def run():
        async def opener():
            while True:
                sampler.gate.set()
                await asyncio.sleep(0.01)

        task = asyncio.create_task(opener())
        result = await s.aplan(["at the door"])
        seen = await s.aobserve("door broken", {"steps": 1})  # a mismatch: replans, again in a thread
        task.cancel()
        return result, seen, threading.get_ident()

    result, seen, loop_thread = asyncio.run(run())
    assert result.status == "route" and seen.status == "replanned" and s.planning_calls == 2
    assert len(sampler.threads) == 2 and loop_thread not in sampler.threads


def test_the_session_ends_when_the_realised_spend_uses_up_the_budget():
    """Zero-cost predictions and a real cost per step: the loop ends at the budget instead of running on."""

    free = TableSimulator({a: SimulatedStep(st.state, (0.0,)) for a, st in STEPS.items()})
    s = session({"steps": 3}, simulator=free)
    s.plan(["At the door; the key is on the table."])
    seen = []
    while s.step is not None:  # every step fails: the agent is still at the door
        seen.append(s.observe("At the door; the key is on the table.", {"steps": 1}))
    assert [o.status for o in seen] == ["replanned", "replanned", "exhausted"]
    assert seen[-1].step is None and "steps 3 of 3" in seen[-1].reason and s.spent == {"steps": 3.0}
    assert s.used_up() == "steps 3 of 3"


def test_a_limit_nothing_was_spent_on_never_ends_the_session():
    priced = TableSimulator({a: SimulatedStep(st.state, (*st.cost, 0.0)) for a, st in STEPS.items()})
    s = session({"steps": 4, "usd": 0}, simulator=priced)
    assert s.plan(["At the door; the key is on the table."]).status == "route"
    assert s.observe("holding the key", {"steps": 1}).status == "continue" and s.used_up() == ""
