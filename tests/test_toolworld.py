"""ToolWorld: the generated library, the deterministic simulator, the task generator and retrieval."""

from __future__ import annotations

import json

import jsonschema
import pytest

from metaharness.agents.branching import Meter, run_egb, vote_from_samples
from metaharness.agents.environments.toolworld import ToolWorld
from metaharness.agents.environments.toolworld_library import Simulator
from metaharness.agents.environments.toolworld_retrieval import BM25Index, tokenize
from metaharness.errors import InputError
from metaharness.json_types import JSONObject


@pytest.fixture(scope="module")
def world() -> ToolWorld:
    return ToolWorld(seed=3)


@pytest.fixture(scope="module")
def tasks(world):
    return world.generate_tasks(12, seed=5)


def test_library_is_large_with_valid_unique_schemas(world):
    names = [spec.name for spec in world.library]
    assert len(names) >= 1000
    assert len(set(names)) == len(names)
    for spec in world.library:
        assert spec.description
        tool = spec.as_tool()
        assert tool.name == spec.name and tool.parameters["required"] == [n for n, _ in spec.inputs]
    for schema in {json.dumps(spec.parameters, sort_keys=True) for spec in world.library}:  # distinct shapes
        jsonschema.Draft202012Validator.check_schema(json.loads(schema))


def test_aliases_compute_the_same_function_and_distractors_do_not(world):
    sim = world.simulator
    args = {"order_id": "ORD-01234"}
    assert sim.execute("get_order_buyer", args) == sim.execute("order_buyer_lookup", args)
    assert sim.execute("get_order_buyer", args).startswith("CUS-")
    distractors = ["get_previous_order_buyer", "get_order_buyer_v1", "get_order_buyer_eu"]
    assert all(sim.execute(name, args) != sim.execute("get_order_buyer", args) for name in distractors)
    money = {"amount": 100.0, "currency": "EUR"}
    assert sim.execute("convert_currency", money) == sim.execute("calc_convert_currency", money) == 92.0
    assert sim.execute("convert_currency_v1", money) != 92.0
    assert sim.execute("add_sales_tax", {"amount": 100.0, "country": "DE"}) == 119.0
    assert sim.execute("apply_discount", {"amount": 80.0, "percent": 25}) == 60.0


def test_simulator_is_deterministic_per_seed():
    calls: list[tuple[str, JSONObject]] = [
        ("get_product_seller", {"product_id": "PRD-00042"}),
        ("get_product_price", {"product_id": "PRD-00042"}),
        ("delete_order", {"order_id": "ORD-00001"}),
    ]
    a, b, c = Simulator(seed=1), Simulator(seed=1), Simulator(seed=2)
    assert [a.execute(*call) for call in calls] == [b.execute(*call) for call in calls]
    assert [a.execute(*call) for call in calls] != [c.execute(*call) for call in calls]


def test_bad_calls_are_error_observations(world):
    sim = world.simulator
    assert "error" in sim.execute("no_such_tool", {})
    assert "error" in sim.execute("get_order_buyer", {"order_id": "CUS-00001"})  # wrong id type
    assert "error" in sim.execute("get_order_buyer", {})
    assert "error" in sim.execute("convert_currency", {"amount": 1.0, "currency": "XYZ"})


def test_tasks_are_long_reproducible_and_exactly_solvable(world, tasks):
    assert [t.describe() for t in tasks] == [t.describe() for t in world.generate_tasks(12, seed=5)]
    assert [t.describe() for t in tasks] != [t.describe() for t in world.generate_tasks(12, seed=6)]
    for task in tasks:
        assert len(task.steps) >= 10
        for index, step in enumerate(task.steps):
            for tool in step.accepted:  # every accepted tool reproduces the reference result
                assert task.execute(index, tool, step.arguments) == step.result
        assert task.verify(task.answer)
        assert isinstance(task.answer, float)
        assert not task.verify(round(task.answer + 0.01, 2))


