"""``solve(graph, budget, solver=...)``: one entry point over every solver family of both halves.

A plan graph in, the best walk (or status "infeasible", with the reason) out:

    >>> from metaharness.planner.graph import PlanGraph
    >>> g = PlanGraph.from_json({"start": "s", "budget": [1],
    ...                          "nodes": [{"id": "s"}, {"id": "g", "reward": 1, "goal": True}],
    ...                          "edges": [{"id": "e", "source": "s", "target": "g", "cost": [1]}]})
    >>> solve(g).to_json()["path"]
    ['e']
    >>> solve(g, [0.5]).status
    'infeasible'

A program graph (``"problem": "selection"``) gets the selection problem's answer instead
(``metaharness.planner.selection``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Literal, get_args

from metaharness.errors import InputError
from metaharness.models.protocol import ModelClient
from metaharness.planner.graph import PlanGraph
from metaharness.planner.path.exact import LabelLimitReached, exact_path
from metaharness.planner.path.ilp import ilp_path
from metaharness.planner.path.infeasible import diagnose
from metaharness.planner.path.lm import lm_path
from metaharness.planner.path.problem import SoftTargets, budget_by_name, path_problem
from metaharness.planner.result import PlanResult
from metaharness.planner.selection import select

SolverName = Literal["exact", "ilp", "lm", "auto"]
SOLVERS: tuple[SolverName, ...] = get_args(SolverName)
# ``auto`` runs the exact programme unless its passes together create more than this many labels, then hands over
# to the ILP. The hard family of benchmarks/planner_solvers.py needs at most a few ten thousand labels (under a
# second) where SCIP takes seconds to a minute, so the cap (several seconds of labels) is only met where the
# bounds fail, and the exact programme is then not the better solver.
AUTO_LABEL_LIMIT = 200_000


def solve(
    graph: PlanGraph,
    budget: Mapping[str, float] | Sequence[float] | None = None,
    *,
    solver: SolverName = "exact",
    horizon: int | None = None,
    discount: float | None = None,
    model: ModelClient | None = None,
    soft_targets: SoftTargets | None = None,
    time_limit: float | None = None,
) -> PlanResult:
    """Find a maximal-value feasible plan (``docs/plan-graph.md``) or report that none exists.

    ``budget``, ``horizon`` and ``discount`` override the graph's own; ``budget`` by limit name
    (``{"usd": 0.5}``: the names are the graph's ``limits``, an absent one keeps the graph's entry) or as a list in
    the graph's order. ``solver``: "exact" (label-setting DP,
    the default), "ilp" (SCIP; ``time_limit`` in seconds optional), "lm" (the model baseline; needs ``model``),
    "auto" (exact, switching to the ILP when its label count explodes). ``soft_targets`` subtract a penalty for
    exceeding preferred cost levels inside the hard budget (exact and ilp). Bad input raises ``InputError``.

    A program graph (``graph.problem == "selection"``) is handed to ``metaharness.planner.selection.select``
    with the same solver name ("exact", "ilp" or "auto") and default scenarios.
    """
    if solver not in SOLVERS:
        raise InputError(f"Unknown solver {solver!r}; use one of {', '.join(SOLVERS)}.")
    if graph.problem == "selection":
        if solver == "lm" or soft_targets is not None or horizon is not None or discount is not None:
            raise InputError(
                'A program graph (problem "selection") takes only a budget, the solver exact, ilp or auto and a '
                "time limit."
            )
        return select(graph, budget, solver=solver, time_limit=time_limit)
    started = time.perf_counter()
    if isinstance(budget, Mapping):
        budget = budget_by_name(graph, budget)
    problem = path_problem(graph, budget, horizon=horizon, discount=discount, soft=soft_targets)
    if solver == "lm":
        if model is None:
            raise InputError("The lm solver needs a model: pass model=connect(SPEC).")
        result = lm_path(problem, model)
    elif solver == "ilp":
        result = ilp_path(problem, time_limit=time_limit, started=started)
    elif solver == "auto":
        try:
            result = exact_path(problem, max_labels=AUTO_LABEL_LIMIT)
        except LabelLimitReached:
            result = ilp_path(problem, time_limit=time_limit, started=started)
    else:
        result = exact_path(problem)
    if result.status == "infeasible":
        found = diagnose(problem)
        result.reason, result.closest = found.reason, found.closest
    result.seconds = time.perf_counter() - started
    return result
