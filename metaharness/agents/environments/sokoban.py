"""Sokoban with the seeds' mechanics, an exact oracle and a reverse-play level generator.

Map legend: ``#`` wall, ``.`` goal, ``$`` box, ``@`` player, ``*`` box on a goal, ``+`` player on a goal, space
floor. Actions ``U``/``D``/``L``/``R`` move the player one cell (row 0 is the top row, ``U`` lowers the row);
walking into a box pushes it one cell if the cell behind it is free. A move into a wall or a blocked push leaves
the state unchanged but still spends a step. The puzzle is solved when every box is on a goal.

The oracle is exact: one backward breadth-first search from every solved state (walking backwards and pulling
boxes) labels every state that can reach a solution with its distance, so ``distance`` is a table look-up and
dead ends (boxes in corners and the like) are simply the states the search never reaches.

>>> env = Sokoban("#####\\n#@$.#\\n#####")
>>> env.distance(env.start), env.is_goal(env.step(env.start, "R"))
(1, True)
"""

from __future__ import annotations

import random
import re
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass

from metaharness.errors import InputError

Pos = tuple[int, int]  # (row, col)

ACTIONS = ("U", "D", "L", "R")
DELTAS: dict[str, Pos] = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
_WORDS = {"up": "U", "down": "D", "left": "L", "right": "R"}
# "left" after a count noun ("3 actions left") is not a direction.
_ACTION_RE = re.compile(
    r"\b(?:([UDLR])|(?<!actions )(?<!action )(?<!steps )(?<!moves )(?<!turns )(up|down|left|right))\b", re.IGNORECASE
)

RULES = """Sokoban. The map is a grid of characters: # wall, . goal, $ box, @ player, * box on a goal,
+ player on a goal, space floor. Positions are (row, col); row 0 is the top row, col 0 the left column.
Actions: U (row - 1), D (row + 1), L (col - 1), R (col + 1). Each action moves the player one cell.
Moving into a box pushes it one cell further in the same direction, but only if that cell is floor or a goal.
Moving into a wall, or pushing a box into a wall or another box, does nothing but still uses up one action.
Boxes cannot be pulled. A box pushed into a corner that is not a goal can never be moved out again.
The puzzle is solved when every box is on a goal. You have a limited number of actions."""


@dataclass(frozen=True)
class SokobanState:
    player: Pos
    boxes: frozenset[Pos]


def _position(text: str) -> Pos:
    """``"row,col"`` as a position; ValueError unless it is exactly two integers."""
    row, col = text.split(",")
    return (int(row), int(col))


def _shift(pos: Pos, delta: Pos, times: int = 1) -> Pos:
    return (pos[0] + times * delta[0], pos[1] + times * delta[1])


