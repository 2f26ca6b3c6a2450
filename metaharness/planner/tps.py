"""``plan(history, goal, budget)``: the four TPS subagents, the plan graph they build, and the solver's route.

1. the sampler proposes M plans (lists of subplans); 2. the simulator predicts the state and cost after every
subplan; 3. the merger decides which predicted states (and the current state) are the same node; 4. the labeler marks
goals (+1) and dead ends (-1), and every non-goal node without a way out becomes a dead end. The solver then picks
the best walk to a goal within the budget, returned as guidance: the agent keeps its own loop, compares what it
observes with the predicted states and replans when they differ (``metaharness.planner.session.PlanningSession``
does that bookkeeping).

With ``tools`` (the harness's tools: names, descriptions, JSON schemas of the arguments), every subplan is one tool
call: the sampler is ``ToolCallPlanSampler`` unless one is given, a sampled plan
with a call that does not validate against its tool's schema is dropped (the ``sample`` record says why), and each
route step carries its call (``RouteStep.call``, ``{"tool": NAME, "arguments": {...}}``) to execute as it is.

Every stage's input and output (and each model exchange) is recorded in ``RouteResult.stages``;
``replay`` rebuilds the graph and the route from such a record without a model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypedDict

from metaharness.errors import InputError
from metaharness.models.protocol import ModelClient
from metaharness.planner.graph import BUDGET_TOLERANCE, GraphJSON, NodeId, PlanGraph
from metaharness.planner.result import PlanResult, PlanResultJSON
from metaharness.planner.solve import SolverName, solve
from metaharness.planner.subagents import (
    DEAD_END,
    DEFAULT_PLANS,
    GOAL,
    NEUTRAL,
    CandidatePlan,
    KeyJudgeMerger,
    ModelPlanSampler,
    ModelRewardLabeler,
    ModelStateSimulator,
    PlanningTask,
    PlanSampler,
    PredictedState,
    RewardLabeler,
    SimulatedStep,
    StateMerger,
    StateSimulator,
    ToolCallPlanSampler,
    check_call,
)
from metaharness.planner.subagents.model_stage import DEFAULT_MAX_STEPS
from metaharness.planner.subagents.simulator import STEP_LIMIT
from metaharness.planner.subagents.stage_io import StageRecord, TaskJSON, stage_record
from metaharness.planner.subagents.tool_calls import ToolCallJSON, parse_call


@dataclass(frozen=True)
class RouteStep:
    """One step of the route: the subplan to carry out, the state it should lead to (its text and canonical key,
    when the simulator gave one), and its predicted cost by limit name (the budget's names); in a tool plan also the
    tool call, ``{"tool": NAME, "arguments": {...}}``, validated against the tool's schema."""

    action: str
    expected_state: str
    cost: dict[str, float]
    edge: NodeId
    node: NodeId
    key: str | None = None
    call: ToolCallJSON | None = None

    def to_json(self) -> RouteStepJSON:
        call = (
            None if self.call is None else ToolCallJSON(tool=self.call["tool"], arguments=dict(self.call["arguments"]))
        )
        return RouteStepJSON(
            action=self.action,
            expected_state=self.expected_state,
            cost=dict(self.cost),
            edge=self.edge,
            node=self.node,
            key=self.key,
            call=call,
        )


class RouteStepJSON(TypedDict):
    action: str
    expected_state: str
    cost: dict[str, float]
    edge: NodeId
    node: NodeId
    key: str | None
    call: ToolCallJSON | None


class RouteRecord(TypedDict):
    """The planning record (``RouteResult.to_json``; ``replay`` rebuilds a result from it)."""

    status: Literal["route", "no_route"]
    reason: str
    task: TaskJSON
    route: list[RouteStepJSON]
    cost: dict[str, float]
    guidance: str
    graph: GraphJSON | None
    solution: PlanResultJSON | None
    stages: list[StageRecord]


@dataclass
class RouteResult:
    """``status`` is "route" (follow ``route``) or "no_route" (``reason`` says why)."""

    status: Literal["route", "no_route"]
    task: PlanningTask
    route: list[RouteStep] = field(default_factory=list)
    graph: PlanGraph | None = None
    solution: PlanResult | None = None
    stages: list[StageRecord] = field(default_factory=list)
    reason: str = ""

    @property
    def cost(self) -> dict[str, float]:
        """The route's predicted cost by limit name, as the budget was given."""
        return {name: sum(step.cost[name] for step in self.route) for name in self.task.limits}

    def guidance(self) -> str:
        """The route as text an agent can follow (or the reason there is none)."""
        if self.status != "route":
            return f"No feasible route: {self.reason}"
        spend = ", ".join(
            f"{n} {self.cost[n]:g} of {b:g}" for n, b in zip(self.task.limits, self.task.budget, strict=True)
        )
        lines = [f"Suggested route ({len(self.route)} steps{'; cost ' + spend if spend else ''}):"]
        for i, step in enumerate(self.route, 1):
            lines.append(f"{i}. {step.action}\n   expected state: {step.expected_state}")
        lines.append("This is guidance: compare each expected state with what you observe and replan if they differ.")
        return "\n".join(lines)

    def to_json(self) -> RouteRecord:
        return {
            "status": self.status,
            "reason": self.reason,
            "task": self.task.to_json(),
            "route": [s.to_json() for s in self.route],
            "cost": self.cost,
            "guidance": self.guidance(),
            "graph": self.graph.to_json() if self.graph else None,
            "solution": self.solution.to_json() if self.solution else None,
            "stages": self.stages,
        }


def plan(
    history: str | Sequence[str],
    goal: str,
    budget: Mapping[str, float],
    *,
    model: ModelClient | None = None,
    plans: int = DEFAULT_PLANS,
    horizon: int | None = None,
    sampler: PlanSampler | None = None,
    simulator: StateSimulator | None = None,
    merger: StateMerger | None = None,
    labeler: RewardLabeler | None = None,
    solver: SolverName = "exact",
    start_key: str | None = None,
    max_tokens: int = 512,
    tools: Sequence[object] | None = None,
) -> RouteResult:
    """Run the four TPS stages and the solver; see the module docstring.

    ``model`` serves every stage not given explicitly (the same model for all, as in TPS). ``start_key`` is the
    canonical form of the current state when the domain has one. ``horizon`` defaults to the number of nodes (enough
    for any simple path; with rewards <= 0 before the goal an optimal plan never repeats a node). ``tools`` makes it
    a tool plan (module docstring).
    """
    if plans < 1:
        raise InputError(f"plans (the number of candidate plans to sample) must be >= 1; got {plans}.")
    if horizon is not None and (isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1):
        raise InputError(f"horizon (the most steps a route may take) must be an integer >= 1; got {horizon!r}.")
    task = PlanningTask.create(history, goal, budget, tools)
    if model is not None:
        default_sampler = ToolCallPlanSampler if task.tools else ModelPlanSampler
        sampler = sampler or default_sampler(model, max_tokens=max_tokens, max_steps=_longest_plan(task))
        simulator = simulator or ModelStateSimulator(model, max_tokens=max_tokens)
        labeler = labeler or ModelRewardLabeler(model, max_tokens=max_tokens)
    elif sampler is None or simulator is None or labeler is None:
        raise InputError(
            "plan() needs model= (e.g. connect('local:smollm2-135m')) or all of sampler, simulator and labeler."
        )
    merger = merger or KeyJudgeMerger(model)
    stages: list[StageRecord] = []

    sampled = list(sampler.sample(task, plans))[:plans]
    valid, dropped = _valid_plans(task, sampled)
    stages.append(stage_record("sample", sampler, {"plans": plans}, [p.to_json() for p in sampled], dropped=dropped))
    if not valid:
        reason = "the plan sampler produced no plan" + (" whose tool calls all validate" if dropped else "")
        return RouteResult("no_route", task, stages=stages, reason=reason + ".")

    simulated: list[tuple[CandidatePlan, list[SimulatedStep]]] = []
    for candidate in valid:
        steps = list(simulator.simulate(task, candidate))
        problem = _simulation_problem(task, candidate, steps)
        stages.append(
            stage_record(
                "simulate", simulator, {"plan": candidate.to_json()}, [s.to_json() for s in steps], dropped=problem
            )
        )
        if not problem:
            simulated.append((candidate, steps))
    if not simulated:
        return RouteResult("no_route", task, stages=stages, reason="no plan could be simulated.")

    states = [PredictedState(task.current_state, start_key)]
    states += [PredictedState(s.state, s.key) for _, steps in simulated for s in steps]
    groups = list(merger.merge(task, states))
    problem = _grouping_problem(groups, len(states))
    stages.append(stage_record("merge", merger, {"states": [s.to_json() for s in states]}, groups, ignored=problem))
    if problem:
        groups = list(range(len(states)))  # unmerged states are always safe

    graph, node_of = _build_graph(task, simulated, states, groups, horizon)
    representatives = sorted(set(groups))
    labels = list(labeler.label(task, [states[r] for r in representatives]))
    problem = (
        None
        if len(labels) == len(representatives) and all(x in (GOAL, NEUTRAL, DEAD_END) for x in labels)
        else f"expected {len(representatives)} labels in {{1, 0, -1}}, got {labels!r}; all set to 0"
    )
    inputs = {"states": [states[r].to_json() for r in representatives]}
    stages.append(stage_record("label", labeler, inputs, labels, ignored=problem))
    if problem:
        labels = [NEUTRAL] * len(representatives)
    _apply_labels(graph, [node_of[r] for r in representatives], labels)

    solution = solve(graph, solver=solver, model=model)
    if not solution.has_plan:
        reason = (
            "no predicted state satisfies the goal"
            if not graph.goals()
            else "no sampled route reaches the goal within the remaining budget"
        )
        if solution.reason or solution.note:
            reason += f" ({solution.reason or solution.note})"
        return RouteResult("no_route", task, graph=graph, solution=solution, stages=stages, reason=reason + ".")
    route = []
    for edge_id in solution.path:
        edge = graph.edge(edge_id)
        target = graph.node(edge.target)
        call = parse_call(edge.action) if task.tools else None
        cost = dict(zip(task.limits, edge.cost, strict=True))
        route.append(RouteStep(edge.action, target.state, cost, edge.id, edge.target, target.key, call))
    return RouteResult("route", task, route, graph, solution, stages)


def _longest_plan(task: PlanningTask) -> int:
    """The most steps the model sampler may propose: 8, or fewer when a ``steps`` budget allows fewer (each step
    costs exactly 1 there, so a longer plan could never be followed)."""
    budget = dict(zip(task.limits, task.budget, strict=True))
    steps = budget.get(STEP_LIMIT)
    return DEFAULT_MAX_STEPS if steps is None else max(1, min(DEFAULT_MAX_STEPS, math.floor(steps + BUDGET_TOLERANCE)))


def _valid_plans(task: PlanningTask, sampled: list[CandidatePlan]) -> tuple[list[CandidatePlan], list[str]]:
    """The sampled plans to simulate, and why the others were dropped (tool plans: every call must validate)."""
    if not task.tools:
        return sampled, []
    plans, dropped = [], []
    for i, candidate in enumerate(sampled, 1):
        problem = next(filter(None, (check_call(s, task.tools) for s in candidate.subplans)), None)
        if problem:
            dropped.append(f"plan {i}: {problem}")
        else:
            plans.append(candidate)
    return plans, dropped


def replay(record: Mapping[str, Any], *, solver: SolverName = "exact", horizon: int | None = None) -> RouteResult:
    """Rebuild a ``RouteResult.to_json`` record's graph and route from its recorded stage outputs."""
    task = record["task"]
    by_stage: dict[str, list[dict[str, Any]]] = {}
    for entry in record["stages"]:
        by_stage.setdefault(entry["stage"], []).append(entry)
    sample = by_stage["sample"][0]
    return plan(
        task["history"],
        task["goal"],
        task["budget"],
        tools=task.get("tools"),
        plans=sample["input"].get("plans", sample["input"].get("m")),  # "m" in records before the rename
        horizon=horizon,
        solver=solver,
        start_key=by_stage["merge"][0]["input"]["states"][0]["key"] if "merge" in by_stage else None,
        sampler=_Recorded(lambda *_: [CandidatePlan(tuple(p)) for p in sample["output"]]),
        simulator=_Recorded(_lookup({tuple(e["input"]["plan"]): e["output"] for e in by_stage.get("simulate", [])})),
        merger=_Recorded(lambda *_: by_stage["merge"][0]["output"]),
        labeler=_Recorded(lambda *_: by_stage["label"][0]["output"]),
    )


class _Recorded:
    """A stage that answers from a record (every protocol method name maps to the same function)."""

    def __init__(self, answer: Callable[..., Any]) -> None:
        self.sample = self.simulate = self.merge = self.label = answer


def _lookup(outputs: dict[tuple[str, ...], list[dict[str, Any]]]) -> Callable[..., list[SimulatedStep]]:
    return lambda _task, candidate: [SimulatedStep.from_json(s) for s in outputs.get(candidate.subplans, [])]


def _simulation_problem(task: PlanningTask, candidate: CandidatePlan, steps: list[SimulatedStep]) -> str | None:
    if len(steps) != len(candidate.subplans):
        return f"{len(steps)} simulated steps for {len(candidate.subplans)} subplans"
    for i, step in enumerate(steps):
        if len(step.cost) != len(task.budget) or any(not 0 <= c < math.inf for c in step.cost):
            return f"step {i + 1} cost {list(step.cost)} is not {len(task.budget)} finite non-negative numbers"
    return None


def _grouping_problem(groups: list[int], count: int) -> str | None:
    if len(groups) != count or any(not 0 <= g <= i or groups[g] != g for i, g in enumerate(groups)):
        return f"merge groups {groups!r} are not first-member indices for {count} states; no states merged"
    return None


def _build_graph(
    task: PlanningTask,
    simulated: list[tuple[CandidatePlan, list[SimulatedStep]]],
    states: list[PredictedState],
    groups: list[int],
    horizon: int | None,
) -> tuple[PlanGraph, dict[int, str]]:
    graph = PlanGraph("s0", task.budget, limits=task.limits)
    node_of: dict[int, str] = {}
    for r in sorted(set(groups)):
        node_of[r] = f"s{len(node_of)}"
        graph.add_node(node_of[r], state=states[r].state, key=states[r].key)
    seen = set()
    index = 1  # states[0] is the current state; simulated steps follow in plan order
    for p, (candidate, steps) in enumerate(simulated, 1):
        at = node_of[groups[0]]
        for s, (subplan, step) in enumerate(zip(candidate.subplans, steps, strict=False), 1):
            target = node_of[groups[index]]
            index += 1
            signature = (at, target, subplan, step.cost)
            if signature not in seen:
                seen.add(signature)
                graph.add_edge(f"p{p}.{s}", at, target, subplan, step.cost)
            at = target
    graph.horizon = horizon if horizon is not None else max(1, graph.nx.number_of_nodes())
    return graph, node_of


def _apply_labels(graph: PlanGraph, node_ids: list[str], labels: list[int]) -> None:
    for node_id, label in zip(node_ids, labels, strict=False):
        node = graph.node(node_id)
        goal = label == GOAL
        dead_end = label == DEAD_END or (not goal and graph.nx.out_degree(node_id) == 0)
        reward = GOAL if goal else DEAD_END if dead_end else NEUTRAL
        graph.replace_node(replace(node, reward=float(reward), goal=goal, dead_end=dead_end))
