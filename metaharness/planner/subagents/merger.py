"""Stage 3, state merging: equivalent predicted states share a node, turning the plans into a graph.

A false merge invents transitions that do not exist (the solver may then route through them); an equivalent pair
left unmerged only costs some sharing. So merging is conservative: canonical keys decide when both states have
one; identical texts (up to case and spacing) merge; otherwise a model judge is asked, in both orders, and only a
double "same" merges, and only for pairs whose texts are similar enough to be worth asking about.
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING, Protocol, TypedDict, runtime_checkable

from metaharness.models.protocol import ModelClient
from metaharness.planner.subagents.model_stage import ModelStage, StageCall
from metaharness.planner.subagents.stage_io import PlanningTask, PredictedState

if TYPE_CHECKING:
    from typing_extensions import Unpack


class JudgeOptions(TypedDict, total=False):
    """The judge's stage options (its answers are a few tokens long: ``max_tokens`` is the merger's)."""

    attempts: int
    temperature: float


MERGER_SYSTEM = (
    "You are the state merger of a planning system. Two plans predicted the two states below. Decide whether they "
    "are exactly the same state: every detail that matters for what can happen next is equal. If anything differs "
    'or you are unsure, answer false. Reply with JSON only: {"same": true} or {"same": false}.'
)
SCHEMA = {"type": "object", "properties": {"same": {"type": "boolean"}}, "required": ["same"]}


@runtime_checkable
class StateMerger(Protocol):
    """Returns a group per state: ``groups[i]`` is the index of the first state equivalent to ``states[i]``
    (so ``groups[i] <= i`` and representatives map to themselves). ``states[0]`` is the current state."""

    def merge(self, task: PlanningTask, states: list[PredictedState]) -> list[int]: ...


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().strip(".").lower()


class KeyJudgeMerger:
    """Exact-key merge where states have a canonical form, a model judge (optional) otherwise."""

    def __init__(
        self,
        model: ModelClient | None = None,
        *,
        similarity: float = 0.6,
        max_judge_calls: int = 32,
        **options: Unpack[JudgeOptions],
    ) -> None:
        self.judge = ModelStage(model, max_tokens=16, **options) if model is not None else None
        self.similarity = similarity
        self.max_judge_calls = max_judge_calls
        self._judge_calls_left = max_judge_calls  # judge calls left in the current merge

    def merge(self, task: PlanningTask, states: list[PredictedState]) -> list[int]:
        groups: list[int] = []
        representatives: list[int] = []
        self._judge_calls_left = self.max_judge_calls
        for i, state in enumerate(states):
            match = next((r for r in representatives if self._same(states[r], state)), None)
            groups.append(i if match is None else match)
            if match is None:
                representatives.append(i)
        return groups

    def take_calls(self) -> list[StageCall]:
        return self.judge.take_calls() if self.judge else []

    def _same(self, a: PredictedState, b: PredictedState) -> bool:
        if a.key is not None and b.key is not None:
            return a.key == b.key
        left, right = normalise(a.state), normalise(b.state)
        if left == right:
            return True
        if self.judge is None or self._judge_calls_left < 2:
            return False
        if difflib.SequenceMatcher(None, left, right).ratio() < self.similarity:
            return False
        self._judge_calls_left -= 2
        return _judged_same(self.judge, a.state, b.state) and _judged_same(self.judge, b.state, a.state)


def _judged_same(judge: ModelStage, first: str, second: str) -> bool:
    answer = judge.ask(MERGER_SYSTEM, f"State A:\n{first}\n\nState B:\n{second}", SCHEMA)
    return isinstance(answer, dict) and answer.get("same") is True
