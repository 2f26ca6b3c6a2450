"""Growing a program graph with the four TPS stages: TPS in program space, on the same stage protocols as plans.

A program graph (``metaharness.planner.program``) has candidate harnesses as nodes and revisions as edges. One
call of ``grow`` is one round of TPS over it:

1. the sampler returns plans, each a list of revisions (``subplans``) that sets out from ``plan.start``, any node of
   the graph that is not failed or a dead end: evaluated, implemented or itself only predicted (an extension);
2. the simulator predicts, for every revision of a plan in turn, the revised harness's behaviour (``state``, with a
   canonical ``key`` that must include the evaluated ancestor, so only revisions of the same base can merge), its
   score and uncertainty, what implementing it costs (``cost``) and what evaluating it costs (``node_cost``); a
   step's ``data["summary"]``, when given, is the revision's description on its edge (else the subplan text);
3. the merger decides which predicted harnesses behave the same: the graph's predicted nodes come first, so a new
   prediction that behaves like a known one becomes one more revision (in-edge) of that node and its plan stops
   there (a later step was simulated from the merged-away program and would not follow from the survivor);
4. the labeler marks every predicted node again (+1 predicted above the best measured score, -1 dead end).

Plans are cut where they would reach past ``depth`` revisions from the nearest implemented ancestor. The graph
changes in place and lasts: nodes nobody chose stay for later rounds, with their predictions. Every stage's input and
output is returned in ``Growth.stages`` (the same record shape as ``metaharness.planner.tps.RouteResult``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import networkx as nx

from metaharness.planner.graph import NodeId, PlanGraph
from metaharness.planner.program import PREDICTED, add_predicted, add_revision, depth, nodes_with
from metaharness.planner.subagents import (
    DEAD_END,
    GOAL,
    NEUTRAL,
    CandidatePlan,
    PlanningTask,
    PlanSampler,
    PredictedState,
    RewardLabeler,
    SimulatedStep,
    StateMerger,
    StateSimulator,
)
from metaharness.planner.subagents.stage_io import StageRecord, stage_record


@dataclass
class Growth:
    """What one round added: new node ids, steps folded into a known node (step -> node), and the stage records."""

    added: list[NodeId] = field(default_factory=list)
    merged: list[tuple[str, NodeId]] = field(default_factory=list)
    stages: list[StageRecord] = field(default_factory=list)


def grow(
    graph: PlanGraph,
    task: PlanningTask,
    *,
    sampler: PlanSampler,
    simulator: StateSimulator,
    merger: StateMerger,
    labeler: RewardLabeler,
    plans: int,
    depth_limit: int = 3,
    new_id: Callable[[], NodeId],
) -> Growth:
    """Run one round of the four stages over ``graph`` (module docstring); ``new_id`` names each new node."""
    growth = Growth()

    def record(
        name: str,
        stage: object,
        inputs: Mapping[str, object],
        output: Sequence[object],
        *,
        dropped: str | None = None,
        ignored: str | None = None,
    ) -> None:
        growth.stages.append(stage_record(name, stage, inputs, output, dropped=dropped, ignored=ignored))

    sampled = [p for p in list(sampler.sample(task, plans))[:plans] if _can_start(graph, p)]
    record("sample", sampler, {"plans": plans}, [{"start": p.start, "subplans": p.to_json()} for p in sampled])

    simulated: list[tuple[CandidatePlan, list[SimulatedStep]]] = []
    for plan in sampled:
        assert plan.start is not None  # _can_start
        room = max(0, depth_limit - depth(graph, plan.start))
        plan = replace(plan, subplans=plan.subplans[:room])
        if not plan.subplans:
            continue
        steps = list(simulator.simulate(task, plan))
        problem = _step_problem(task, plan, steps)
        record(
            "simulate",
            simulator,
            {"start": plan.start, "plan": plan.to_json()},
            [s.to_json() for s in steps],
            dropped=problem,
        )
        if not problem:
            simulated.append((plan, steps))
    if not simulated:
        return growth

    known = nodes_with(graph, PREDICTED)
    states = [PredictedState(n.state, n.key, n.score) for n in known]
    states += [PredictedState(s.state, s.key, s.score) for _, steps in simulated for s in steps]
    groups = list(merger.merge(task, states))
    if len(groups) != len(states) or any(not 0 <= g <= i for i, g in enumerate(groups)):
        record("merge", merger, {"states": len(states)}, groups, ignored="not first-member indices; nothing merged")
        groups = list(range(len(states)))
    else:
        record("merge", merger, {"states": [s.to_json() for s in states]}, groups)

    node_of: dict[int, NodeId] = {i: n.id for i, n in enumerate(known)}
    index = len(known)
    for plan, steps in simulated:
        at: NodeId = plan.start  # type: ignore[assignment]  # _can_start checked it is a node
        for subplan, step in zip(plan.subplans, steps, strict=False):
            this, index = index, index + 1
            same = groups[this]
            if same != this and same in node_of:
                target = node_of[same]
                growth.merged.append((subplan, target))
                if target != at and not nx.has_path(graph.nx, target, at):
                    summary = str(step.data.get("summary") or subplan)
                    add_revision(graph, at, target, edit_cost=_named(task, step.cost), summary=summary)
                break  # later steps were simulated from the merged-away program
            node = add_predicted(
                graph,
                new_id(),
                at,
                step.score if step.score is not None else 0.0,
                std=step.std,
                cost=_named(task, step.node_cost),
                edit_cost=_named(task, step.cost),
                label=DEAD_END if step.score is None else NEUTRAL,
                summary=str(step.data.get("summary") or subplan),
                data={**step.data, "breaks": step.score is None},
            )
            graph.update_node(node.id, state=step.state, key=step.key)
            node_of[this] = node.id
            growth.added.append(node.id)
            at = node.id

    relabel(graph, task, labeler, record)
    return growth


def relabel(
    graph: PlanGraph, task: PlanningTask, labeler: RewardLabeler, record: Callable[..., None] | None = None
) -> None:
    """Stage 4 over every predicted node: reward, goal and dead-end flags from ``labeler``."""
    nodes = nodes_with(graph, PREDICTED)
    if not nodes:
        return
    states = [PredictedState(n.state, n.key, None if n.data.get("breaks") else n.score) for n in nodes]
    labels = list(labeler.label(task, states))
    if len(labels) != len(nodes) or any(x not in (GOAL, NEUTRAL, DEAD_END) for x in labels):
        labels = [NEUTRAL] * len(nodes)
    if record is not None:
        record("label", labeler, {"nodes": [n.id for n in nodes]}, labels)
    for node, value in zip(nodes, labels, strict=False):
        graph.update_node(node.id, reward=float(value), goal=value == GOAL, dead_end=value == DEAD_END)


def _can_start(graph: PlanGraph, plan: CandidatePlan) -> bool:
    if plan.start is None or plan.start not in graph.nx or not plan.subplans:
        return False
    node = graph.node(plan.start)
    return not node.dead_end and node.status != "failed"


def _step_problem(task: PlanningTask, plan: CandidatePlan, steps: list[SimulatedStep]) -> str | None:
    if len(steps) > len(plan.subplans) or not steps:
        return f"{len(steps)} simulated steps for {len(plan.subplans)} revisions"
    width = len(task.budget)
    for i, step in enumerate(steps):
        for name, vector in (("cost", step.cost), ("node_cost", step.node_cost)):
            if len(vector) != width or any(c < 0 for c in vector):
                return f"step {i + 1} {name} {list(vector)} is not {width} non-negative numbers"
    return None


def _named(task: PlanningTask, vector: tuple[float, ...]) -> dict[str, float]:
    return dict(zip(task.limits, vector, strict=False))
