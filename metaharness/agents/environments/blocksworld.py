"""BlocksWorld under a step budget: the second puzzle, with the same oracle interface as Sokoban.

Blocks ``A``, ``B``, ... stand in stacks on a table. An action moves one clear block (nothing on top of it) onto
another clear block or onto the table: ``move B onto A`` or ``move B to table``. Any action that cannot be
carried out leaves the state unchanged but spends a step. The goal is a given arrangement of stacks.

Every move can be undone, so a wrong move is never fatal by itself; under a budget B = T* + slack with slack < 2
it is (undoing it costs two actions), which is what makes an early mistake irrecoverable here. The state space
is small (501 states for 5 blocks, 4051 for 6), so the oracle is one breadth-first search from the goal.

>>> env = BlocksWorld("A B | C", "A B C")
>>> env.distance(env.start), env.is_goal(env.step(env.start, "move C onto B"))
(1, True)
"""

from __future__ import annotations

import random
import re
from collections import deque
from collections.abc import Iterable, Sequence

from metaharness.errors import InputError

# A state: the stacks, each listed bottom to top, in a canonical (sorted) order.
Stacks = tuple[tuple[str, ...], ...]

_MOVE_RE = re.compile(r"\bmove\s+([A-Z])\s+(?:onto|on|to)\s+(?:the\s+)?(table|[A-Z])\b", re.IGNORECASE)

RULES = """BlocksWorld. Blocks named by letters stand in stacks on a table; each stack is listed bottom to top.
A block is clear when nothing is on top of it. One action moves one clear block, either onto another clear block
or onto the table, written exactly as "move X onto Y" or "move X to table".
Moving a block that is not clear, onto a block that is not clear, or a block already on the table to the table,
does nothing but still uses up one action.
The puzzle is solved when the stacks are exactly the goal stacks. You have a limited number of actions."""


def canonical(stacks: Iterable[Sequence[str]]) -> Stacks:
    return tuple(sorted(tuple(s) for s in stacks if s))


def parse_stacks(text: str) -> Stacks:
    """``"A B | C"``: stacks separated by ``|``, blocks bottom to top separated by spaces."""
    stacks = [tuple(part.split()) for part in text.split("|")]
    blocks = [b for s in stacks for b in s]
    if not blocks or any(not re.fullmatch(r"[A-Z]", b) for b in blocks) or len(set(blocks)) != len(blocks):
        raise InputError(f"Bad BlocksWorld stacks {text!r}: use distinct capital letters, e.g. 'A B | C'.")
    return canonical(stacks)


def stacks_text(stacks: Stacks) -> str:
    return " | ".join(" ".join(s) for s in stacks)


