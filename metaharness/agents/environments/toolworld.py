"""ToolWorld: long tool plans over a 1,000-tool e-commerce library, with exact-match success.

A task is a plan of 10+ natural-language steps. Each step needs one tool; its arguments come from earlier steps'
results (a chain of lookups such as order -> buyer -> cart -> top item, then an attribute such as a price, then
calculators such as tax and currency conversion). Results come from the deterministic
``Simulator``, so the reference answer is exact. Several
trajectories are valid: every step accepts each tool that computes the same function (the canonical tool and its
alias).

The agent sees a short candidate list per step from BM25 retrieval over the library, shown in a seeded random
order so the retrieval rank does not give the answer away.

>>> world = ToolWorld(seed=0)
>>> task = world.generate_tasks(1, seed=0)[0]
>>> len(task.steps) >= 10 and task.verify(task.answer)
True
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from metaharness.agents.environments.toolworld_library import (
    ATTRIBUTES,
    CURRENCIES,
    ENTITIES,
    RELATIONS,
    Simulator,
    ToolSpec,
)
from metaharness.agents.environments.toolworld_retrieval import BM25Index
from metaharness.errors import InputError
from metaharness.json_types import JSONObject, JSONValue
from metaharness.models.protocol import Tool

RELATION_TEMPLATES = (
    "Find the {phrase} (the {source} comes from {ref}).",
    "Look up the {phrase}, for the {source} from {ref}.",
    "Using the {source} from {ref}, get the {phrase}.",
)
ATTRIBUTE_TEMPLATES = (
    "Read the {phrase} (the {source} comes from {ref}).",
    "Using the {source} from {ref}, read the {phrase}.",
)


@dataclass(frozen=True)
class PlanStep:
    """One step: the instruction, the accepted tools (same function), and the reference call and result."""

    text: str
    family: str
    accepted: frozenset[str]
    arguments: JSONObject
    result: JSONValue
    # argument name -> index of the step whose result it takes (-1: the task's input; None: a literal)
    sources: dict[str, int | None]


@dataclass
class ToolTask:
    """A plan to execute in a ``ToolWorld``; implements the executor's ``PlanEnvironment`` protocol."""

    id: str
    goal: str
    start: str
    steps: list[PlanStep]
    world: ToolWorld = field(repr=False)
    candidates_k: int = 8

    @property
    def answer(self) -> JSONValue:
        return self.steps[-1].result

    @property
    def instructions(self) -> list[str]:
        return [step.text for step in self.steps]

    @property
    def constants(self) -> list[tuple[str, JSONValue]]:
        """Values known before any step runs, as (label, value)."""
        return [("task input", self.start)]

    def candidates(self, index: int) -> list[Tool]:
        return [spec.as_tool() for spec in self._candidates[index]]

    @cached_property
    def _candidates(self) -> list[list[ToolSpec]]:
        shown = []
        for i, step in enumerate(self.steps):
            found = self.world.retrieve(step.text, self.candidates_k)
            random.Random(f"{self.id}:{i}").shuffle(found)
            shown.append(found)
        return shown

    def retrieval_recall(self) -> float:
        """Fraction of steps whose candidate list holds at least one accepted tool."""
        hits = [bool(step.accepted & {s.name for s in self._candidates[i]}) for i, step in enumerate(self.steps)]
        return sum(hits) / len(hits)

    def execute(self, index: int, tool: str, arguments: JSONObject) -> JSONValue:
        return self.world.simulator.execute(tool, arguments)

    def verify(self, final: JSONValue) -> bool:
        """Exact match with the reference answer (type and value)."""
        return type(final) is type(self.answer) and final == self.answer

    def tool_match(self, tools: Sequence[str | None]) -> float:
        """Fraction of plan steps executed with an accepted tool (positions align with the plan)."""
        hits = sum(1 for step, tool in zip(self.steps, tools, strict=False) if tool in step.accepted)
        return hits / len(self.steps)

    def describe(self) -> JSONObject:
        return {
            "id": self.id,
            "goal": self.goal,
            "steps": [text for text in self.instructions],
            "answer": self.answer,
            "reference_tools": [[name for name in sorted(s.accepted)] for s in self.steps],
        }


