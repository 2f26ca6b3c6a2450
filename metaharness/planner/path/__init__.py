"""The path half of the planner: the best walk from the start to a goal within the budget (``docs/plan-graph.md``).

One module per part, as in ``metaharness.planner.selection``: ``problem`` (the validated problem,
``path_problem``), ``exact`` (label-setting DP, the default), ``ilp``
(time-expanded ILP in SCIP), ``lm`` (the model names a path; experiments only), with the bounds they share
(``bounds``) and the reason a problem has no plan (``infeasible``). ``metaharness.planner.solve`` runs them.

    >>> from metaharness.planner.graph import PlanGraph
    >>> from metaharness.planner.path.exact import exact_path
    >>> from metaharness.planner.path.problem import path_problem
    >>> g = PlanGraph.from_json({"start": "s", "budget": [1], "limits": ["steps"],
    ...                          "nodes": [{"id": "s"}, {"id": "g", "reward": 1, "goal": True}],
    ...                          "edges": [{"id": "e", "source": "s", "target": "g", "cost": [1]}]})
    >>> r = exact_path(path_problem(g))
    >>> r.path, r.cost
    (['e'], {'steps': 1.0})
"""
