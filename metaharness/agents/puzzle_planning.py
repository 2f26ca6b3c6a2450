"""TPS planning for puzzle agents: the four planner stages wired to a puzzle environment.

Two set-ups, chosen per run:

- *model subagents* (the seeds' setting): the model samples plans (restricted to the environment's action
  vocabulary by a JSON-schema enum), predicts the states, and labels them; predicted states that parse as a state
  of the level get its canonical key, so equal predictions merge exactly.
- *oracle subagents*: simulation and reward labelling use the true environment (exact next states with canonical
  keys, +1 solved / -1 unsolvable / 0 otherwise), which isolates what sampling, the solver and execution
  contribute. Sampling stays with the model, or, with no model at all, with ``NoisyOracleSampler``, a
  model-free stand-in for an imperfect sampler (each action optimal with probability 1 - epsilon, else random).

``PuzzlePlanner`` makes one planning call from an agent's loop: history, goal, remaining step budget in;
``RouteResult`` (route steps with action, predicted state, cost) out.
``RouteFollower`` is how the planning agents (TPS guidance, TAPE execution) use it, through a
``PlanningSession``: follow the route while the observed states are the predicted
ones, plan again when one is not or the route is used up.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable
from typing import Any

from metaharness.agents.environments.puzzle import PuzzleEnv, optimal_actions
from metaharness.agents.puzzle_episode import Decision
from metaharness.models.protocol import ModelClient
from metaharness.planner.session import PlanningSession
from metaharness.planner.solve import SolverName
from metaharness.planner.subagents import (
    DEAD_END,
    GOAL,
    NEUTRAL,
    CandidatePlan,
    KeyJudgeMerger,
    ModelRewardLabeler,
    ModelStateSimulator,
    PlanningTask,
    PredictedState,
    RewardLabeler,
    SimulatedStep,
    StateSimulator,
)
from metaharness.planner.subagents.model_stage import ModelStage
from metaharness.planner.tps import RouteResult, RouteStep, plan

SAMPLER_SYSTEM = (
    "You are the plan sampler of a planning system for this puzzle.\n{rules}\n\nPropose {plans} different plans that "
    "solve the puzzle from the current state within the remaining budget. Each plan is the list of actions to "
    "execute, in order. Make the plans genuinely different. Reply with JSON only: "
    '{{"plans": [{{"actions": [...]}}, ...]}}.'
)


class ActionPlanSampler(ModelStage):
    """Stage 1 by the model, constrained to the environment's actions (one call for all the plans, as TAPE)."""

    def __init__(self, model: ModelClient, env: PuzzleEnv, *, max_steps: int = 16, **options: Any) -> None:
        super().__init__(model, **options)
        self.env = env
        self.max_steps = max_steps
        self.state = env.start

    def sample(self, task: PlanningTask, plans: int) -> list[CandidatePlan]:
        steps = max(1, min(self.max_steps, int(task.budget[0]) if task.budget else self.max_steps))
        actions = {"type": "array", "minItems": 1, "maxItems": steps, "items": {"enum": self.env.actions(self.state)}}
        schema = {
            "type": "object",
            "required": ["plans"],
            "properties": {
                "plans": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": plans,
                    "items": {"type": "object", "properties": {"actions": actions}, "required": ["actions"]},
                }
            },
        }
        answer = self.ask(SAMPLER_SYSTEM.format(rules=self.env.rules, plans=plans), task.describe(), schema)
        found: list[CandidatePlan] = []
        for item in (answer or {}).get("plans", [])[:plans]:
            candidate = CandidatePlan(tuple(item["actions"][:steps]))
            if candidate.subplans and candidate not in found:
                found.append(candidate)
        return found