class Sokoban:
    """One Sokoban level (a ``PuzzleEnv``); parse it from map text."""

    name = "sokoban"
    rules = RULES
    goal = "every box is on a goal: no '$' box off a goal remains on the map"

    def __init__(self, level: str):
        rows = level.strip("\n").split("\n")
        if not rows or not any(rows):
            raise InputError("Empty Sokoban map: give rows of '#', '.', '$', '@', '*', '+' and spaces.")
        self.height, self.width = len(rows), max(len(r) for r in rows)
        walls, goals, boxes, players = set(), set(), set(), []
        for r, row in enumerate(rows):
            for c, ch in enumerate(row.ljust(self.width)):
                if ch not in "#.$@*+ ":
                    raise InputError(f"Unknown character {ch!r} at row {r}, col {c} of the Sokoban map.")
                if ch == "#":
                    walls.add((r, c))
                if ch in ".*+":
                    goals.add((r, c))
                if ch in "$*":
                    boxes.add((r, c))
                if ch in "@+":
                    players.append((r, c))
        if len(players) != 1:
            raise InputError(f"A Sokoban map needs exactly one player ('@' or '+'); this one has {len(players)}.")
        if not boxes or len(boxes) != len(goals):
            raise InputError(
                f"A Sokoban map needs as many goals as boxes, at least one; got {len(boxes)} boxes and "
                f"{len(goals)} goals."
            )
        self.walls = frozenset(walls)
        self.goals = frozenset(goals)
        self.start = SokobanState(players[0], frozenset(boxes))
        self._table: dict[SokobanState, int] | None = None

    # --- mechanics -------------------------------------------------------------------------------------------
    def _inside(self, pos: Pos) -> bool:
        return 0 <= pos[0] < self.height and 0 <= pos[1] < self.width

    def free(self, pos: Pos) -> bool:
        """A cell that is inside the map and not a wall (boxes aside)."""
        return self._inside(pos) and pos not in self.walls

    def actions(self, state: SokobanState) -> list[str]:
        return list(ACTIONS)

    def step(self, state: SokobanState, action: str) -> SokobanState:
        delta = DELTAS.get(action)
        if delta is None:
            return state
        target = _shift(state.player, delta)
        if not self.free(target):
            return state
        if target in state.boxes:
            behind = _shift(target, delta)
            if not self.free(behind) or behind in state.boxes:
                return state
            return SokobanState(target, (state.boxes - {target}) | {behind})
        return SokobanState(target, state.boxes)

    def is_goal(self, state: SokobanState) -> bool:
        return state.boxes == self.goals

    def predecessors(self, state: SokobanState) -> list[tuple[SokobanState, bool]]:
        """States one action before ``state`` (excluding blocked moves), each flagged True when it was a push.

        Walking backwards: the player came from the cell behind it; if a box sits in front of the player, the
        player may also have just pushed it, i.e. walking backwards pulls the box along.
        """
        found = []
        for delta in DELTAS.values():
            came_from = _shift(state.player, delta, -1)
            if not self.free(came_from) or came_from in state.boxes:
                continue
            found.append((SokobanState(came_from, state.boxes), False))
            pushed = _shift(state.player, delta)
            if pushed in state.boxes:
                found.append((SokobanState(came_from, (state.boxes - {pushed}) | {state.player}), True))
        return found

    # --- oracle ----------------------------------------------------------------------------------------------
    def distance(self, state: SokobanState) -> int | None:
        """Exact minimum number of actions to solve from ``state``; ``None`` when it cannot be solved."""
        if self._table is None:
            self._table = self._distance_table()
        return self._table.get(state)

    def _distance_table(self) -> dict[SokobanState, int]:
        floor = [(r, c) for r in range(self.height) for c in range(self.width) if (r, c) not in self.walls]
        table = {SokobanState(p, self.goals): 0 for p in floor if p not in self.goals}
        queue = deque(table)
        while queue:
            state = queue.popleft()
            d = table[state] + 1
            for before, _ in self.predecessors(state):
                if before not in table:
                    table[before] = d
                    queue.append(before)
        return table

    def heuristic(self, state: SokobanState) -> float:
        """Manhattan distance of each misplaced box to its nearest goal, plus a tenth of the player's distance to
        the nearest misplaced box: what a greedy pusher minimises, blind to corners and blocked pushes."""
        misplaced = state.boxes - self.goals
        if not misplaced:
            return 0.0
        boxes = sum(min(abs(b[0] - g[0]) + abs(b[1] - g[1]) for g in self.goals) for b in misplaced)
        walk = min(abs(b[0] - state.player[0]) + abs(b[1] - state.player[1]) for b in misplaced)
        return boxes + walk / 10

    # --- text ------------------------------------------------------------------------------------------------
    def key(self, state: SokobanState) -> str:
        boxes = ";".join(f"{r},{c}" for r, c in sorted(state.boxes))
        return f"{state.player[0]},{state.player[1]}|{boxes}"

    def state_of(self, key: str) -> SokobanState:
        try:
            player, boxes = key.split("|")
            state = SokobanState(_position(player), frozenset(_position(b) for b in boxes.split(";") if b))
        except ValueError as exc:
            raise InputError(f"Not a Sokoban state key: {key!r} (expected 'row,col|row,col;row,col').") from exc
        if len(state.boxes) != len(self.start.boxes) or not all(self.free(p) for p in (state.player, *state.boxes)):
            raise InputError(f"State key {key!r} does not fit this map (wrong box count or a wall position).")
        return state

    def grid(self, state: SokobanState) -> str:
        """The map text of ``state`` with the standard legend."""
        return draw(self.height, self.width, self.walls, self.goals, state)

    def render(self, state: SokobanState) -> str:
        def cells(ps: frozenset[Pos]) -> str:
            return ", ".join(f"({r}, {c})" for r, c in sorted(ps)) or "none"

        return (
            f"{self.grid(state)}\n"
            f"player: ({state.player[0]}, {state.player[1]})\n"
            f"boxes not on goals: {cells(state.boxes - self.goals)}\n"
            f"goals without a box: {cells(self.goals - state.boxes)}\n"
            f"boxes on goals: {cells(state.boxes & self.goals)}"
        )

    def parse_state(self, text: str) -> SokobanState | None:
        """The first block of map rows in ``text``, if it is a state of this level (same walls and goals)."""
        rows: list[str] = []
        for line in (text or "").split("\n"):
            if line.strip() and set(line) <= set("#.$@*+ ") and "#" in line:
                rows.append(line)
            elif rows:
                break
        try:
            other = Sokoban("\n".join(rows))
        except InputError:
            return None
        same = (
            other.walls == self.walls and other.goals == self.goals and len(other.start.boxes) == len(self.start.boxes)
        )
        return other.start if same else None

    def parse_action(self, text: str) -> str | None:
        """The last action written in ``text`` ('U', 'D', 'L', 'R' or up/down/left/right; not the "left" of
        "actions left"), else ``None``."""
        found = None
        for letter, word in _ACTION_RE.findall(text or ""):
            found = (letter.upper() if letter.isupper() else found) if letter else _WORDS[word.lower()]
        return found


