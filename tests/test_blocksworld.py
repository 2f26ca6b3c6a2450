"""BlocksWorld: mechanics, the oracle against hand counts and state-space sizes, the generator, the shipped set."""

from __future__ import annotations

import random

import pytest
from puzzle_oracle import optimal_plan

from metaharness.agents.environments.blocksworld import BlocksWorld, generate_problem, parse_stacks
from metaharness.agents.environments.puzzle import viable
from metaharness.agents.environments.puzzle_instances import generate_instances, load_instance_set, make_env
from metaharness.errors import InputError


def test_moves_and_no_ops():
    env = BlocksWorld("A B | C", "A B C")
    s = env.start
    assert env.step(s, "move C onto B") == parse_stacks("A B C")
    assert env.step(s, "move B to table") == parse_stacks("A | B | C")
    for no_op in ("move A onto C", "move C to table", "move B onto B", "move D onto A", "jump"):
        assert env.step(s, no_op) == s
    assert env.is_goal(env.step(s, "move C onto B"))


def test_oracle_hand_counts_and_state_space():
    tower = BlocksWorld("A B C", "C B A")  # reverse a tower: C to table, B onto C, A onto B
    assert tower.distance(tower.start) == 3
    assert optimal_plan(tower, tower.start) == ["move C to table", "move B onto C", "move A onto B"]
    assert BlocksWorld("A B | C D", "A C | B D").distance(parse_stacks("A B | C D")) == 3  # B down, D onto B, C onto A
    # state-space sizes (Lah numbers): the table covers every arrangement
    for blocks, states in ((3, 13), (4, 73), (5, 501)):
        names = " ".join(chr(65 + i) for i in range(blocks))
        env = BlocksWorld(names, names)
        env.distance(env.start)
        assert env._table is not None and len(env._table) == states


def test_irrecoverable_under_tight_budget():
    env = BlocksWorld("A | B | C", "A B C")
    assert env.distance(env.start) == 2
    wrong = env.step(env.start, "move C onto A")
    assert env.distance(wrong) == 3  # undo costs one more, then the two right moves
    assert viable(env, env.start, 2) and not viable(env, wrong, 1)


def test_text_round_trips():
    env = BlocksWorld("B A | C", "A B C")
    assert env.parse_state(env.render(env.start)) == env.start
    assert env.state_of(env.key(env.start)) == env.start
    assert env.parse_action("Thought: first Move a onto the table... Action: move C onto A") == "move C onto A"
    assert env.parse_action("move B to the table") == "move B to table"
    assert env.parse_state("nonsense") is None
    with pytest.raises(InputError):
        BlocksWorld("A B", "A C")
    with pytest.raises(InputError):
        parse_stacks("A a")


def test_generator_bins_and_shipped_set():
    rng = random.Random(1)
    made = [item for item in (generate_problem(rng) for _ in range(20)) if item]
    assert len(made) >= 10  # a draw may fail (None); most must not
    for (start, goal), t_star in made:
        assert BlocksWorld(start, goal).distance(BlocksWorld(start, goal).start) == t_star
    small = generate_instances("blocksworld", bins={"easy": 3, "hard": 6}, per_bin=2, seed=5, params={"blocks": 5})
    assert all(abs(i.t_star - small.bins[i.bin]) <= 1 for i in small.instances)
    shipped = load_instance_set("blocksworld_v1")
    assert len(shipped.instances) == 40
    for inst in shipped.instances:
        env = make_env(inst)
        assert env.distance(env.start) == inst.t_star
