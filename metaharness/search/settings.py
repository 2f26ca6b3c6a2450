"""What the search loop reads of a run's settings: how it orders, allots, spends and gives up (``SearchSettings``).

The run's settings (``metaharness.runner.settings.RunSettings``: the task, the models and the proposer around
these) hold one of these; a run resolves them once, when its task is open, and the loop trusts them. Each setting
is declared once (``SEARCH_SETTINGS``, ``metaharness.setting.Setting``: its name, type, default, help and check) and
checked when a value is made (``SearchSettings`` here, its ``budget`` in ``metaharness.budget.SearchBudget``).

>>> settings = SearchSettings(evaluation="best-of-n", budget=SearchBudget(evals_per_iter=4))
>>> settings.proposals_per_iteration(), SearchSettings().proposals_per_iteration()
(4, 12)
>>> SearchSettings(holdout=-1)
Traceback (most recent call last):
...
metaharness.errors.InputError: --holdout must be a whole number >= 0, got -1.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from metaharness.budget import SearchBudget
from metaharness.errors import InputError
from metaharness.search.staging import ALLOCATION_SOLVERS, AllocationSolver, policy_names
from metaharness.setting import Setting, at_least, by_name

DEFAULT_PROPOSALS = 12
# The evaluation policy of a new run (see metaharness.search.staging). docs/staged-evaluation.md ("Which policy is the
# default") gives the evidence: on the replayed real runs the planner is level with every baseline and spends less
# than every one that fills its budget; the threshold rule, level on average, spends less still but has the worst runs.
DEFAULT_EVALUATION = "planner"


def _policy(value: object, flag: str) -> None:
    if value not in policy_names():
        raise InputError(f"Unknown {flag} {value!r}; use one of {', '.join(policy_names())}.")


def _solver(value: object, flag: str) -> None:
    if value not in ALLOCATION_SOLVERS:
        raise InputError(f"{flag} must be one of {', '.join(ALLOCATION_SOLVERS)}, got {value!r}.")


def _boolean(value: object, flag: str) -> None:
    if not isinstance(value, bool):
        raise InputError(f"{flag} must be true or false, got {value!r}.")


def _on_off(text: str) -> bool:
    """``on`` or ``off`` (also true/false, yes/no, 1/0) from the command line."""
    words = {"on": True, "true": True, "yes": True, "1": True, "off": False, "false": False, "no": False, "0": False}
    if text.strip().lower() not in words:
        raise InputError(f"--train-folds takes on or off, got {text!r}.")
    return words[text.strip().lower()]


# What the loop reads, declared once (``metaharness.setting``); ``budget`` is the run's limits (``BUDGET_SETTINGS``).
SEARCH_SETTINGS = (
    Setting(
        "evaluation",
        str,
        DEFAULT_EVALUATION,
        "How validation examples are allotted to candidates (planner: staged by the TPS planner; greedy, "
        "best-of-n, halving, gate, threshold, thompson: baselines; all: every candidate in full, which records "
        "every outcome for a study).",
        _policy,
        flag="--evaluation",
    ),
    Setting(
        "seed", int, 0, "Orders the validation examples and seeds the proposer.", at_least(-(2**63)), flag="--seed"
    ),
    Setting(
        "holdout",
        int,
        None,
        "Validation examples no proposer sees: a fifth choose what the run returns among the search's best, the "
        "rest score it.",
        at_least(0),
        flag="--holdout",
        minimum=0,
        shown_default="half the validation examples, from outside --val-limit's; none below 10",
    ),
    Setting(
        "judge_train",
        int,
        0,
        "Training examples withheld from every harness and proposer and added to the judge examples, for a larger "
        "judgement (metaharness.search.withheld).",
        at_least(0),
        flag="--judge-train",
        minimum=0,
    ),
    Setting(
        "proposals",
        int,
        None,
        "Proposals an iteration takes.",
        at_least(1),
        flag="--proposals",
        minimum=1,
        shown_default=f"{DEFAULT_PROPOSALS}; best-of-n: --evals-per-iter",
    ),
    # Not on the command line (the Python API and settings.json only):
    Setting("solver", AllocationSolver, "auto", "The allocation solver of the planner policy.", _solver),
    Setting(
        "first_stage",
        int,
        None,
        "The least number of examples a candidate's first stage scores.",
        at_least(1),
        shown_default="a twelfth of the search's share, at least 3",
    ),
    Setting(
        "train_folds",
        bool,
        False,
        "Score the model-free contenders for what the run returns by cross-validation on the training examples and "
        "weigh that with their other scores (no model call, sandbox time; metaharness.search.train_folds).",
        _boolean,
        flag="--train-folds",
        metavar="on|off",
        parse=_on_off,
        shown_default="off",
    ),
    Setting(
        "max_proposer_failures",
        int,
        3,
        "Stop after this many proposer failures in a row.",
        at_least(1),
        flag="--max-proposer-failures",
        minimum=1,
    ),
)
_DECLARED = by_name(SEARCH_SETTINGS)


@dataclass(frozen=True)
class SearchSettings:
    """How the loop searches: the evaluation policy (``evaluation``) and its allocation ``solver`` (``auto`` or
    ``exact``), the example order's ``seed`` (the proposer's too) and the validation examples it holds out
    (``holdout``; None: `metaharness.search.staging.auto_holdout`) and the training examples it withholds to judge on
    (``judge_train``: `metaharness.search.withheld`), the proposals an iteration takes
    (``proposals``; None: ``proposals_per_iteration`` decides), the least first stage of a candidate's evaluation
    (``first_stage``), whether model-free contenders are scored on training folds (``train_folds``), every
    limit on spending (``budget``), and after how many proposer failures in a row a session stops
    (``max_proposer_failures``). InputError naming the first bad one when made."""

    evaluation: str = _DECLARED["evaluation"].default
    seed: int = _DECLARED["seed"].default
    holdout: int | None = _DECLARED["holdout"].default
    judge_train: int = _DECLARED["judge_train"].default
    proposals: int | None = _DECLARED["proposals"].default
    budget: SearchBudget = field(default_factory=SearchBudget)
    solver: AllocationSolver = _DECLARED["solver"].default
    first_stage: int | None = _DECLARED["first_stage"].default
    train_folds: bool = _DECLARED["train_folds"].default
    max_proposer_failures: int = _DECLARED["max_proposer_failures"].default

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name in _DECLARED:
                _DECLARED[f.name].check(getattr(self, f.name))

    def proposals_per_iteration(self) -> int:
        """How many proposals an iteration takes: ``proposals``, else ``evals_per_iter`` for best-of-N (the paper's
        N), else ``DEFAULT_PROPOSALS`` (several candidates for each full evaluation's worth of budget)."""
        if self.proposals is not None:
            return self.proposals
        return self.budget.evals_per_iter if self.evaluation == "best-of-n" else DEFAULT_PROPOSALS
