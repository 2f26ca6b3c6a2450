"""What the search loop reads of a run's settings: how it orders, allots, spends and gives up (``SearchSettings``).

The run's settings (``metaharness.runner.settings.RunSettings``: the task, the models and the proposer around
these) hold one of these; a run resolves them once, when its task is open, and the loop trusts them. Each value is
checked when it is made (``SearchSettings`` here, its ``budget`` in ``metaharness.budget.SearchBudget``).

>>> settings = SearchSettings(evaluation="best-of-n", budget=SearchBudget(evals_per_iter=4))
>>> settings.proposals_per_iteration(), SearchSettings().proposals_per_iteration()
(4, 12)
>>> SearchSettings(holdout=-1)
Traceback (most recent call last):
...
metaharness.errors.InputError: --holdout must be a whole number >= 0, got -1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from metaharness.budget import SearchBudget
from metaharness.errors import InputError
from metaharness.search.staging import ALLOCATION_SOLVERS, AllocationSolver, policy_names

DEFAULT_PROPOSALS = 12
# The evaluation policy of a new run (see metaharness.search.staging). docs/staged-evaluation.md ("Which policy is the
# default") gives the evidence: on the replayed real runs the planner is level with every baseline and spends less
# than every one that fills its budget; the threshold rule, level on average, spends less still but has the worst runs.
DEFAULT_EVALUATION = "planner"


@dataclass(frozen=True)
class SearchSettings:
    """How the loop searches: the evaluation policy (``evaluation``) and its allocation ``solver`` (``auto`` or
    ``exact``), the example order's ``seed`` (the proposer's too) and the validation examples it holds out
    (``holdout``; None: `metaharness.search.staging.auto_holdout`), the proposals an iteration takes
    (``proposals``; None: ``proposals_per_iteration`` decides), the least first stage of a candidate's evaluation
    (``first_stage``), every limit on spending (``budget``), and after how many proposer failures in a row a
    session stops (``max_proposer_failures``). InputError naming the first bad one when made."""

    evaluation: str = DEFAULT_EVALUATION
    seed: int = 0
    holdout: int | None = None
    proposals: int | None = None
    budget: SearchBudget = field(default_factory=SearchBudget)
    solver: AllocationSolver = "auto"
    first_stage: int | None = None
    max_proposer_failures: int = 3

    def __post_init__(self) -> None:
        for name, value, low in [("proposals", self.proposals, 1), ("first_stage", self.first_stage, 1)]:
            if value is not None and (not _whole(value) or value < low):
                raise InputError(f"--{name.replace('_', '-')} must be a whole number >= {low}, got {value!r}.")
        for name, value, low in [
            ("holdout", 0 if self.holdout is None else self.holdout, 0),
            ("seed", self.seed, -(2**63)),
            ("max_proposer_failures", self.max_proposer_failures, 1),
        ]:
            if not _whole(value) or value < low:
                raise InputError(f"--{name.replace('_', '-')} must be a whole number >= {low}, got {value!r}.")
        if self.evaluation not in policy_names():
            raise InputError(f"Unknown --evaluation {self.evaluation!r}; use one of {', '.join(policy_names())}.")
        if self.solver not in ALLOCATION_SOLVERS:
            raise InputError(f"--solver must be one of {', '.join(ALLOCATION_SOLVERS)}, got {self.solver!r}.")

    def proposals_per_iteration(self) -> int:
        """How many proposals an iteration takes: ``proposals``, else ``evals_per_iter`` for best-of-N (the paper's
        N), else ``DEFAULT_PROPOSALS`` (several candidates for each full evaluation's worth of budget)."""
        if self.proposals is not None:
            return self.proposals
        return self.budget.evals_per_iter if self.evaluation == "best-of-n" else DEFAULT_PROPOSALS


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