class NoisyOracleSampler:
    """Stage 1 without a model: ``plans`` plans that take an optimal action with probability ``1 - epsilon`` and a
    uniformly random one otherwise, until the goal or the budget. ``epsilon=1`` is a purely random sampler."""

    def __init__(self, env: PuzzleEnv, *, epsilon: float = 0.3, seed: int = 0, max_steps: int = 64) -> None:
        self.env = env
        self.epsilon = epsilon
        self.rng = random.Random(seed)
        self.max_steps = max_steps
        self.state = env.start

    def sample(self, task: PlanningTask, plans: int) -> list[CandidatePlan]:
        steps = min(self.max_steps, int(task.budget[0]))
        found: list[CandidatePlan] = []
        for _ in range(plans):
            state = self.state
            actions: list[str] = []
            while len(actions) < steps and not self.env.is_goal(state):
                best = optimal_actions(self.env, state)
                pool = best if best and self.rng.random() >= self.epsilon else self.env.actions(state)
                actions.append(self.rng.choice(pool))
                state = self.env.step(state, actions[-1])
            candidate = CandidatePlan(tuple(actions))
            if actions and candidate not in found:
                found.append(candidate)
        return found


class OracleSimulator:
    """Stage 2 by the true environment: exact next states with canonical keys, one step of cost per action."""

    def __init__(self, env: PuzzleEnv, *, describe: str = "render") -> None:
        self.env = env
        self.state = env.start
        self.describe = env.render if describe == "render" else env.key

    def simulate(self, task: PlanningTask, candidate: CandidatePlan) -> list[SimulatedStep]:
        state, steps = self.state, []
        for action in candidate.subplans:
            state = self.env.step(state, action)
            steps.append(SimulatedStep(self.describe(state), (1.0,), self.env.key(state)))
        return steps


class OracleLabeler:
    """Stage 4 by the oracle: +1 solved, -1 when no solution exists from the state, 0 otherwise."""

    def __init__(self, env: PuzzleEnv) -> None:
        self.env = env

    def label(self, task: PlanningTask, states: list[PredictedState]) -> list[int]:
        labels = []
        for predicted in states:
            if predicted.key is None:
                raise ValueError(f"the oracle labels states by canonical key; {predicted.state!r} has none")
            state = self.env.state_of(predicted.key)
            labels.append(
                GOAL if self.env.is_goal(state) else DEAD_END if self.env.distance(state) is None else NEUTRAL
            )
        return labels


def _state_key(env: PuzzleEnv) -> Callable[[str], str | None]:
    def key(text: str) -> str | None:
        state = env.parse_state(text)
        return None if state is None else env.key(state)

    return key


class PuzzlePlanner:
    """One TPS planning call per ``plan``, with model or oracle stages (see the module docstring)."""

    def __init__(
        self,
        env: PuzzleEnv,
        *,
        model: ModelClient | None = None,
        oracle: bool = False,
        m: int = 4,
        epsilon: float = 0.3,
        seed: int = 0,
        solver: SolverName = "exact",
        describe: str = "render",
        max_tokens: int = 300,
        temperature: float = 0.0,
    ) -> None:
        self.env, self.model, self.m, self.solver = env, model, m, solver
        self.simulator: StateSimulator
        self.labeler: RewardLabeler
        if oracle:
            self.simulator = OracleSimulator(env, describe=describe)
            self.merger = KeyJudgeMerger()
            self.labeler = OracleLabeler(env)
        elif model is not None:
            self.simulator = ModelStateSimulator(model, canonical_key=_state_key(env), max_tokens=max_tokens)
            self.merger = KeyJudgeMerger(model)
            self.labeler = ModelRewardLabeler(model, max_tokens=max_tokens)
        else:
            raise ValueError("a planner without a model needs oracle stages")
        # ``temperature`` applies to plan sampling only: at 0 a small model tends to give one plan however many are
        # asked.
        self.sampler = (
            ActionPlanSampler(model, env, max_tokens=max_tokens, temperature=temperature)
            if model is not None
            else NoisyOracleSampler(env, epsilon=epsilon, seed=seed)
        )

    def at(self, state: Hashable) -> None:
        """Point the stages that read the true state (legal actions, oracle simulation) at ``state``."""
        self.sampler.state = state
        if isinstance(self.simulator, OracleSimulator):
            self.simulator.state = state

    def session(self, budget: int) -> PlanningSession:
        """A planning session over an episode with ``budget`` steps, with these stages (call ``at`` with the
        current state before each of its calls)."""
        return PlanningSession(
            self.env.goal,
            {"steps": budget},
            model=self.model,
            plans=self.m,
            horizon=lambda left: max(1, int(left["steps"])),
            sampler=self.sampler,
            simulator=self.simulator,
            merger=self.merger,
            labeler=self.labeler,
            solver=self.solver,
        )

    def plan(self, state: Hashable, remaining: int, history: list[str]) -> RouteResult:
        """One planning call from ``state`` with ``remaining`` steps; ``history`` lists what happened (oldest
        first)."""
        self.at(state)
        return plan(
            [*history, self.env.render(state)],
            self.env.goal,
            {"steps": remaining},
            model=self.model,
            plans=self.m,
            horizon=max(1, remaining),
            sampler=self.sampler,
            simulator=self.simulator,
            merger=self.merger,
            labeler=self.labeler,
            solver=self.solver,
            start_key=self.env.key(state),
        )