class BlocksWorld:
    """One BlocksWorld problem (a ``PuzzleEnv``): start and goal stacks."""

    name = "blocksworld"
    rules = RULES

    def __init__(self, start: str, goal: str):
        self.start = parse_stacks(start)
        self.target = parse_stacks(goal)
        self.blocks = sorted(b for s in self.start for b in s)
        if self.blocks != sorted(b for s in self.target for b in s):
            raise InputError(f"Start {start!r} and goal {goal!r} must hold the same blocks.")
        self.goal = f"the stacks are exactly: {stacks_text(self.target)} (stacks separated by |, bottom to top)"
        self._table: dict[Stacks, int] | None = None

    def actions(self, state: Stacks) -> list[str]:
        return [f"move {x} to table" for x in self.blocks] + [
            f"move {x} onto {y}" for x in self.blocks for y in self.blocks if x != y
        ]

    def moves(self, state: Stacks) -> list[tuple[str, Stacks]]:
        """Every action that changes the state, with the state it leads to."""
        found = []
        for i, stack in enumerate(state):
            block, rest = stack[-1], [s for j, s in enumerate(state) if j != i]
            if len(stack) > 1:
                found.append((f"move {block} to table", canonical([*rest, stack[:-1], (block,)])))
            for k, other in enumerate(rest):
                moved = [s + (block,) if j == k else s for j, s in enumerate(rest)]
                found.append((f"move {block} onto {other[-1]}", canonical([*moved, stack[:-1]])))
        return found

    def step(self, state: Stacks, action: str) -> Stacks:
        match = _MOVE_RE.fullmatch(action.strip())
        if not match:
            return state
        block, target = match.group(1), match.group(2)
        tops = {s[-1]: i for i, s in enumerate(state)}
        if block not in tops or block == target:
            return state
        source = tops[block]
        if target.lower() == "table":
            if len(state[source]) == 1:
                return state
            return canonical([s[:-1] if i == source else s for i, s in enumerate(state)] + [(block,)])
        if target not in tops:
            return state
        dest = tops[target]
        return canonical(s[:-1] if i == source else s + (block,) if i == dest else s for i, s in enumerate(state))

    def is_goal(self, state: Stacks) -> bool:
        return state == self.target

    def distance(self, state: Stacks) -> int | None:
        """Exact minimum number of moves to the goal; moves are reversible, so one search from the goal."""
        if self._table is None:
            table = {self.target: 0}
            queue = deque([self.target])
            while queue:
                current = queue.popleft()
                for _, nxt in self.moves(current):
                    if nxt not in table:
                        table[nxt] = table[current] + 1
                        queue.append(nxt)
            self._table = table
        return self._table.get(canonical(state))

    def heuristic(self, state: Stacks) -> float:
        """Blocks not yet in their final place (a block is placed when it and everything under it sit as in the
        goal): the classic greedy count, blind to the moves needed to clear a block first."""
        placed = {b for s in state for b in _goal_prefix(s, self.target)}
        return float(len(self.blocks) - len(placed))

    def key(self, state: Stacks) -> str:
        return stacks_text(canonical(state))

    def state_of(self, key: str) -> Stacks:
        state = parse_stacks(key)
        if sorted(b for s in state for b in s) != self.blocks:
            raise InputError(f"State {key!r} does not hold the blocks {' '.join(self.blocks)}.")
        return state

    def render(self, state: Stacks) -> str:
        lines = ["stacks (bottom to top):"]
        lines += [f"  {' '.join(s)}" for s in state]
        lines.append("goal stacks (bottom to top):")
        lines += [f"  {' '.join(s)}" for s in self.target]
        lines.append(f"clear blocks: {', '.join(sorted(s[-1] for s in state))}")
        return "\n".join(lines)

    def parse_state(self, text: str) -> Stacks | None:
        """The stacks listed under "stacks (bottom to top):" in ``text`` (or ``text`` itself as ``A B | C``)."""
        lines = (text or "").split("\n")
        if "stacks (bottom to top):" in lines:
            block = []
            for line in lines[lines.index("stacks (bottom to top):") + 1 :]:
                if not line.startswith("  "):
                    break
                block.append(line.strip())
            text = " | ".join(block)
        try:
            return self.state_of(text.strip())
        except InputError:
            return None

    def parse_action(self, text: str) -> str | None:
        """The last ``move X onto Y`` / ``move X to table`` in ``text``, normalised, else ``None``."""
        found = _MOVE_RE.findall(text or "")
        if not found:
            return None
        block, target = found[-1]
        block = block.upper()
        return f"move {block} to table" if target.lower() == "table" else f"move {block} onto {target.upper()}"


def _goal_prefix(stack: tuple[str, ...], goal: Stacks) -> tuple[str, ...]:
    """The longest bottom part of ``stack`` that is also the bottom of some goal stack."""
    best: tuple[str, ...] = ()
    for target in goal:
        n = 0
        while n < min(len(stack), len(target)) and stack[n] == target[n]:
            n += 1
        best = max(best, stack[:n], key=len)
    return best


def random_stacks(rng: random.Random, blocks: list[str]) -> Stacks:
    """A random arrangement: shuffle the blocks, then cut the sequence into stacks at random points."""
    order = blocks[:]
    rng.shuffle(order)
    stacks, current = [], [order[0]]
    for block in order[1:]:
        if rng.random() < 0.4:
            stacks.append(current)
            current = []
        current.append(block)
    stacks.append(current)
    return canonical(stacks)


def generate_problem(rng: random.Random, *, blocks: int = 5) -> tuple[tuple[str, str], int] | None:
    """A random (start, goal) pair with its exact T*; ``None`` when start equals goal."""
    names = [chr(ord("A") + i) for i in range(blocks)]
    start, goal = random_stacks(rng, names), random_stacks(rng, names)
    env = BlocksWorld(stacks_text(start), stacks_text(goal))
    t_star = env.distance(env.start)
    return ((stacks_text(start), stacks_text(goal)), t_star) if t_star else None
