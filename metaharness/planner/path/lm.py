"""The ``lm`` baseline the papers compare against: the model reads the graph and names a path.

For experiments only, never the default. The answer is checked like any plan: a valid walk is returned with status
"feasible" (nobody proved it optimal), anything else with status "invalid" and a note saying why.
"""

from __future__ import annotations

import json
import time

from metaharness.errors import InputError
from metaharness.models.protocol import ModelClient
from metaharness.planner.asking import ask_json
from metaharness.planner.path.problem import PathProblem
from metaharness.planner.result import PlanResult

LM_SYSTEM = (
    "You choose a path through a plan graph. A path starts at the start node and follows edges; it must end at the "
    "first goal node it reaches, take at most the horizon number of steps, and its summed edge costs must stay "
    "within the budget in every entry. Among such paths pick one with the largest total reward of the nodes it "
    'enters (step i\'s reward counts discount^(i-1) times). Answer with JSON: {"path": [edge ids in order]}.'
)


def lm_path(problem: PathProblem, model: ModelClient, *, max_tokens: int = 512) -> PlanResult:
    started = time.perf_counter()
    p = problem
    graph = p.graph.to_json()
    graph["budget"] = list(p.budget)
    graph["discount"] = p.discount
    if p.horizon_given:
        graph["horizon"] = p.horizon
    schema = {
        "type": "object",
        "properties": {"path": {"type": "array", "items": {"enum": p.edge_ids}, "minItems": 1}},
        "required": ["path"],
    }
    messages = [{"role": "system", "content": LM_SYSTEM}, {"role": "user", "content": json.dumps(graph)}]
    answer, log = ask_json(model, messages, schema, attempts=1, max_tokens=max_tokens)
    seconds = time.perf_counter() - started
    if answer is None:
        return PlanResult("invalid", "lm", seconds, note=f"the model gave no usable path: {log[-1]['error']}")
    try:
        walk = p.check_walk(answer["path"])
    except InputError as exc:
        return PlanResult("invalid", "lm", seconds, path=list(answer["path"]), note=str(exc))
    return PlanResult.from_walk("feasible", "lm", walk, soft=p.soft is not None, seconds=seconds)
