"""A run's settings: one typed object from the command line (or ``optimize()``) to the loop, kept for the run's life.

``RunSettings`` holds every setting that shapes what a run searches or spends. It is written into the run
directory when the run starts (``settings.json``; the root commit's ``run.json`` keeps the settings it started
with) and read back by every later session (``RunSettings.resolve``):

- a setting given again must equal the stored one (the task and where it came from, the models, the proposer and
  its options, the example order: ``seed``, ``val_limit``, ``holdout``, the evaluation policy, ...), or it is
  refused with the reason: a run's scores are only comparable under one set of settings;
- a cap (``evals_per_iter``, the per-iteration budget, the per-run budget: ``--max-cost``, ``--max-tokens``,
  ``--budget``) may be tightened; raising one needs ``raise_caps`` (``--raise-caps``), which is how a run stopped
  at its cap is continued;
- ``max_proposer_failures`` is an operating rule, not a search setting: each session may set its own.

``task_source`` is where a task other than the paper's datasets came from
(``metaharness.search.optimize.task_source``: the task folder's absolute path or the ``hf:`` dataset, its ``-T``
settings with the val carve's seed and size, a fingerprint of its train and val examples), and ``seed_files`` the
seed harness files a run started from, so that a resumed run opens the same task, with the same carved val split,
and the same seeds.

Everything is checked once, in ``RunSettings.validate``; the rest of the code trusts it.

>>> s = RunSettings.resolve({"dataset": "symptom2disease", "task_model": "local:smollm2-135m",
...                          "proposer": "offline", "run_budget": {"usd": 1.0}}, None)
>>> s.evaluation, s.run_budget.usd, s.proposals_per_iteration()
('planner', 1.0, 12)
>>> RunSettings.resolve({"run_budget": {"usd": 0.5}}, s).run_budget.usd
0.5
>>> try:
...     RunSettings.resolve({"run_budget": {"usd": 2.0}}, s)
... except InputError as refused:
...     print(refused)  # doctest: +ELLIPSIS
This run was started with a per-run budget of usd=1; ... To continue with a larger cap, add --raise-caps.
>>> RunSettings.resolve({"run_budget": {"usd": 2.0}}, s, raise_caps=True).run_budget.usd
2.0
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from metaharness import __version__
from metaharness.budget import ENTRIES, Budget
from metaharness.errors import InputError
from metaharness.models.spec import parse_spec
from metaharness.planner.allocation import ALLOCATION_SOLVERS
from metaharness.search.staging import POLICIES, Policy

if TYPE_CHECKING:
    from metaharness.proposers import ProposerOptions
    from metaharness.tasks.custom.task import TaskSource

DEFAULT_EVALS_PER_ITER = 3
DEFAULT_PROPOSALS = 12
# The evaluation policy of a new run (see metaharness.search.staging; README "Staged evaluation" says why).
DEFAULT_EVALUATION: Policy = "planner"
# Settings a session may set for itself (operating rules, not search settings).
SESSION_FIELDS = ("max_proposer_failures",)
# Caps: a later session may tighten them; raising one needs raise_caps.
CAP_FIELDS = ("evals_per_iter", "iteration_budget", "run_budget")
# What a cap is called on the command line, for messages.
FLAGS = {
    "evals_per_iter": "--evals-per-iter",
    "iteration_budget": "--iter-budget",
    "run_budget": "--max-cost/--max-tokens/--budget",
}


@dataclass(frozen=True)
class RunSettings:
    """Every setting that shapes a run's search and spending (the module docstring says how they last)."""

    dataset: str
    task_model: str
    proposer: str
    proposer_model: str | None = None
    val_limit: int | None = None
    seed: int = 0
    holdout: int = 0
    evaluation: Policy = DEFAULT_EVALUATION
    proposals: int | None = None
    evals_per_iter: int = DEFAULT_EVALS_PER_ITER
    iteration_budget: Budget = field(default_factory=Budget)
    run_budget: Budget = field(default_factory=Budget)
    # The proposer's typed options (None: its defaults); resolve() and from_json() build them from -P mappings.
    proposer_options: ProposerOptions | None = None
    seed_names: tuple[str, ...] | None = None
    task_source: TaskSource | None = None
    seed_files: tuple[str, ...] | None = None
    solver: str = "auto"
    first_stage: int | None = None
    max_proposer_failures: int = 3
    metaharness: str = __version__
    created: str = ""

    # -- the budget -----------------------------------------------------------------------------------------------

    def proposals_per_iteration(self) -> int:
        """How many proposals an iteration takes: ``proposals``, else ``evals_per_iter`` for best-of-N (the paper's
        N), else ``DEFAULT_PROPOSALS`` (several candidates for each full evaluation's worth of budget)."""
        if self.proposals is not None:
            return self.proposals
        return self.evals_per_iter if self.evaluation == "best-of-n" else DEFAULT_PROPOSALS

    def given(self) -> dict[str, object]:
        """These settings as ``resolve`` takes them given: every field, the budgets as their capped entries
        (an entry not capped is not given, so a stored cap stays), the proposer options typed (not checked again)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values.update(iteration_budget=self.iteration_budget.capped(), run_budget=self.run_budget.capped())
        return values

    # -- checking -------------------------------------------------------------------------------------------------

    def validate(self) -> RunSettings:
        """Raise InputError naming the first bad setting; return self."""
        # Start-up: the CLI imports this module; the proposers load when settings are checked.
        from metaharness.proposers import needs_model, proposer_options
        from metaharness.proposers.engines import is_engine

        if not self.dataset:
            raise InputError("Name the task with --dataset.")
        parse_spec(self.task_model)
        if self.proposer_model is not None and not is_engine(self.proposer_model):  # an engine: checked at the start
            parse_spec(self.proposer_model)
        proposer_options(self.proposer, self.proposer_options)  # of this proposer's kind (checked when made)
        if needs_model(self.proposer) and self.proposer_model is None:
            raise InputError(
                f"The {self.proposer} proposer drives a coding agent and needs a proposer model with tool calling: "
                "pass --proposer-model (e.g. anthropic:claude-sonnet-4-5, or openai:MODEL@http://host:port/v1), or "
                "use --proposer offline, which needs no hosted model."
            )
        for name, value, low in [
            ("val_limit", self.val_limit, 1),
            ("proposals", self.proposals, 1),
            ("first_stage", self.first_stage, 1),
        ]:
            if value is not None and (not _whole(value) or value < low):
                raise InputError(f"--{name.replace('_', '-')} must be a whole number >= {low}, got {value!r}.")
        for name, value, low in [
            ("evals_per_iter", self.evals_per_iter, 1),
            ("holdout", self.holdout, 0),
            ("seed", self.seed, -(2**63)),
            ("max_proposer_failures", self.max_proposer_failures, 1),
        ]:
            if not _whole(value) or value < low:
                raise InputError(f"--{name.replace('_', '-')} must be a whole number >= {low}, got {value!r}.")
        if self.evaluation not in POLICIES:
            raise InputError(f"Unknown --evaluation {self.evaluation!r}; use one of {', '.join(POLICIES)}.")

        if self.solver not in ("auto", "exact"):
            raise InputError(f"--solver must be auto or exact, got {self.solver!r} (known: {ALLOCATION_SOLVERS}).")
        if self.iteration_budget.evals != math.inf and self.iteration_budget.evals < 1:
            raise InputError("The per-iteration budget's evals must be at least 1 example-evaluation.")
        return self

    # -- resolving given settings against stored ones -------------------------------------------------------------

    @classmethod
    def resolve(
        cls, given: Mapping[str, Any] | RunSettings, stored: RunSettings | None, *, raise_caps: bool = False
    ) -> RunSettings:
        """The settings of a session: ``given`` (the settings the user named; ``None`` values are not given;
        budgets as mappings of the entries given, proposer options as a ``-P`` mapping; or whole settings) over
        ``stored`` (the run's, None for a new run), by the rules of the module docstring; validated. InputError for
        an unknown setting or a change the rules refuse. The models are defaulted (``default_models``) only for a
        new run that does not name them, and the proposer options checked only when given as a mapping."""
        # Start-up: the CLI imports this module; the proposers load when settings are checked.
        from metaharness.proposers import proposer_options

        values: Mapping[str, Any] = given.given() if isinstance(given, RunSettings) else given
        unknown = sorted(k for k in values if k not in {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise InputError(f"Unknown run setting(s): {', '.join(unknown)}.")
        named = {k: v for k, v in values.items() if v is not None}
        if stored is None:
            return cls._new(named).validate()
        changes: dict[str, Any] = {}
        for key, value in named.items():
            if key in ("metaharness", "created"):
                continue
            old = getattr(stored, key)
            if key in ("iteration_budget", "run_budget"):
                value = _merged(old, value)
            elif key in ("seed_names", "seed_files") and value is not None:
                value = tuple(value)
            elif key == "task_source":
                value, old = _plain(value), _plain(old)
            elif key == "proposer_options":
                value = proposer_options(stored.proposer, value)
                old = proposer_options(stored.proposer, old)
            if value == old:
                continue
            if key in SESSION_FIELDS:
                changes[key] = value
            elif key == "task_source":
                raise _task_changed(old, value)
            elif key in CAP_FIELDS:
                if not _tighter(value, old) and not raise_caps:
                    raise InputError(
                        f"This run was started with {_cap_name(key)} of {_shown(old)}; {FLAGS[key]} may only tighten "
                        f"it ({_shown(value)} is larger). To continue with a larger cap, add --raise-caps."
                    )
                changes[key] = value
            else:
                flag = "--" + key.replace("_", "-")
                raise InputError(
                    f"This run was started with {flag} {_shown(old)}, not {_shown(value)}; a run keeps its settings so "
                    f"that its scores stay comparable. Leave {flag} out (or --resume), or use another --run-dir."
                )
        return dataclasses.replace(stored, **changes).validate()

    @classmethod
    def _new(cls, named: Mapping[str, Any]) -> RunSettings:
        # Start-up: the CLI imports this module; the proposers load when settings are checked.
        from metaharness.proposers import proposer_options

        # Here: optimize imports this module.
        from metaharness.search.optimize import MODEL_PROPOSERS, default_models

        values = dict(named)
        proposer = named.get("proposer")
        if None in (named.get("task_model"), proposer) or (
            named.get("proposer_model") is None and proposer in MODEL_PROPOSERS
        ):
            models = default_models(named.get("task_model"), named.get("proposer"), named.get("proposer_model"))
            values.update(task_model=models.task_model, proposer=models.proposer, proposer_model=models.proposer_model)
        for key in ("iteration_budget", "run_budget"):
            values[key] = _merged(Budget(), values.get(key, {}))
        for key in ("seed_names", "seed_files"):
            if key in values:
                values[key] = tuple(values[key])
        if "task_source" in values:
            values["task_source"] = _plain(values["task_source"])
        values["proposer_options"] = proposer_options(values["proposer"], values.get("proposer_options"))
        values.setdefault("created", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        if "dataset" not in values:
            raise InputError(
                "Name the task with --dataset (lawbench, symptom2disease, uspto, a task folder or hf:OWNER/NAME), "
                "or --resume a run."
            )
        return cls(**values)

    # -- JSON -----------------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = dataclasses.asdict(self)
        data["iteration_budget"] = self.iteration_budget.to_json()
        data["run_budget"] = self.run_budget.to_json()
        data["proposer_options"] = self.proposer_options.to_json() if self.proposer_options is not None else {}
        data["seed_names"] = list(self.seed_names) if self.seed_names is not None else None
        data["task_source"] = _plain(self.task_source)
        data["seed_files"] = list(self.seed_files) if self.seed_files is not None else None
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSettings:
        """Settings as stored; a run from before settings were stored (its ``run.json`` config only) gets the
        behaviour it ran with: every proposal evaluated fully, in order (best-of-N with N = evals per iteration)."""
        # Start-up: the CLI imports this module; the proposers load when settings are checked.
        from metaharness.proposers import proposer_options

        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["iteration_budget"] = Budget.checked(values.get("iteration_budget"))
        values["run_budget"] = Budget.checked(values.get("run_budget"))
        values["proposer_options"] = proposer_options(str(values.get("proposer")), values.get("proposer_options"))
        for key in ("seed_names", "seed_files"):
            if values.get(key) is not None:
                values[key] = tuple(values[key])
        if "evaluation" not in data:
            values["evaluation"] = "best-of-n"
        return cls(**values)


def _plain(value: TaskSource | None) -> TaskSource | None:
    """``value`` as JSON holds it (tuples as lists, mappings as dicts), so a stored task source compares equal."""
    return None if value is None else json.loads(json.dumps(value))


def _task_changed(old: TaskSource | None, new: TaskSource | None) -> InputError:
    """Why a session's task is not the run's: another task, other ``-T`` settings, or changed examples."""
    keep = "a run keeps its task so that its scores stay comparable"
    fresh = "Leave --dataset and -T out (or --resume), or use another --run-dir."
    if old is None or new is None or old.get("source") != new.get("source"):
        shown = [f"the task {s.get('source')}" if s else "a paper dataset" for s in (old, new)]
        return InputError(f"This run was started on {shown[0]}, not {shown[1]}; {keep}. {fresh}")
    if old.get("settings") != new.get("settings"):
        return InputError(
            f"This run was started on the task {old['source']} with the task settings {_shown_settings(old)}, not "
            f"{_shown_settings(new)}; {keep}. {fresh}"
        )
    return InputError(
        f"The train or val examples of the task {old.get('source')} changed since the run "
        "started, so its scores would not be comparable: restore the data, or start a new run with another --run-dir."
    )


def _shown_settings(source: TaskSource) -> str:
    pairs = [f"-T {key}={json.dumps(value)}" for key, value in sorted(dict(source.get("settings") or {}).items())]
    return " ".join(pairs) or "none"


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _merged(old: Budget, entries: Budget | Mapping[str, object]) -> Budget:
    """``old`` with the entries given replaced (a Budget given whole replaces every entry)."""
    if isinstance(entries, Budget):
        return entries
    checked = Budget.checked({k: v for k, v in entries.items()})
    given = {k for k, v in entries.items() if v is not None}
    return Budget(*(getattr(checked, k) if k in given else getattr(old, k) for k in ENTRIES))


def _tighter(new: object, old: object) -> bool:
    if isinstance(new, Budget) and isinstance(old, Budget):
        return all(a <= b for a, b in zip(new.vector(), old.vector(), strict=True))
    return isinstance(new, (int, float)) and isinstance(old, (int, float)) and new <= old


def _cap_name(key: str) -> str:
    return {
        "evals_per_iter": "--evals-per-iter",
        "iteration_budget": "a per-iteration budget",
        "run_budget": "a per-run budget",
    }[key]


def _shown(value: object) -> str:
    # Start-up: the CLI imports this module; the proposers load when settings are checked.
    from metaharness.proposers import ProposerOptions

    if isinstance(value, ProposerOptions):
        return str(value.to_json())
    return repr(value) if isinstance(value, str) else str(value)
