"""EGB's deterministic logic on a scripted tool model: entropy estimates, branching order, budget, re-execution."""

from __future__ import annotations

import math

import pytest

from metaharness.agents.branching import (
    Meter,
    Vote,
    argument_options,
    distribution_from_logprobs,
    entropy,
    execute_plan,
    run_egb,
    vote_from_samples,
)
from metaharness.json_types import JSONValue
from metaharness.models.protocol import TokenLogprob, Tool


class ChainEnv:
    """Step i offers tools good{i}, bad{i}, odd{i}; each takes the previous result and tags it with the tool."""

    goal = "chain"

    def __init__(self, n: int):
        self.n = n
        self.calls: list[tuple[int, str]] = []

    @property
    def instructions(self) -> list[str]:
        return [f"do step {i}" for i in range(self.n)]

    @property
    def constants(self):
        return [("input", "S0:")]

    def candidates(self, index: int) -> list[Tool]:
        schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": f"^S{index}:"}}}
        return [Tool(f"{kind}{index}", f"{kind} tool", schema) for kind in ("good", "bad", "odd")]

    def execute(self, index: int, tool: str, arguments: dict) -> str:
        self.calls.append((index, tool))
        return f"S{index + 1}:{arguments['x'][3:]}{tool[0]}"

    def verify(self, final) -> bool:
        return final == f"S{self.n}:" + "g" * self.n


class ScriptedChooser:
    """Returns fixed votes per step (black-box counts); records which steps it was asked about."""

    def __init__(self, votes: dict[int, dict[str, int]], n: int):
        self.votes = votes
        self.n = n
        self.meter = Meter()
        self.asked: list[int] = []

    def vote(self, view, samples):
        self.asked.append(view.index)
        counts = self.votes.get(view.index, {"good": samples})
        choices = [f"{kind}{view.index}" for kind, c in counts.items() for _ in range(c)]
        self.meter.add(len(choices))
        return vote_from_samples(choices, [t.name for t in view.candidates])

    def fill(self, view, tool, options):
        raise AssertionError("every step has exactly one fitting value")


def test_entropy_of_votes():
    assert entropy({"a": 1.0}) == 0 and str(entropy({"a": 1.0})) == "0.0"
    assert entropy({"a": 0.5, "b": 0.5}) == pytest.approx(1.0)
    vote = vote_from_samples(["b", "a", "b", "c", "b"], ["a", "b", "c"])
    assert vote.probs == {"b": 0.6, "a": 0.2, "c": 0.2}
    assert vote.entropy == pytest.approx(-(0.6 * math.log2(0.6) + 2 * 0.2 * math.log2(0.2)))
    assert vote.choice == "b"
    assert vote.ranking == ["b", "a", "c"]  # the a/c tie keeps the candidate order


def test_majority_ties_follow_candidate_order():
    assert vote_from_samples(["y", "x"], ["x", "y"]).choice == "x"
    assert vote_from_samples(["y", "x"], ["y", "x"]).choice == "y"


def _tokens(pieces):
    return [TokenLogprob(text, lp, tuple(top)) for text, lp, top in pieces]


def test_white_box_distribution_from_logprobs():
    # Generated '{"tool": "get_order_buyer"}'; at "_order" the model also liked "_product", at "_buyer" "_total".
    text = '{"tool": "get_order_buyer"}'
    tokens = _tokens(
        [
            ('{"', 0.0, [('{"', 0.0)]),
            ("tool", 0.0, [("tool", 0.0)]),
            ('": "', 0.0, [('": "', 0.0)]),
            ("get", math.log(0.9), [("get", math.log(0.9)), ("set", math.log(0.1))]),
            (
                "_order",
                math.log(0.6),
                [("_order", math.log(0.6)), ("_product", math.log(0.3)), ("_zzz", math.log(0.1))],
            ),
            ("_buyer", math.log(0.5), [("_buyer", math.log(0.5)), ("_total", math.log(0.25))]),
            ('"}', 0.0, [('"}', 0.0)]),
        ]
    )
    candidates = ["get_order_buyer", "get_order_total", "get_product_price", "set_order_buyer", "delete_order"]
    probs = distribution_from_logprobs(text, tokens, candidates, start=len('{"tool": "'))
    raw = {
        "get_order_buyer": 0.9 * 0.6 * 0.5,
        "get_order_total": 0.9 * 0.6 * 0.25,
        "get_product_price": 0.9 * 0.3,
        "set_order_buyer": 0.1,
    }
    total = sum(raw.values())
    for name, p in raw.items():
        assert probs[name] == pytest.approx(p / total)
    assert probs["delete_order"] == 0
    vote = Vote(probs, "logprobs", tuple(candidates))
    assert vote.choice == "get_order_buyer"
    assert vote.ranking[1] == "get_product_price"


def test_white_box_rejects_tokens_that_do_not_spell_the_text():
    with pytest.raises(ValueError):
        distribution_from_logprobs('{"tool": "a"}', _tokens([("x", 0.0, [])]), ["a"], start=10)


def test_phase_one_executes_the_majority_tool():
    env = ChainEnv(4)
    chooser = ScriptedChooser({2: {"bad": 3, "good": 2}}, 4)
    trajectory = execute_plan(env, chooser, samples=5)
    assert trajectory.tools == ["good0", "good1", "bad2", "good3"]
    assert trajectory.final == "S4:ggbg"
    assert chooser.meter.samples == 20


