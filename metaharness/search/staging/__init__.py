"""Staged evaluation: each round of an iteration, which candidates get how many more validation examples.

The loop commits every proposal as soon as it passes its check, unscored, and then asks a `Policy` round after
round which candidates to score on more examples (`decide`), until the policy has nothing more worth doing or the
iteration's budget is spent. One concept per module:

- `order`: the run's validation examples in one seeded order (`ExampleOrder`), so two candidates' first examples
  are the same examples and every comparison is paired; its tail is held out of the search, to choose and judge.
- `evidence`: what is read off the candidates: scores by example, paired differences, the reference (the supported
  candidate with the highest score), a candidate's nearest evaluated ancestor (`evaluated_ancestor`), its outputs.
- `calibration`: how far the run's predictions held (`Calibration`), and a candidate's prior (`prior_of`).
- `standing`: what a policy decides from (`Standing`): every candidate that can still be scored as an allocation
  `Arm` with its posterior gain over the reference and the predicted cost of each further stage.
- `arms`, `objective`, `allocation`: the TPS planner's solver (`allocate`): which arm goes to which stage to
  maximise the expected true score of the candidate the run will return, within the budget.
- `policy`: the `Policy` protocol (its docstring is the contract), `Round`, the registry (`register`, `get_policy`).
- `planner` (the default) and `baselines` (greedy, best-of-n, halving, gate, threshold, thompson, all): the
  policies, each registered by its name beside its definition.

A policy that reads no prediction decides from `Standing.blind` (every prediction removed); the policies in
`PREDICTION_FREE` ask the proposer for none.
"""

from __future__ import annotations

# The policies register themselves when their modules are imported: the planner first, then the baselines, in the
# order `POLICIES` lists them.
from metaharness.search.staging import planner

# isort: split
from metaharness.search.staging import baselines
from metaharness.search.staging.allocation import ALLOCATION_SOLVERS, AllocationSolver, allocate
from metaharness.search.staging.arms import Allocation, Arm, Option
from metaharness.search.staging.calibration import MIN_PRIOR_SD, Calibration, prior_of
from metaharness.search.staging.evidence import (
    evaluated_ancestor,
    paired,
    reference,
    sample_variance,
    scores_of,
    trace_outputs,
)
from metaharness.search.staging.order import (
    HOLDOUT_SHARE,
    MIN_HOLDOUT_EXAMPLES,
    ExampleOrder,
    auto_holdout,
    confirm_size,
)
from metaharness.search.staging.policy import (
    Policy,
    Round,
    alternatives,
    decide,
    get_policy,
    policy_names,
    prediction_free,
    register,
)
from metaharness.search.staging.standing import MERGE_EXAMPLES, Standing, per_example_costs

# The built-in policies' names, in registration order, and those that ask the proposer for no prediction.
POLICIES: tuple[str, ...] = policy_names()
PREDICTION_FREE: frozenset[str] = prediction_free()

__all__ = [
    "ALLOCATION_SOLVERS",
    "HOLDOUT_SHARE",
    "MERGE_EXAMPLES",
    "MIN_HOLDOUT_EXAMPLES",
    "MIN_PRIOR_SD",
    "POLICIES",
    "PREDICTION_FREE",
    "Allocation",
    "AllocationSolver",
    "Arm",
    "Calibration",
    "ExampleOrder",
    "Option",
    "Policy",
    "Round",
    "Standing",
    "allocate",
    "alternatives",
    "auto_holdout",
    "baselines",
    "confirm_size",
    "decide",
    "evaluated_ancestor",
    "paired",
    "per_example_costs",
    "planner",
    "get_policy",
    "policy_names",
    "prediction_free",
    "prior_of",
    "reference",
    "register",
    "sample_variance",
    "scores_of",
    "trace_outputs",
]
