"""A run's settings: what the user gave (``SettingsChange``), resolved once into what the run keeps (``RunSettings``).

Every way to start or continue a run builds a ``SettingsChange``, a typed record whose every setting is optional
(``None``: not given): the command line's options (``metaharness.cli.options``), ``optimize()``'s keyword
arguments, and each cell of the experiment grid (its template with the cell's dataset, proposer, seed and policy).
``RunSettings.resolve`` turns it into the run's settings once, when the run's task is open, over the settings the
run directory holds (``settings.json``; the root commit's ``run.json`` keeps the settings it started with):

- a setting given again must equal the stored one (the task and where it came from, the models, the proposer and
  its options, the example order: ``seed``, ``val_limit``, ``holdout``, the evaluation policy, ...), or it is
  refused with the reason: a run's scores are only comparable under one set of settings;
- a cap (``evals_per_iter``, the per-iteration budget, the per-run budget: ``--max-cost``, ``--max-tokens``,
  ``--budget``) may be tightened; raising one needs ``raise_caps`` (``--raise-caps``), which is how a run stopped
  at its cap is continued. A budget given names only its capped entries: an entry left at ``math.inf`` is not
  given, and the stored cap stays;
- ``max_proposer_failures`` is an operating rule, not a search setting: each session may set its own.

``RunSettings`` holds the task (``dataset``; ``task_source``, where a task other than the paper's datasets came
from: ``metaharness.runner.task.task_source``), the models, the proposer and its typed options, the example
limit, the seed harnesses (``seed_names``, ``seed_files``), and what the loop reads (``search``, a
``metaharness.search.settings.SearchSettings`` with the run's one ``SearchBudget``). Each part is checked when
it is made (``RunSettings``, ``SearchSettings``, ``SearchBudget``, ``Budget``): a settings value that exists is
valid, and the rest of the code trusts it. ``settings.json`` keeps them flat (``to_json``).

>>> s = RunSettings.resolve(SettingsChange(dataset="symptom2disease", task_model="local:smollm2-135m",
...                                        proposer="offline", per_run=Budget(usd=1.0)), None)
>>> s.search.evaluation, s.search.budget.per_run.usd, s.search.proposals_per_iteration()
('planner', 1.0, 12)
>>> RunSettings.resolve(SettingsChange(per_run=Budget(usd=0.5)), s).search.budget.per_run.usd
0.5
>>> try:
...     RunSettings.resolve(SettingsChange(per_run=Budget(usd=2.0)), s)
... except InputError as refused:
...     print(refused)  # doctest: +ELLIPSIS
This run was started with a per-run budget of usd=1; ... To continue with a larger cap, add --raise-caps.
>>> RunSettings.resolve(SettingsChange(per_run=Budget(usd=2.0)), s, raise_caps=True).search.budget.per_run.usd
2.0
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from metaharness import __version__
from metaharness.budget import Budget, SearchBudget
from metaharness.errors import InputError
from metaharness.evaluation.sandbox import AVERAGE_SECONDS
from metaharness.models.spec import parse_spec
from metaharness.proposers import ProposerOptions, needs_model, proposer_name, proposer_options
from metaharness.proposers.engines import is_engine
from metaharness.runner.models import MODEL_PROPOSERS, default_models
from metaharness.search.settings import SearchSettings
from metaharness.tasks.custom.task import TaskSource

# Settings a session may set for itself (operating rules, not search settings).
SESSION_FIELDS = ("max_proposer_failures",)
# Caps: a later session may tighten them; raising one needs raise_caps. What each is called in messages.
CAPS = {
    "evals_per_iter": ("--evals-per-iter", "--evals-per-iter"),
    "per_iteration": ("a per-iteration budget", "--iter-budget"),
    "per_run": ("a per-run budget", "--max-cost/--max-tokens/--budget"),
}
# Which part of the run's settings holds each setting a change names.
BUDGET_FIELDS = tuple(f.name for f in fields(SearchBudget))
SEARCH_FIELDS = tuple(f.name for f in fields(SearchSettings) if f.name != "budget")


@dataclass(frozen=True)
class SettingsChange:
    """What a user gave for a run: every setting optional (``None``: not given). The names are the run's
    (``RunSettings``, its ``search`` and their ``budget``); ``proposer_options`` may be a ``-P`` mapping, checked
    when resolved; ``per_iteration`` and ``per_run`` name the entries they cap (see the module docstring)."""

    dataset: str | None = None
    task_source: TaskSource | None = None
    task_model: str | None = None
    proposer: str | None = None
    proposer_model: str | None = None
    proposer_options: Mapping[str, object] | ProposerOptions | None = None
    val_limit: int | None = None
    seed_names: tuple[str, ...] | None = None
    seed_files: tuple[str, ...] | None = None
    evaluation: str | None = None
    seed: int | None = None
    holdout: int | None = None
    proposals: int | None = None
    solver: str | None = None
    first_stage: int | None = None
    max_proposer_failures: int | None = None
    harness_seconds: float | None = None
    evals_per_iter: int | None = None
    per_iteration: Budget | None = None
    per_run: Budget | None = None

    @classmethod
    def of(cls, settings: RunSettings) -> SettingsChange:
        """Every setting of ``settings`` given (of their budgets, the capped entries: an entry not capped keeps a
        stored cap)."""
        return cls(**_settings_values(settings))

    def given(self) -> dict[str, Any]:
        """The settings given, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def over(self, base: SettingsChange) -> SettingsChange:
        """The settings of ``base`` with these given over them (a budget entry by entry)."""
        values = {**base.given(), **self.given()}
        for key in ("per_iteration", "per_run"):
            if getattr(base, key) is not None and getattr(self, key) is not None:
                values[key] = _merged(getattr(base, key), getattr(self, key))
        return SettingsChange(**values)