def test_branching_goes_to_the_highest_entropy_step_first():
    # Step 1 is wrong with a 3/2 split, step 3 is right with a 2/2/1 split (higher entropy); step 1's runner-up
    # fixes the plan. EGB tries step 3's alternatives first (higher entropy), then step 1.
    env = ChainEnv(5)
    votes = {1: {"bad": 3, "good": 2}, 3: {"good": 2, "odd": 2, "bad": 1}}
    chooser = ScriptedChooser(votes, 5)
    result = run_egb(env, chooser, samples=5, branch_budget=5, downstream="revote")
    assert result.verified
    assert [t.branch_step for t in result.trajectories[1:]] == [3, 3, 1]
    assert [t.steps[t.branch_step or 0].tool for t in result.trajectories[1:]] == ["odd3", "bad3", "good1"]
    assert result.answer.tools == ["good0", "good1", "good2", "good3", "good4"]
    assert result.answer.steps[1].origin == "substituted"


def test_branch_reexecutes_downstream_steps_with_new_votes():
    env = ChainEnv(5)
    chooser = ScriptedChooser({1: {"bad": 3, "good": 2}}, 5)
    result = run_egb(env, chooser, samples=5, branch_budget=1, downstream="revote")
    assert result.verified and result.branches == 1
    # phase 1 asked about every step; the branch at step 1 kept steps 0..0, reused step 1's vote, re-voted 2..4
    assert chooser.asked == [0, 1, 2, 3, 4, 2, 3, 4]
    assert result.answer.final == "S5:ggggg"
    assert chooser.meter.samples == 8 * 5


def test_branch_budget_is_respected():
    env = ChainEnv(4)
    votes = {0: {"good": 4, "bad": 1}, 1: {"good": 2, "odd": 2, "bad": 1}, 3: {"bad": 3, "good": 2}}
    chooser = ScriptedChooser(votes, 4)
    result = run_egb(env, chooser, samples=5, branch_budget=2)
    # the two branches go to step 1 (2/2/1, highest entropy) and its second alternative; step 3's fix is never tried
    assert not result.verified
    assert result.branches == 2
    assert [t.branch_step for t in result.trajectories[1:]] == [1, 1]
    assert result.answer is result.trajectories[0]


def test_zero_budget_is_majority_only():
    env = ChainEnv(3)
    chooser = ScriptedChooser({1: {"bad": 3, "good": 2}}, 3)
    result = run_egb(env, chooser, samples=5, branch_budget=0)
    assert not result.verified and len(result.trajectories) == 1


def test_branches_spawned_downstream_join_the_queue():
    # Phase 1 errs at step 0 (3/2). After substituting good0, the re-voted step 2 errs too (a new vote, now 3/2);
    # that runner-up only exists in the branch's votes, so fixing it needs the dynamic queue.
    env = ChainEnv(3)

    class Drifting(ScriptedChooser):
        def vote(self, view, samples):
            if view.index == 2 and view.history[0].tool == "good0":
                self.votes[2] = {"bad": 3, "good": 2}
            return super().vote(view, samples)

    chooser = Drifting({0: {"bad": 3, "good": 2}}, 3)
    result = run_egb(env, chooser, samples=5, branch_budget=3, downstream="revote")
    assert result.verified
    assert [t.branch_step for t in result.trajectories[1:]] == [0, 2]
    assert result.trajectories[2].parent == 1


def test_reuse_mode_repairs_two_wrong_steps_without_new_votes():
    env = ChainEnv(4)
    chooser = ScriptedChooser({1: {"bad": 3, "good": 2}, 3: {"bad": 3, "good": 2}}, 4)
    result = run_egb(env, chooser, samples=5, branch_budget=5, downstream="reuse")
    assert result.verified
    assert chooser.asked == [0, 1, 2, 3]  # only phase 1 voted
    # equal entropies: step 1 first (its branch still fails at step 3), then step 3 on the phase-1 run, then step 3
    # on the branch: a branch of a branch fixes both steps
    assert [(t.parent, t.branch_step) for t in result.trajectories[1:]] == [(0, 1), (0, 3), (1, 3)]
    assert [s.origin for s in result.answer.steps] == ["voted", "substituted", "reused", "substituted"]


def test_sample_cap_stops_a_branch_incomplete():
    env = ChainEnv(4)
    chooser = ScriptedChooser({0: {"bad": 3, "good": 2}}, 4)
    chooser.meter = Meter(cap=30)
    result = run_egb(env, chooser, samples=5, branch_budget=3, downstream="revote")
    assert not result.verified
    assert chooser.meter.samples == 30
    assert not result.trajectories[-1].complete


def test_random_order_is_seeded_and_uses_the_same_branch_points():
    env = ChainEnv(6)
    votes = {i: {"good": 3, "bad": 2} for i in range(6)} | {5: {"bad": 3, "good": 2}}

    def branch_steps(seed):
        result = run_egb(env, ScriptedChooser(dict(votes), 6), samples=5, branch_budget=6, order="random", seed=seed)
        return [t.branch_step for t in result.trajectories[1:]]

    assert branch_steps(1) == branch_steps(1)
    first = {branch_steps(seed)[0] for seed in range(10)}
    assert len(first) > 1 and first <= set(range(6))


def test_argument_options_use_enums_and_schema_fitting_known_values():
    tool = Tool(
        "t",
        "",
        {
            "type": "object",
            "properties": {
                "order_id": {"type": "string", "pattern": "^ORD-[0-9]{5}$"},
                "currency": {"type": "string", "enum": ["EUR", "USD"]},
                "amount": {"type": "number"},
            },
        },
    )
    known: list[tuple[str, JSONValue]] = [
        ("task", "ORD-00001"),
        ("s1", "CUS-00002"),
        ("s2", 12.5),
        ("s3", {"error": "x"}),
        ("s4", "ORD-00003"),
    ]
    options = argument_options(tool, known)
    assert options == {"order_id": ["ORD-00003", "ORD-00001"], "currency": ["EUR", "USD"], "amount": [12.5]}
