"""The TPS planner core: plan graph, subagents, solvers and the planning tool.

Independent of tasks, proposers and git; any agent harness can use it.

Plan graph (``metaharness.planner.graph``)
    ``PlanGraph(start, budget, ...)`` (keywords ``horizon``, ``discount``, ``limits``) on a networkx
    ``MultiDiGraph`` (``graph.nx``); ``add_node(id, reward, ...)`` (``goal``, ``dead_end``, ``state``, ``key``),
    ``add_edge(id, source, target, action, cost)``; ``PlanGraph.from_json(dict)`` / ``to_json()`` /
    ``PlanGraph.load(path)`` in the JSON format of ``docs/plan-graph.md``; ``validate()`` raises
    ``metaharness.errors.InputError`` naming the problem.

Solvers (``metaharness.planner.solve``)
    ``solve(graph, budget, ...)`` returns a ``PlanResult`` (``solver`` one of ``exact`` (the default), ``ilp``,
    ``lm``, ``auto``; the further keywords ``horizon``, ``discount``, ``model``, ``soft_targets``, ``time_limit``;
    ``budget`` by limit name or in the graph's order) with
    ``status`` ("optimal"/"infeasible"; the lm baseline says "feasible"/"invalid"), ``path`` (edge ids), ``nodes``
    (v0..vk), ``value``, ``cost`` (by limit name, as every planner result gives costs), ``solver``, ``seconds``;
    ``PlanResult.to_json()`` is the output object of ``docs/plan-graph.md`` (costs as lists in the graph's order).
    The two halves have one layout, one module per part: ``metaharness.planner.path`` (``problem``,
    ``exact``: label-setting DP with Pareto sets, the default, ``ilp``: time-expanded ILP in SCIP, also soft targets,
    ``lm``: the model picks a path, experiments only; with ``bounds`` and ``infeasible``) and
    ``metaharness.planner.selection`` (``select``; ``problem``, ``exact``, ``ilp``, ``baselines``).
    ``SoftTargets(target, weight)`` (``path.problem``) keeps the hard budget and subtracts ``weight * excess`` over a
    preferred cost level.

Program graphs and selection (``metaharness.planner.program``, ``metaharness.planner.selection``)
    A program graph is a ``PlanGraph`` with ``problem="selection"``: candidate harnesses (status evaluated,
    implemented, predicted or failed; ``score``, ``std``, evaluation ``cost``) and revisions (implementation
    ``cost``); ``program_graph``, ``add_evaluated``, ``add_predicted``, ``add_revision``, ``chain``, ``depth``,
    ``mark``, ``incumbent``, ``nodes_with``, ``cost_vector``, ``LIMITS`` build and read it.
    ``select(graph, budget, ...)`` returns a ``PlanResult`` (``solver`` one of ``auto`` (the default), ``exact``,
    ``ilp``, ``greedy``, ``random``, ``best_of_n``; the further keywords ``scenarios=64``, ``correlation=0.5``,
    ``seed=0``, ``time_limit=None``) chooses what to implement and evaluate (``evaluate``, ``nodes``, ``path``,
    ``value`` = expected best score); ``solve`` dispatches program graphs to it.

Subagents (``metaharness.planner.subagents``)
    One protocol per TPS stage, each callable alone and replaceable (e.g. by an oracle that uses the true
    environment): ``PlanSampler.sample(task, plans)``, ``StateSimulator.simulate(task, plan)``,
    ``StateMerger.merge(task, states)``, ``RewardLabeler.label(task, states)``; model-backed implementations
    ``ModelPlanSampler``, ``ModelStateSimulator``, ``KeyJudgeMerger``, ``ModelRewardLabeler``.

Planning call (``metaharness.planner.tps``)
    ``plan(history, goal, budget, ...)`` returns a ``RouteResult`` (keywords ``model``, ``plans=4``, ``horizon``,
    ``sampler``, ``simulator``, ``merger``, ``labeler``, ``solver="exact"``, ``start_key``, ``max_tokens=512``,
    ``tools``) with ``status`` ("route"/"no_route"), ``route`` (steps: ``action``, ``expected_state`` and ``key``,
    ``cost`` by limit name, and ``call`` in a tool plan), ``cost`` (the route's, by limit name), ``graph``,
    ``solution``, ``stages`` (every stage's input, output and model exchanges; JSON) and ``guidance()``;
    ``replay(record)`` rebuilds it. With ``tools`` (the harness's tools: names, descriptions,
    JSON schemas; ``ToolSpec``) every step is a tool call ``{"tool", "arguments"}`` validated with
    jsonschema.

Session (``metaharness.planner.session``)
    ``PlanningSession(goal, budget, ...)`` (keywords as ``plan``'s) for an agent loop: ``plan(history)``
    returns the route (``session.step`` is the next step); ``observe(state, spent)`` checks the observed state and
    the step's cost against the prediction and answers an ``Observation`` ("continue", "done", or
    "replanned" with the new route); ``aplan`` / ``aobserve`` for asyncio servers.

Tools (``metaharness.planner.tool``)
    ``plan`` (history, goal, remaining budget; per call also ``plans``, ``horizon``, ``solver``, ``tools``) and
    ``solve`` (a plan graph): ``openai_tool(name)``, ``anthropic_tool(name)``, ``openai_tools()``,
    ``anthropic_tools()``, ``PLAN_TOOL`` / ``SOLVE_TOOL`` (metaharness ``Tool``), ``call_plan_tool``,
    ``call_solve_tool``, ``call_tool(name, arguments, *, model, **options)`` and ``build_mcp_server(model)``;
    ``metaharness plan serve --model SPEC`` serves both over stdio, ``metaharness plan solve FILE.json`` solves a
    plan graph file.

The contracts: ``docs/plan-graph.md`` (graphs and results) and ``docs/planning-session.md`` (session, tool plans,
tools). The planner needs no C build: ``pip install metaharness``; only ``local:`` models need
``metaharness[local]``.
"""

from __future__ import annotations

# Exported eagerly: a lazy module ``__getattr__`` loses to a submodule of the same name once anything has imported
# that submodule (``metaharness.planner.solve`` the module would shadow ``solve`` the function).
from metaharness.planner.graph import Edge, Node, PlanGraph
from metaharness.planner.path.problem import SoftTargets
from metaharness.planner.program import (
    LIMITS,
    add_evaluated,
    add_predicted,
    add_revision,
    chain,
    cost_vector,
    depth,
    incumbent,
    mark,
    nodes_with,
    program_graph,
)
from metaharness.planner.result import PlanResult
from metaharness.planner.selection import SELECTION_SOLVERS, select
from metaharness.planner.session import Observation, PlanningSession
from metaharness.planner.solve import SOLVERS, solve
from metaharness.planner.subagents import ToolSpec
from metaharness.planner.tps import RouteResult, RouteStep, plan, replay

__all__ = [
    "LIMITS",
    "SELECTION_SOLVERS",
    "SOLVERS",
    "Edge",
    "Node",
    "Observation",
    "PlanGraph",
    "PlanResult",
    "PlanningSession",
    "RouteResult",
    "RouteStep",
    "SoftTargets",
    "ToolSpec",
    "add_evaluated",
    "add_predicted",
    "add_revision",
    "chain",
    "cost_vector",
    "depth",
    "incumbent",
    "mark",
    "nodes_with",
    "plan",
    "program_graph",
    "replay",
    "select",
    "solve",
]