def _replay(task, pick) -> object:
    """Execute the plan with ``pick(index, step)`` as the tool, feeding results forward like an agent would."""
    results: list = []
    for index, step in enumerate(task.steps):
        arguments = {
            name: (task.start if src == -1 else results[src]) for name, src in step.sources.items() if src is not None
        } | {k: v for k, v in step.arguments.items() if step.sources[k] is None}
        results.append(task.execute(index, pick(index, step), arguments))
    return results[-1]


def test_several_trajectories_are_valid_and_a_distractor_fails(world, tasks):
    task = tasks[0]

    def is_alias(name):
        return name.endswith("_lookup") or name.startswith("calc_")

    def canonical(i, step):
        return min(step.accepted, key=is_alias)

    def aliases(i, step):
        return max(step.accepted, key=is_alias)

    assert task.verify(_replay(task, canonical)) and task.verify(_replay(task, aliases))
    assert task.tool_match([aliases(i, s) for i, s in enumerate(task.steps)]) == 1.0
    wrong_at = 2
    distractor = next(
        s.name
        for s in world.library
        if s.family == task.steps[wrong_at].family
        and s.name not in task.steps[wrong_at].accepted
        and s.role == "qualified"
    )

    def pick(i, step):
        return distractor if i == wrong_at else canonical(i, step)

    assert not task.verify(_replay(task, pick))
    assert task.tool_match([pick(i, s) for i, s in enumerate(task.steps)]) == pytest.approx(1 - 1 / len(task.steps))


def test_retrieval_offers_a_short_list_that_holds_an_accepted_tool(tasks):
    for task in tasks:
        assert task.retrieval_recall() == 1.0
        assert all(len(task.candidates(i)) == task.candidates_k for i in range(len(task.steps)))


def test_bm25_ranks_matching_documents_first():
    assert tokenize("get_order_buyer Returns") == ["get", "order", "buyer", "return"]
    index = BM25Index(
        [
            "get_order_buyer Return the buyer of the order.",
            "delete_cart Delete a cart.",
            "get_order_total Return the total of the order.",
        ]
    )
    assert index.top("who is the buyer of this order", 2) == [0, 2]
    assert index.top("nothing matches", 3) == []


def test_generator_rejects_bad_parameters(world):
    with pytest.raises(InputError):
        world.generate_tasks(0)


class OracleChooser:
    """Votes 3:2 for a distractor at one step, otherwise unanimously for an accepted tool; fills correctly."""

    def __init__(self, task, wrong_at: int):
        self.task, self.wrong_at, self.meter = task, wrong_at, Meter()

    def vote(self, view, samples):
        names = [t.name for t in view.candidates]
        step = self.task.steps[view.index]
        right = next(n for n in names if n in step.accepted)
        if view.index == self.wrong_at:
            wrong = next(n for n in names if n not in step.accepted)
            choices = [wrong] * 3 + [right] * 2
        else:
            choices = [right] * samples
        self.meter.add(len(choices))
        return vote_from_samples(choices, names)

    def fill(self, view, tool, options):
        step = self.task.steps[view.index]
        self.meter.add(1)
        return {
            name: step.arguments.get(name, values[0])
            if step.sources.get(name) is None
            else view.history[step.sources[name]].observation
            for name, values in options.items()
        }


def test_egb_repairs_a_wrong_step_on_a_real_task(tasks):
    task = tasks[1]
    majority = run_egb(task, OracleChooser(task, wrong_at=4), samples=5, branch_budget=0)
    assert not majority.verified
    assert task.tool_match(majority.answer.tools) == pytest.approx(1 - 1 / len(task.steps))
    egb = run_egb(task, OracleChooser(task, wrong_at=4), samples=5, branch_budget=2)
    assert egb.verified and egb.branches == 1
    assert task.tool_match(egb.answer.tools) == 1.0
