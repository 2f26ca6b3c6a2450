"""Stage 4, reward prediction: +1 when a state satisfies the goal, -1 for a dead end, 0 otherwise."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from metaharness.json_types import JSONObject, JSONValue
from metaharness.planner.asking import members, numbers
from metaharness.planner.subagents.model_stage import ModelStage
from metaharness.planner.subagents.stage_io import PlanningTask, PredictedState

GOAL, NEUTRAL, DEAD_END = 1, 0, -1

LABELER_SYSTEM = (
    "You are the reward labeler of a planning system. For each numbered state below, give +1 if the state satisfies "
    "the goal, -1 if it is a dead end (the goal can no longer be reached from it, or it breaks a rule), and 0 "
    'otherwise. Reply with JSON only: {"labels": [one number per state, in order]}.'
)


@runtime_checkable
class RewardLabeler(Protocol):
    """Returns one label in {+1, 0, -1} per state, in order (the planner adds the structural rule that a non-goal
    node with no way out is a dead end)."""

    def label(self, task: PlanningTask, states: list[PredictedState]) -> list[int]: ...


def labeler_schema(count: int) -> JSONObject:
    labels: JSONObject = {
        "type": "array",
        "minItems": count,
        "maxItems": count,
        "items": {"enum": [GOAL, NEUTRAL, DEAD_END]},
    }
    return {"type": "object", "properties": {"labels": labels}, "required": ["labels"]}


class ModelRewardLabeler(ModelStage):
    """Labels all states in one call; states it fails to label count as 0 (neither goal nor dead end)."""

    def label(self, task: PlanningTask, states: list[PredictedState]) -> list[int]:
        listing = "\n".join(f"{i + 1}. {s.state}" for i, s in enumerate(states))

        def check(answer: JSONValue) -> str | None:
            got = len(members(answer, "labels"))
            return None if got == len(states) else f"give exactly {len(states)} labels, one per state (got {got})"

        answer = self.ask(
            LABELER_SYSTEM, f"{task.describe()}\n\nStates:\n{listing}", labeler_schema(len(states)), check=check
        )
        return [int(x) for x in numbers(members(answer, "labels"))] if answer else [NEUTRAL] * len(states)


class ScoreLabeler:
    """The program-graph labeler: +1 when a revised harness is predicted to score above ``best`` (the best measured
    score), -1 when it is predicted to break (``score`` None), 0 otherwise. No model call: the simulator's predicted
    score already says what a label would."""

    def __init__(self, best: float) -> None:
        self.best = best

    def label(self, task: PlanningTask, states: list[PredictedState]) -> list[int]:
        return [DEAD_END if s.score is None else GOAL if s.score > self.best else NEUTRAL for s in states]
