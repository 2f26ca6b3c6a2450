"""A planning session for an agent loop: plan, follow the route step by step, replan when reality differs (TAPE).

The agent keeps its own loop; the session keeps the route, the budget and the check of every step::

    session = PlanningSession("box on (3,1)", {"steps": 12}, model=connect("openai:qwen@http://127.0.0.1:8000/v1"))
    session.plan(["player at (1,1), box at (2,1)"])          # -> RouteResult; session.step is its first step
    while session.step is not None:
        state = execute(session.step.action)                   # or session.step.call with tools=[...]
        seen = session.observe(state, {"steps": 1})            # "continue", "done", "replanned", "exhausted"

The contract (``docs/planning-session.md``):

- ``PlanningSession(goal, budget, *, model, ...)``: ``budget`` maps each limit's name to its amount
  (``{"steps": 12, "usd": 0.5}``); the other options are those of ``metaharness.planner.tps.plan`` (``plans``,
  ``horizon``, ``solver``, ``tools``, ``max_tokens``, and the four stages to override the model's), fixed for the
  session. ``horizon`` may also be a function of the remaining budget (a dict) returning the horizon of each call.
- ``plan(history, *, key=None)``: a planning call from the current state (the last history entry; ``key`` is its
  canonical form when the domain has one) with what is left of the budget. The new route replaces the old one;
  ``step`` is the step to carry out next, or None when no route was found (``result.reason`` says why).
- ``observe(state, spent, *, key=None, history=None)`` after carrying out ``step``: ``state`` is what the agent
  observes now, ``spent`` what the step cost (a mapping by limit name, missing names 0, or a list; added to
  ``spent``). The step's prediction holds when the state matches (equal canonical keys when ``key`` is given;
  otherwise ``same(observed, predicted_step)`` when the session has one, else the session's merger judges the two
  texts: equal up to case and spacing, or the model judge says "same" both ways) and no cost entry exceeds the
  predicted cost by more than ``cost_tolerance`` (relative, at least absolute; not checked for the route's last
  step, whose state is the goal). Then the answer is ``"continue"`` with the route's next step, or ``"done"``
  when that step ended the route (its predicted state is a goal);
  otherwise, and when there was no step to check, the session plans again from ``history`` (default: the history
  so far, then ``"carried out: ACTION"`` and the observed state) and answers ``"replanned"`` with the new route's
  first step (None when it found none).
- The session ends when the realised spend has reached the budget in some limit (one anything was spent on) and
  the route is not complete: ``observe`` answers ``"exhausted"`` (step None; ``reason`` names the limits) instead
  of continuing or replanning, so ``while session.step is not None`` always ends.
- ``aplan`` and ``aobserve`` are the same calls for asyncio servers (run in a worker thread). Calls on one session
  are serialised by a lock; the session is for one agent loop at a time.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from metaharness.errors import InputError
from metaharness.models.protocol import ModelClient
from metaharness.planner.graph import BUDGET_TOLERANCE
from metaharness.planner.solve import SolverName
from metaharness.planner.subagents import (
    DEFAULT_PLANS,
    KeyJudgeMerger,
    PlanningTask,
    PlanSampler,
    PredictedState,
    RewardLabeler,
    StateMerger,
    StateSimulator,
)
from metaharness.planner.tps import RouteResult, RouteStep, plan

Horizon = int | Callable[[dict[str, float]], int] | None


@dataclass(frozen=True)
class Observation:
    """What ``PlanningSession.observe`` found.

    ``status``: "continue" (the prediction held; carry out ``step``, the route's next step), "done" (it held and
    the route is complete: the predicted goal state is reached), "replanned" (it did not hold, or there was no
    step to check: ``planning`` is the new call's result and ``step`` its first step, None without a
    route), or "exhausted" (the route is not complete but the realised spend has used up the budget in some limit:
    the session ends, ``step`` is None and ``reason`` names the limits). ``checked`` is the step whose
    prediction was checked, ``matched`` whether it held, ``reason`` why not. ``calls`` are the model exchanges
    the state check made (a model judge), for the agent's trace.
    """

    status: Literal["continue", "done", "replanned", "exhausted"]
    step: RouteStep | None
    checked: RouteStep | None
    matched: bool
    reason: str = ""
    planning: RouteResult | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)


class PlanningSession:
    """Plans, tracks the route and the budget, and replans on a mismatch; see the module docstring."""

    def __init__(
        self,
        goal: str,
        budget: Mapping[str, float],
        *,
        model: ModelClient | None = None,
        plans: int = DEFAULT_PLANS,
        horizon: Horizon = None,
        solver: SolverName = "exact",
        tools: Sequence[Any] | None = None,
        sampler: PlanSampler | None = None,
        simulator: StateSimulator | None = None,
        merger: StateMerger | None = None,
        labeler: RewardLabeler | None = None,
        same: Callable[[str, RouteStep], bool] | None = None,
        cost_tolerance: float = 1e-9,
        max_tokens: int = 512,
    ) -> None:
        task = PlanningTask.create([], goal, budget, tools)  # validates goal, budget and tools once
        if plans < 1:
            raise InputError(f"plans (the number of candidate plans to sample) must be >= 1; got {plans}.")
        if model is None and (sampler is None or simulator is None or labeler is None):
            raise InputError(
                "A planning session needs model= (e.g. connect('openai:MODEL@URL')) or all of sampler, simulator "
                "and labeler."
            )
        if not cost_tolerance >= 0:
            raise InputError(f"cost_tolerance must be >= 0; got {cost_tolerance!r}.")
        self.goal = goal
        self.limits = task.limits
        self.budget = task.budget
        self.tools = task.tools
        self.model = model
        self.plans = plans  # candidate plans sampled per planning call
        self.horizon = horizon
        self.solver: SolverName = solver
        self.sampler, self.simulator, self.labeler = sampler, simulator, labeler
        self.merger: StateMerger = merger or KeyJudgeMerger(model)
        self.same = same
        self.cost_tolerance = cost_tolerance
        self.max_tokens = max_tokens
        self.spent: dict[str, float] = dict.fromkeys(self.limits, 0.0)  # reported so far, by limit name
        self.history: list[str] = []
        self.result: RouteResult | None = None
        self.route: list[RouteStep] = []  # route[0] is the step to carry out next
        self.planning_calls = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ state

    @property
    def step(self) -> RouteStep | None:
        """The step to carry out next (None: no route, or the route is done)."""
        return self.route[0] if self.route else None

    def used_up(self) -> str:
        """The limits whose realised spend has reached the budget, as text (e.g. ``"steps 3 of 3"``; "" when none).
        A limit nothing was spent on never counts, so a zero budget for a free resource does not end a session."""
        return ", ".join(
            f"{n} {s:g} of {b:g}"
            for n, b in zip(self.limits, self.budget, strict=True)
            if (s := self.spent[n]) > 0 and s >= b - BUDGET_TOLERANCE * max(1.0, abs(b))
        )

    @property
    def remaining(self) -> dict[str, float]:
        """What is left of the budget per limit (never below 0)."""
        return {n: max(0.0, b - self.spent[n]) for n, b in zip(self.limits, self.budget, strict=True)}

    # ------------------------------------------------------------------ calls

    def plan(self, history: str | Sequence[str], *, key: str | None = None) -> RouteResult:
        """Plan from the current state (the last entry of ``history``) with the remaining budget."""
        with self._lock:
            return self._plan(history, key)

    def observe(
        self,
        state: str,
        spent: Mapping[str, float] | Sequence[float],
        *,
        key: str | None = None,
        history: Sequence[str] | None = None,
    ) -> Observation:
        """Check the step just carried out against its prediction; continue, finish, or replan."""
        with self._lock:
            return self._observe(state, spent, key, history)

    async def aplan(self, history: str | Sequence[str], *, key: str | None = None) -> RouteResult:
        """``plan`` in a worker thread, so an asyncio server keeps serving while the model works."""
        return await asyncio.to_thread(self.plan, history, key=key)

    async def aobserve(
        self,
        state: str,
        spent: Mapping[str, float] | Sequence[float],
        *,
        key: str | None = None,
        history: Sequence[str] | None = None,
    ) -> Observation:
        """``observe`` in a worker thread."""
        return await asyncio.to_thread(self.observe, state, spent, key=key, history=history)

    # ------------------------------------------------------------------ inside

    def _plan(self, history: str | Sequence[str], key: str | None) -> RouteResult:
        self.history = [history] if isinstance(history, str) else [str(h) for h in history]
        left = self.remaining
        horizon = self.horizon(left) if callable(self.horizon) else self.horizon
        result = plan(
            self.history,
            self.goal,
            left,
            model=self.model,
            plans=self.plans,
            horizon=horizon,
            sampler=self.sampler,
            simulator=self.simulator,
            merger=self.merger,
            labeler=self.labeler,
            solver=self.solver,
            start_key=key,
            max_tokens=self.max_tokens,
            tools=self.tools,
        )
        self.planning_calls += 1
        self.result = result
        self.route = list(result.route)
        return result

    def _observe(
        self,
        state: str,
        spent: Mapping[str, float] | Sequence[float],
        key: str | None,
        history: Sequence[str] | None,
    ) -> Observation:
        cost = self._cost_vector(spent)
        self.spent = {n: self.spent[n] + c for n, c in zip(self.limits, cost, strict=True)}
        checked = self.step
        calls: list[dict[str, Any]] = []
        if checked is None:
            reason = "there was no route step to check"
        else:
            reason, calls = self._mismatch(checked, state, key, cost, last=len(self.route) == 1)
            if not reason:
                self.route = self.route[1:]
                if not self.route:
                    return Observation("done", None, checked, True, calls=calls)
        used_up = self.used_up()
        if used_up:
            self.route = []
            why = f"the budget is spent ({used_up})" + (f"; {reason}" if reason else "")
            return Observation("exhausted", None, checked, checked is not None and not reason, why, calls=calls)
        if not reason:
            return Observation("continue", self.step, checked, True, calls=calls)
        if history is None:
            done = f"carried out: {checked.action}" if checked is not None else "carried out a step off the route"
            history = [*self.history, done, state]
        result = self._plan(history, key)
        return Observation("replanned", self.step, checked, False, reason, result, calls)

    def _mismatch(
        self, step: RouteStep, state: str, key: str | None, cost: tuple[float, ...], *, last: bool
    ) -> tuple[str, list[dict[str, Any]]]:
        """Why the observation contradicts ``step``'s prediction ("" when it does not), and any judge calls. The
        cost of the route's last step no longer matters once its (goal) state is reached."""
        calls: list[dict[str, Any]] = []
        if key is not None:
            same = key == step.key
        elif self.same is not None:
            same = bool(self.same(state, step))
        else:
            task = PlanningTask.create([*self.history, state], self.goal, self.remaining, self.tools)
            groups = list(
                self.merger.merge(task, [PredictedState(step.expected_state, step.key), PredictedState(state)])
            )
            take = getattr(self.merger, "take_calls", None)
            calls = take() if take else []
            same = groups == [0, 0]
        if not same:
            return f"the observed state is not the predicted one ({step.expected_state[:200]!r})", calls
        over = [
            f"{n} {c:g} > predicted {p:g}"
            for n, c in zip(self.limits, cost, strict=True)
            if c > (p := step.cost[n]) + self.cost_tolerance * max(1.0, abs(p)) and not last
        ]
        if over:
            return f"the step cost more than predicted ({', '.join(over)})", calls
        return "", calls

    def _cost_vector(self, spent: Mapping[str, float] | Sequence[float]) -> tuple[float, ...]:
        if isinstance(spent, Mapping):
            unknown = sorted(set(map(str, spent)) - set(self.limits))
            if unknown:
                raise InputError(
                    f"spent names limit(s) {', '.join(unknown)} the session does not have ({', '.join(self.limits)})."
                )
            values = [spent.get(n, 0.0) for n in self.limits]
        else:
            values = list(spent)
            if len(values) != len(self.limits):
                raise InputError(f"spent needs {len(self.limits)} numbers, one per limit; got {len(values)}.")
        for name, value in zip(self.limits, values, strict=True):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise InputError(f"spent for {name!r} must be a finite number >= 0; got {value!r}.")
        return tuple(float(v) for v in values)
