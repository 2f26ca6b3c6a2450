"""The selection solvers: which predicted programs to implement and evaluate so that every budget entry holds.

The problem (``docs/plan-graph.md``, "Program graphs and selection"), on a program graph
(``metaharness.planner.program``): choose a set E of predicted or implemented, non-dead-end nodes to evaluate.
Each predicted node on the way is implemented once, through one in-edge whose source is evaluated, implemented, or
implemented in this plan; a plan's cost is the sum of the evaluated nodes' ``cost`` and the used edges' ``cost``, and
it must stay within the budget in every entry. At least one node is evaluated. The objective is the expected best
score after the iteration, E[max(incumbent, max over v in E of true_v)], as a sample average over scenarios of the
true scores (``score + std * noise``, a child's noise ``correlation`` times its parent's plus fresh noise, so one
revision chain shares its errors; clipped to [0, 1]), plus ``FILL_BONUS`` * (1 + score) per evaluation (use the
budget, on the better candidates). With every ``std`` 0 it is "evaluate the best predicted candidate".

Solvers: ``exact`` (branch and bound over the evaluated set and each candidate's ways to be implemented; proves
optimality of the sample-average objective; up to ``EXACT_CANDIDATE_LIMIT`` candidates and
``CHAIN_OPTION_LIMIT`` ways per candidate), ``ilp`` (SCIP MILP), ``auto`` (exact while its search stays small,
else ilp) and the baselines ``greedy`` (best predicted first while it fits),
``random`` (seeded order) and ``best_of_n`` (children of evaluated programs in insertion order), all returning a
``PlanResult`` whose ``evaluate`` lists the nodes to evaluate.

    >>> from metaharness.planner.program import add_evaluated, add_predicted, program_graph
    >>> g = program_graph("seed")
    >>> _ = add_evaluated(g, "seed", 0.30)
    >>> _ = add_predicted(g, "a", "seed", 0.40, summary="add label list")
    >>> _ = add_predicted(g, "b", "a", 0.55, summary="vote over neighbours")
    >>> r = select(g, {"evals": 1})
    >>> r.status, r.evaluate, r.nodes, r.path, round(r.value, 2)
    ('optimal', ['b'], ['a', 'b'], ['seed->a', 'a->b'], 0.55)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import Literal, get_args

from metaharness.errors import InputError
from metaharness.planner.graph import PlanGraph
from metaharness.planner.result import PlanResult
from metaharness.planner.selection.baselines import baseline_selection
from metaharness.planner.selection.exact import CHAIN_OPTION_LIMIT, SelectionLimitReached, exact_selection
from metaharness.planner.selection.ilp import ilp_selection
from metaharness.planner.selection.problem import SelectionProblem, selection_problem

SelectionSolver = Literal["auto", "exact", "ilp", "greedy", "random", "best_of_n"]
SELECTION_SOLVERS: tuple[SelectionSolver, ...] = get_args(SelectionSolver)
# ``exact`` refuses graphs with more candidates (predicted + implemented nodes) than this; ``auto`` uses it up to
# this size and while its search stays under AUTO_EXPANSION_LIMIT branch-and-bound nodes, then hands over to SCIP.
EXACT_CANDIDATE_LIMIT = 2_000
AUTO_EXPANSION_LIMIT = 20_000


def select(
    graph: PlanGraph,
    budget: Sequence[float] | Mapping[str, float] | None = None,
    *,
    solver: SelectionSolver = "auto",
    scenarios: int = 64,
    correlation: float = 0.5,
    seed: int = 0,
    time_limit: float | None = None,
) -> PlanResult:
    """Choose what to implement and evaluate in program graph ``graph`` (module docstring) with ``solver``.

    ``budget``: one cap per budget entry, or a mapping from limit names to caps (absent limits unlimited); default
    the graph's own. ``seed`` seeds the scenarios (and the ``random`` baseline's order); ``time_limit`` (seconds of
    wall clock from the call, building the problem included) bounds the ILP, which then reports ``gap``. Status
    "infeasible" (``value`` None) when not one candidate fits.
    """
    if solver not in SELECTION_SOLVERS:
        raise InputError(f"Unknown selection solver {solver!r}; use one of {', '.join(SELECTION_SOLVERS)}.")
    started = time.perf_counter()
    problem = selection_problem(graph, budget, scenarios=scenarios, correlation=correlation, seed=seed)
    if solver == "exact":
        if problem.size > EXACT_CANDIDATE_LIMIT:
            raise InputError(
                f"The exact selection solver takes at most {EXACT_CANDIDATE_LIMIT} candidates; this graph has "
                f"{problem.size}: use solver 'ilp' or 'auto'."
            )
        try:
            result = exact_selection(problem)
        except SelectionLimitReached:
            raise InputError(
                f"A candidate has more than {CHAIN_OPTION_LIMIT} ways to be implemented (merged revisions multiply "
                f"them), too many for the exact selection solver: use solver 'ilp' or 'auto'."
            ) from None
    elif solver == "auto":
        result = _auto(problem, time_limit, started)
    elif solver == "ilp":
        result = ilp_selection(problem, time_limit=time_limit, started=started)
    else:
        result = baseline_selection(problem, solver, seed=seed)
    result.seconds = time.perf_counter() - started
    return result


def _auto(problem: SelectionProblem, time_limit: float | None, started: float) -> PlanResult:
    if problem.size <= EXACT_CANDIDATE_LIMIT:
        with contextlib.suppress(SelectionLimitReached):
            return exact_selection(problem, max_expansions=AUTO_EXPANSION_LIMIT)
    return ilp_selection(problem, time_limit=time_limit, started=started)