def fallback_action(result: RouteResult) -> str | None:
    """With no route to the goal: the first sampled action that does not enter a predicted dead end, if any."""
    graph = result.graph
    if graph is None:
        return None
    for edge in graph.out_edges(graph.start):
        if not graph.node(edge.target).dead_end and edge.action:
            return edge.action
    return None


def planning_record(result: RouteResult) -> dict[str, Any]:
    """What a step trace keeps of one planning call (sampled plans, labels, route; not the prompts)."""
    sampled: list[Any] = next((s["output"] for s in result.stages if s["stage"] == "sample"), [])
    labels: list[Any] = next((s["output"] for s in result.stages if s["stage"] == "label"), [])
    graph = result.graph
    return {
        "stage": "plan",
        "status": result.status,
        "reason": result.reason,
        "sampled": sampled,
        "labels": labels,
        "route": [s.action for s in result.route],
        "graph": {"nodes": graph.nx.number_of_nodes(), "edges": len(graph.edges)} if graph else None,
    }


def history_lines(taken: list[str | None]) -> list[str]:
    """The planning call's history: the actions taken so far (an unreadable one as "(none)")."""
    return [f"actions taken so far: {', '.join(a or '(none)' for a in taken)}"] if taken else []


class RouteFollower:
    """An agent's ``PlanningSession`` over one episode: every turn after the first
    reports the step just taken (one step of budget, the observed state with its canonical key), so the session
    keeps the route while each observed state is the predicted one and replans when one is not, when the route is
    done, or when there was no route."""

    def __init__(self, planner: PuzzlePlanner, budget: int) -> None:
        self.planner = planner
        self.session = planner.session(budget)

    @property
    def route(self) -> list[RouteStep]:
        """The route's steps not yet confirmed; the first is the one handed out last."""
        return self.session.route

    def next_step(
        self, state: Hashable, remaining: int, taken: list[str | None], decision: Decision
    ) -> RouteStep | RouteResult:
        """The route's step from ``state`` (its predicted key goes on ``decision``), or, when a new planning call
        found no route, that call's result. Planning calls are recorded on ``decision``."""
        env, session = self.planner.env, self.session
        self.planner.at(state)
        history = [*history_lines(taken), env.render(state)]
        key = env.key(state)
        result: RouteResult | None = None
        if session.result is None:
            result = session.plan(history, key=key)
        else:
            seen = session.observe(env.render(state), {"steps": 1}, key=key, history=history)
            decision.calls.extend(seen.calls)
            result = seen.planning if seen.status == "replanned" else None
            if seen.status == "done":  # a predicted goal the environment does not confirm: plan again
                result = session.plan(history, key=key)
            decision.replanned = seen.checked is not None and result is not None
        if session.remaining["steps"] != remaining:
            raise RuntimeError(f"the session counts {session.remaining['steps']:g} steps left, the episode {remaining}")
        if result is not None:
            decision.plans += 1
            decision.calls.append(planning_record(result))
        step = session.step
        if step is None:
            assert session.result is not None
            return session.result
        decision.predicted = step.key
        return step