@dataclass(frozen=True)
class RunSettings:
    """Every setting that shapes a run's search and spending (the module docstring says how they last), checked
    when made: InputError naming the first bad one."""

    dataset: str
    task_model: str
    proposer: str
    proposer_model: str | None = None
    # The proposer's typed options (None: its defaults).
    proposer_options: ProposerOptions | None = None
    val_limit: int | None = None
    task_source: TaskSource | None = None
    seed_names: tuple[str, ...] | None = None
    seed_files: tuple[str, ...] | None = None
    # The harness's own time an evaluation allows per example on average (SandboxLimits.average_seconds).
    harness_seconds: float = AVERAGE_SECONDS
    search: SearchSettings = field(default_factory=SearchSettings)
    metaharness: str = __version__
    created: str = ""

    def __post_init__(self) -> None:
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
        if self.val_limit is not None and (not _whole(self.val_limit) or self.val_limit < 1):
            raise InputError(f"--val-limit must be a whole number >= 1, got {self.val_limit!r}.")
        seconds = self.harness_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < math.inf:
            raise InputError(f"--harness-seconds must be a number of seconds > 0, got {seconds!r}.")

    # -- resolving what was given against what the run holds -----------------------------------------------------

    @classmethod
    def resolve(cls, change: SettingsChange, stored: RunSettings | None, *, raise_caps: bool = False) -> RunSettings:
        """The settings of a session: ``change`` over ``stored`` (the run's, None for a new run), by the rules of
        the module docstring. InputError for a change the rules refuse, or a bad setting. The models are defaulted
        (``default_models``) only for a new run that does not name them."""
        given = _normalised(change.given())
        if stored is None:
            return _new(given)
        old_values = _settings_values(stored)
        changes: dict[str, Any] = {}
        for key, value in given.items():
            old = old_values[key]
            if key in ("per_iteration", "per_run"):
                value = _merged(old, value)
            elif key == "proposer_options":
                value = proposer_options(stored.proposer, value)
                old = proposer_options(stored.proposer, old)
            if value == old:
                continue
            if key in SESSION_FIELDS:
                changes[key] = value
            elif key == "task_source":
                raise _task_changed(old, value)
            elif key in CAPS:
                name, flag = CAPS[key]
                if not _tighter(value, old) and not raise_caps:
                    raise InputError(
                        f"This run was started with {name} of {_shown(old)}; {flag} may only tighten it "
                        f"({_shown(value)} is larger). To continue with a larger cap, add --raise-caps."
                    )
                changes[key] = value
            else:
                flag = "--" + key.replace("_", "-")
                raise InputError(
                    f"This run was started with {flag} {_shown(old)}, not {_shown(value)}; a run keeps its settings so "
                    f"that its scores stay comparable. Leave {flag} out (or --resume), or use another --run-dir."
                )
        return _assembled({**old_values, **changes, "metaharness": stored.metaharness, "created": stored.created})

    # -- JSON (settings.json, flat) ---------------------------------------------------------------------------------

    def to_json(self) -> dict[str, object]:
        search, budget = self.search, self.search.budget
        data: dict[str, object] = {
            "dataset": self.dataset,
            "task_model": self.task_model,
            "proposer": self.proposer,
            "proposer_model": self.proposer_model,
            "proposer_options": self.proposer_options.to_json() if self.proposer_options is not None else {},
            "val_limit": self.val_limit,
            "task_source": _plain(self.task_source),
            "seed_names": list(self.seed_names) if self.seed_names is not None else None,
            "seed_files": list(self.seed_files) if self.seed_files is not None else None,
            "harness_seconds": self.harness_seconds,
            **{key: getattr(search, key) for key in SEARCH_FIELDS},
            "evals_per_iter": budget.evals_per_iter,
            "iteration_budget": budget.per_iteration.to_json(),
            "run_budget": budget.per_run.to_json(),
            "metaharness": self.metaharness,
            "created": self.created,
        }
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSettings:
        """Settings as stored; a run from before settings were stored (its ``run.json`` config only) gets the
        behaviour it ran with: every proposal evaluated fully, in order (best-of-N with N = evals per iteration)."""
        known = {*(f.name for f in fields(SettingsChange)), "metaharness", "created"}
        values = {k: v for k, v in data.items() if k in known and v is not None}
        values["per_iteration"] = Budget.checked(_limits(data, "iteration_budget"))
        values["per_run"] = Budget.checked(_limits(data, "run_budget"))
        values["proposer_options"] = proposer_options(str(values.get("proposer")), values.get("proposer_options"))
        if "evaluation" not in data:
            values["evaluation"] = "best-of-n"
        return _assembled(_normalised(values))