# --- generation by reverse play ------------------------------------------------------------------------------
def random_room(rng: random.Random, height: int, width: int, wall_prob: float) -> frozenset[Pos] | None:
    """Border walls plus random inner walls; ``None`` when the floor is not one connected area."""
    walls = {(r, c) for r in range(height) for c in range(width) if r in (0, height - 1) or c in (0, width - 1)}
    walls |= {(r, c) for r in range(1, height - 1) for c in range(1, width - 1) if rng.random() < wall_prob}
    floor = {(r, c) for r in range(height) for c in range(width)} - walls
    if not floor:
        return None
    seen, todo = set(), [next(iter(sorted(floor)))]
    while todo:
        pos = todo.pop()
        if pos in seen:
            continue
        seen.add(pos)
        todo.extend(n for n in (_shift(pos, d) for d in DELTAS.values()) if n in floor and n not in seen)
    return frozenset(walls) if seen == floor else None


def draw(height: int, width: int, walls: Collection[Pos], goals: Collection[Pos], state: SokobanState) -> str:
    """Map text in the standard legend (trailing spaces of a row are dropped)."""
    rows = []
    for r in range(height):
        row = []
        for c in range(width):
            pos = (r, c)
            if pos in walls:
                row.append("#")
            elif pos == state.player:
                row.append("+" if pos in goals else "@")
            elif pos in state.boxes:
                row.append("*" if pos in goals else "$")
            else:
                row.append("." if pos in goals else " ")
        rows.append("".join(row).rstrip())
    return "\n".join(rows)


def generate_level(
    rng: random.Random,
    *,
    height: int = 7,
    width: int = 9,
    boxes: int = 1,
    wall_prob: float = 0.08,
    reverse_steps: tuple[int, int] = (10, 60),
) -> tuple[str, int] | None:
    """One random level made by reverse play from a solved state, with its exact T*; ``None`` if it failed.

    The room gets random inner walls, the boxes start on random goals and the player walks backwards for a random
    number of steps, pulling a box along with probability 1/2 whenever it can. Reverse play only reaches
    solvable states, and the oracle then measures the true T* (often shorter than the walk).
    """
    walls = random_room(rng, height, width, wall_prob)
    if walls is None:
        return None
    floor = sorted({(r, c) for r in range(height) for c in range(width)} - walls)
    if len(floor) < boxes + 2:
        return None
    goals = rng.sample(floor, boxes)
    player = rng.choice([p for p in floor if p not in goals])
    state = SokobanState(player, frozenset(goals))
    probe = Sokoban(draw(height, width, walls, goals, state))
    for _ in range(rng.randint(*reverse_steps)):
        options = probe.predecessors(state)
        if not options:
            break
        pulls = [s for s, pulled in options if pulled]
        state = rng.choice(pulls) if pulls and rng.random() < 0.5 else rng.choice([s for s, _ in options])
    env = Sokoban(draw(height, width, walls, goals, state))
    t_star = env.distance(env.start)
    if not t_star:
        return None
    return env.grid(env.start), t_star