class ToolWorld:
    """The library, its simulator and its retrieval index, plus the seeded task generator."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.simulator = Simulator(seed)
        self.library = self.simulator.library
        self.index = BM25Index([f"{s.name} {s.description}" for s in self.library])
        self.by_function: dict[str, list[str]] = {}
        for spec in self.library:
            self.by_function.setdefault(spec.function, []).append(spec.name)

    def retrieve(self, query: str, k: int) -> list[ToolSpec]:
        return [self.library[i] for i in self.index.top(query, k)]

    def generate_tasks(self, n: int, seed: int = 0, *, min_steps: int = 10, candidates: int = 8) -> list[ToolTask]:
        """``n`` tasks with at least ``min_steps`` steps each; the same (world seed, seed) gives the same tasks."""
        if n < 1 or min_steps < 4 or candidates < 2:
            raise InputError(f"need n >= 1, min_steps >= 4 and candidates >= 2 (got {n}, {min_steps}, {candidates})")
        return [
            self._generate(f"tw{self.seed}-{seed}-{k}", random.Random(f"{self.seed}:{seed}:{k}"), min_steps, candidates)
            for k in range(n)
        ]

    def _generate(self, task_id: str, rng: random.Random, min_steps: int, candidates: int) -> ToolTask:
        builder = _PlanBuilder(self, rng)
        start_type = rng.choice(sorted(ENTITIES))
        start = f"{ENTITIES[start_type]}-{rng.randrange(100000):05d}"
        builder.walk(start_type, start, hops=rng.randint(min_steps - 2, min_steps + 1))
        builder.finish()
        goal = (
            f"Starting from {start_type} {start}, carry out the plan step by step and report the final amount "
            f"in {builder.currency}."
        )
        return ToolTask(task_id, goal, start, builder.steps, self, candidates)


class _PlanBuilder:
    """Builds one task's steps while executing the canonical tools, so every reference result is exact."""

    def __init__(self, world: ToolWorld, rng: random.Random):
        self.world, self.rng = world, rng
        self.steps: list[PlanStep] = []
        self.seen: list[tuple[str, int]] = []  # (entity type, step index or -1) in walk order
        self.currency = rng.choice(sorted(c for c in CURRENCIES if c != "USD"))
        self.start = ""
        self.last: tuple[str, int] = ("", -1)

    def _ref(self, index: int) -> str:
        return "the task" if index < 0 else f"step {index + 1}"

    def _value(self, index: int) -> JSONValue:
        return self.start if index < 0 else self.steps[index].result

    def _add(self, family: str, text: str, sources: dict[str, int | None], literals: JSONObject) -> int:
        names = self.world.by_function[family]
        arguments = {param: self._value(src) for param, src in sources.items() if src is not None} | literals
        result = self.world.simulator.execute(names[0], arguments)
        if isinstance(result, dict):
            raise RuntimeError(f"reference call {names[0]}({arguments}) failed: {result}")
        self.steps.append(PlanStep(text, family, frozenset(names), arguments, result, sources))
        return len(self.steps) - 1

    def walk(self, entity: str, start: str, hops: int) -> None:
        """Follow random relations for ``hops`` steps, then onward until an entity with a USD amount is reached
        (the amount and the conversion that follow bring the plan to at least ``hops + 2`` steps)."""
        self.start = start
        self.seen.append((entity, -1))
        index, previous = -1, None
        amount_types = {a.entity for a in ATTRIBUTES if a.value == "amount"}
        while hops > 0 or entity not in amount_types:
            options = [r for r in RELATIONS if r.entity == entity and r.value != previous] or [
                r for r in RELATIONS if r.entity == entity
            ]
            relation = self.rng.choice(options)
            text = self.rng.choice(RELATION_TEMPLATES).format(
                phrase=relation.phrase, source=entity, ref=self._ref(index)
            )
            index = self._add(relation.family, text, {f"{entity}_id": index}, {})
            previous, entity = entity, relation.value
            self.seen.append((entity, index))
            hops -= 1
        self.last = (entity, index)

    def _attribute(self, entity: str, index: int, kind: str) -> int:
        attribute = self.rng.choice([a for a in ATTRIBUTES if a.entity == entity and a.value == kind])
        text = self.rng.choice(ATTRIBUTE_TEMPLATES).format(phrase=attribute.phrase, source=entity, ref=self._ref(index))
        return self._add(attribute.family, text, {f"{entity}_id": index}, {})

    def _latest(self, kind: str) -> tuple[str, int] | None:
        """The most recently seen entity that has an attribute of ``kind``."""
        owners = {a.entity for a in ATTRIBUTES if a.value == kind}
        found = [(e, i) for e, i in self.seen if e in owners]
        return found[-1] if found else None

    def finish(self) -> None:
        """Read a USD amount, apply a discount and/or a sales tax where the walk met a coupon/campaign or an
        address/warehouse/store (each needs a side step reading the percentage or country), then convert."""
        amount = self._attribute(*self.last, "amount")
        extras = [
            (kind, owner)
            for kind in ("percent", "country")
            if (owner := self._latest(kind)) is not None and self.rng.random() < 0.7
        ]
        for kind, (entity, index) in extras:
            side = self._attribute(entity, index, kind)
            if kind == "percent":
                text = f"Reduce the amount from step {amount + 1} by the discount percentage from step {side + 1}."
                amount = self._add("fn:apply_discount", text, {"amount": amount, "percent": side}, {})
            else:
                text = (
                    f"Add the sales tax of the country from step {side + 1} to the net amount from step {amount + 1}."
                )
                amount = self._add("fn:add_sales_tax", text, {"amount": amount, "country": side}, {})
        text = f"Convert the USD amount from step {amount + 1} into {self.currency} at today's rate."
        self._add("fn:convert_currency", text, {"amount": amount, "currency": None}, {"currency": self.currency})