def _new(given: Mapping[str, Any]) -> RunSettings:
    """A new run's settings: ``given`` with the models defaulted, the proposer's options typed, the time noted."""
    values = dict(given)
    proposer = values.get("proposer")
    if None in (values.get("task_model"), proposer) or (
        values.get("proposer_model") is None and proposer in MODEL_PROPOSERS
    ):
        models = default_models(values.get("task_model"), proposer, values.get("proposer_model"))
        values.update(task_model=models.task_model, proposer=models.proposer, proposer_model=models.proposer_model)
    if "dataset" not in values:
        raise InputError(
            "Name the task with --dataset (lawbench, symptom2disease, uspto, a task folder or hf:OWNER/NAME), "
            "or --resume a run."
        )
    values["proposer_options"] = proposer_options(values["proposer"], values.get("proposer_options"))
    values["created"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return _assembled(values)


def _assembled(values: Mapping[str, Any]) -> RunSettings:
    """The run's settings from every setting by name (``SettingsChange``'s names; absent: the default)."""
    budget = SearchBudget(**{k: values[k] for k in BUDGET_FIELDS if k in values})
    search = SearchSettings(budget=budget, **{k: values[k] for k in SEARCH_FIELDS if k in values})
    own = {k: v for k, v in values.items() if k not in BUDGET_FIELDS and k not in SEARCH_FIELDS}
    return RunSettings(search=search, **own)


def _settings_values(settings: RunSettings) -> dict[str, Any]:
    """Every setting of ``settings`` by ``SettingsChange``'s names."""
    values = {f.name: getattr(settings, f.name) for f in fields(settings) if f.name in _CHANGE_FIELDS}
    values.update({k: getattr(settings.search, k) for k in SEARCH_FIELDS})
    values.update({k: getattr(settings.search.budget, k) for k in BUDGET_FIELDS})
    return values


_CHANGE_FIELDS = {f.name for f in fields(SettingsChange)}


def _normalised(values: Mapping[str, Any]) -> dict[str, Any]:
    """Given settings as the run keeps them: seed lists as tuples, the task source as JSON holds it, the proposer by
    its name now (an old name, e.g. ``base``, is its new one: ``metaharness.proposers.RENAMED``)."""
    out = dict(values)
    if isinstance(out.get("proposer"), str):
        out["proposer"] = proposer_name(out["proposer"])
    for key in ("seed_names", "seed_files"):
        if out.get(key) is not None:
            out[key] = tuple(out[key])
    if "task_source" in out:
        out["task_source"] = _plain(out["task_source"])
    return out


def _plain(value: TaskSource | None) -> TaskSource | None:
    """``value`` as JSON holds it (tuples as lists, mappings as dicts), so a stored task source compares equal."""
    return None if value is None else json.loads(json.dumps(value))


def _limits(data: Mapping[str, object], key: str) -> Mapping[str, object] | None:
    """``data[key]``: a mapping of named limits, or absent."""
    value = data.get(key)
    if value is not None and not isinstance(value, Mapping):
        raise InputError(f"The {key} must map limit names to numbers, got {value!r}.")
    return value


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


def _merged(old: Budget, given: Budget) -> Budget:
    """``old`` with the entries ``given`` caps replaced (an entry of ``given`` at ``math.inf`` is not given)."""
    return Budget(*(new if math.isfinite(new) else was for was, new in zip(old.vector(), given.vector(), strict=True)))


def _tighter(new: object, old: object) -> bool:
    if isinstance(new, Budget) and isinstance(old, Budget):
        return all(a <= b for a, b in zip(new.vector(), old.vector(), strict=True))
    return isinstance(new, (int, float)) and isinstance(old, (int, float)) and new <= old


def _shown(value: object) -> str:
    if isinstance(value, ProposerOptions):
        return str(value.to_json())
    return repr(value) if isinstance(value, str) else str(value)
