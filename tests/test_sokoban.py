"""Sokoban: mechanics, the exact oracle on hand-made levels, the reverse-play generator and the shipped set."""

from __future__ import annotations

import random
from collections import deque
from typing import Any

import pytest
from puzzle_oracle import optimal_plan, viable_actions

from metaharness.agents.environments.puzzle_instances import (
    ENVIRONMENTS,
    generate_instances,
    load_instance_set,
    make_env,
)
from metaharness.agents.environments.sokoban import Sokoban, SokobanState, generate_level
from metaharness.errors import InputError

CORRIDOR = "######\n#@$ .#\n######"


def forward_bfs(env: Sokoban, state) -> int | None:
    """Reference T*: plain forward breadth-first search, no tables."""
    seen, queue = {state: 0}, deque([state])
    while queue:
        s = queue.popleft()
        if env.is_goal(s):
            return seen[s]
        for a in "UDLR":
            n = env.step(s, a)
            if n not in seen:
                seen[n] = seen[s] + 1
                queue.append(n)
    return None


def test_push_walk_and_blocked_moves():
    env = Sokoban(CORRIDOR)
    s = env.start
    assert env.step(s, "U") == s  # wall: unchanged (the runner still spends the step)
    assert env.step(s, "L") == s
    pushed = env.step(s, "R")
    assert pushed == SokobanState((1, 2), frozenset({(1, 3)}))
    assert env.is_goal(env.step(pushed, "R"))
    # a box against a wall cannot be pushed; two boxes in a row cannot be pushed
    stuck = Sokoban("######\n#@$#.#\n######")
    assert stuck.step(stuck.start, "R") == stuck.start
    two = Sokoban("#######\n#@$$..#\n#######")
    assert two.step(two.start, "R") == two.start


def test_legend_round_trip_and_render():
    level = "#######\n#+ $  #\n# *$. #\n#######"
    env = Sokoban(level)
    assert env.grid(env.start) == level
    assert env.start.player == (1, 1) and (2, 2) in env.start.boxes
    text = env.render(env.start)
    assert "boxes on goals: (2, 2)" in text and "player: (1, 1)" in text
    assert env.parse_state(f"predicted:\n{level}\nmore") == env.start
    assert env.state_of(env.key(env.start)) == env.start


@pytest.mark.parametrize("bad", ["", "#@#", "###\n#@$#\n###", "#@$.x#", "#@@$.#"])
def test_bad_maps_are_rejected(bad):
    with pytest.raises(InputError):
        Sokoban(bad)


@pytest.mark.parametrize(
    "level, t_star",
    [
        (CORRIDOR, 2),
        ("#####\n#@$.#\n#####", 1),
        ("#######\n#.    #\n#  $  #\n#   @ #\n#######", 6),  # three pushes and three moves to get behind the box
        ("######\n#@   #\n# $$ #\n# .. #\n######", 5),  # R D (push), U R D (push)
        ("#####\n#@  #\n#$  #\n#.###\n#####", 1),
    ],
)
def test_oracle_matches_hand_counts_and_forward_search(level, t_star):
    env = Sokoban(level)
    assert forward_bfs(env, env.start) == t_star
    assert env.distance(env.start) == t_star


def test_oracle_dead_ends_and_plans():
    env = Sokoban("######\n#    #\n# $@.#\n######")
    assert env.distance(env.start) == 6  # U L L D to get behind the box, then two pushes right
    corner = Sokoban("#####\n#$  #\n#  .#\n# @ #\n#####")
    assert corner.distance(corner.start) is None  # a box in a corner is a dead end
    plan, distance = optimal_plan(env, env.start), env.distance(env.start)
    assert plan is not None and distance is not None
    state = env.start
    for a in plan:
        state = env.step(state, a)
    assert env.is_goal(state) and len(plan) == distance
    assert viable_actions(env, env.start, distance) != []
    assert viable_actions(env, env.start, distance - 1) == []


def test_oracle_agrees_with_forward_search_on_generated_levels():
    rng = random.Random(7)
    checked = 0
    while checked < 8:
        made = generate_level(rng, boxes=2 if checked % 3 == 0 else 1)
        if made is None:
            continue
        env = Sokoban(made[0])
        assert made[1] == env.distance(env.start) == forward_bfs(env, env.start)
        checked += 1


def test_parse_action_reads_the_last_action():
    env = Sokoban(CORRIDOR)
    assert env.parse_action("Thought: go up, then right. Action: R") == "R"
    assert env.parse_action("I will move left") == "L"
    assert env.parse_action("nothing here") is None
    assert env.parse_action("Push it up. You have 3 actions left, 2 moves left") == "U"


def test_generator_bins_are_correct_and_reproducible():
    kwargs: dict[str, Any] = dict(
        bins={"easy": 6, "hard": 10},
        per_bin=3,
        tolerance=1,
        seed=3,
        params={"height": 7, "width": 9, "boxes": 1, "wall_prob": 0.08, "reverse_steps": [10, 60]},
    )
    first = generate_instances("sokoban", **kwargs)
    assert first.to_json() == generate_instances("sokoban", **kwargs).to_json()
    assert [i.bin for i in first.instances] == ["easy"] * 3 + ["hard"] * 3
    for inst in first.instances:
        env = make_env(inst)
        distance = env.distance(env.start)
        assert distance is not None and abs(distance - first.bins[inst.bin]) <= 1
        assert distance == inst.t_star


def test_shipped_set_is_valid_and_rebuildable():
    shipped = load_instance_set("sokoban_v1")
    assert shipped.name == "sokoban_v1" and len(shipped.instances) == 60
    assert len({i.spec["map"] for i in shipped.instances}) == 60
    for inst in shipped.instances:
        env = make_env(inst)
        assert env.distance(env.start) == inst.t_star
        assert abs(inst.t_star - shipped.bins[inst.bin]) <= shipped.tolerance
    for inst in shipped.instances[::12]:  # each rebuilt from its recorded seed and the set's generator params
        attempt = ENVIRONMENTS[inst.env][1]
        assert attempt(random.Random(inst.seed), shipped.params) == (inst.spec, inst.t_star)
    with pytest.raises(InputError):
        load_instance_set("sokoban_v0")
