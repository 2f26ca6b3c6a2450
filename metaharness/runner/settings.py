"""A run's settings: what the user gave (``SettingsChange``), resolved once into what the run keeps (``RunSettings``).

Every setting is declared once (``metaharness.setting.Setting``: name, type, default, help, check, flag), beside the
type that holds it: ``RUN_SETTINGS`` here, ``SEARCH_SETTINGS`` (``metaharness.search.settings``), ``BUDGET_SETTINGS``
(``metaharness.budget``); ``SETTINGS`` is all of them by name. Every way to start or continue a run builds a
``SettingsChange`` of them, every one optional (``None``: not given): the command line's options (derived from the
declarations: ``metaharness.cli.options.run_setting_options``), ``run_config()``'s and ``optimize()``'s keyword
arguments (the settings' names), and each cell of the experiment grid (its template with the cell's dataset,
proposer, seed and policy).
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
valid, and the rest of the code trusts it. ``settings.json`` keeps them flat, one key per setting's name (``to_json``;
``from_json`` also reads the keys older runs used, ``Setting.old_keys``).

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
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaharness import __version__
from metaharness.budget import BUDGET_SETTINGS, Budget, SearchBudget
from metaharness.errors import InputError
from metaharness.evaluation.sandbox import AVERAGE_SECONDS
from metaharness.models.local import DEFAULT_TASK_MODEL_SPEC
from metaharness.models.spec import parse_spec
from metaharness.proposers import (
    ProposerOptions,
    needs_model,
    options_class,
    proposer_name,
    proposer_options,
)
from metaharness.proposers.engines import is_engine
from metaharness.runner.models import MODEL_PROPOSERS, default_models
from metaharness.search.settings import SEARCH_SETTINGS, SearchSettings
from metaharness.setting import Setting, at_least, by_name, seconds
from metaharness.tasks.custom.task import TaskSource


def parse_options(pairs: list[str]) -> dict[str, object]:
    """``-P KEY=VALUE`` strings to a dict; values are JSON when they parse (numbers, booleans), else text."""
    options: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--proposer-option takes KEY=VALUE (e.g. probe_size=4), got '{pair}'.")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def seed_harnesses(text: str) -> dict[str, tuple[str, ...] | None]:
    """``--seed-harnesses NAMES|FILES``: the seed names to keep, or seed harness files (absolute paths, so a resume
    finds them), as the settings ``seed_names`` and ``seed_files``."""
    entries = [entry.strip() for entry in text.split(",") if entry.strip()]
    files = [entry for entry in entries if entry.endswith(".py")]
    if files and len(files) != len(entries):
        raise InputError("--seed-harnesses takes the names of the task's seeds or .py files, not both.")
    if files:
        return {"seed_names": None, "seed_files": tuple(str(Path(f).expanduser().resolve()) for f in files)}
    return {"seed_names": tuple(entries) or None, "seed_files": None}


def _text(value: object, flag: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{flag} takes a name, got {value!r}.")


def _model(value: object, flag: str) -> None:
    _text(value, flag)
    if isinstance(value, str) and not is_engine(value):  # an engine is checked when the run starts
        parse_spec(value)


def _proposer(value: object, flag: str) -> None:
    _text(value, flag)
    options_class(str(value))  # InputError for an unknown proposer


def _names(value: object, flag: str) -> None:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise InputError(f"{flag} takes names, got {value!r}.")


def _options(value: object, flag: str) -> None:
    if not isinstance(value, (Mapping, ProposerOptions)):
        raise InputError(f"{flag} takes KEY=VALUE settings of the proposer, got {value!r}.")


def _source(value: object, flag: str) -> None:
    if not isinstance(value, Mapping):
        raise InputError(f"The task source must be a mapping (source, settings, digest), got {value!r}.")


# The run's own settings (the task, the models, the proposer, the examples), declared once (``metaharness.setting``).
RUN_SETTINGS = (
    Setting(
        "dataset",
        str,
        None,
        "Task: lawbench, symptom2disease, uspto, a task folder or hf:OWNER/NAME.",
        _text,
        flag="--dataset",
        shown_default="the run's, on --resume",
    ),
    # Where a task other than the paper's datasets came from (set with --dataset and -T: metaharness.runner.task).
    Setting("task_source", TaskSource, None, "Where the task came from.", _source),
    Setting(
        "task_model",
        str,
        None,
        "Model spec the harnesses call.",
        _model,
        flag="--task-model",
        shown_default=f"{DEFAULT_TASK_MODEL_SPEC} (embedded)",
    ),
    Setting(
        "proposer",
        str,
        None,
        "offline, coding, tps, or a baseline (tps-greedy, tps-random, tps-best-of-n).",
        _proposer,
        flag="--proposer",
        shown_default="tps with an API key, else offline",
    ),
    Setting(
        "proposer_model",
        str,
        None,
        "Model spec of the proposer, e.g. anthropic:claude-sonnet-4-5.",
        _model,
        flag="--proposer-model",
        shown_default="the hosted model of the API key set, if any",
    ),
    Setting(
        "proposer_options",
        ProposerOptions,
        None,
        "KEY=VALUE passed to the proposer (e.g. probe_size=4, plans=4); repeatable.",
        _options,
        flag="--proposer-option",
        short="-P",
        parse=parse_options,
        repeat=True,
        shown_default="the proposer's own",
    ),
    Setting(
        "val_limit",
        int,
        None,
        "Search on the first N validation examples only (held-out ones come after).",
        at_least(1),
        flag="--val-limit",
        minimum=1,
        shown_default="all",
        old_flags=("--limit",),
    ),
    Setting(
        "seed_names",
        tuple,
        None,
        "Comma-separated seed harnesses to start from: names of the task's or .py files.",
        _names,
        flag="--seed-harnesses",
        metavar="NAMES|FILES",
        parse=seed_harnesses,
        spreads=True,
        shown_default="all of the task's",
        old_flags=("--seeds",),
    ),
    # Seed harness files (--seed-harnesses FILES, optimize(seed_harnesses=...)): absolute paths.
    Setting("seed_files", tuple, None, "Seed harness files to start from.", _names),
    Setting(
        "harness_seconds",
        float,
        AVERAGE_SECONDS,
        "Seconds of the harness's own time (model calls excluded) an evaluation of a candidate allows per example on "
        "average, at least 120 s in all; past it the examples left score 0.",
        seconds,
        flag="--harness-seconds",
        metavar="S",
        minimum=0.001,
    ),
)
# Every run setting, by name: the run's own, the loop's, the budget's.
SETTINGS: dict[str, Setting] = by_name((*RUN_SETTINGS, *SEARCH_SETTINGS, *BUDGET_SETTINGS))
_RUN = by_name(RUN_SETTINGS)
# Settings a session may set for itself (operating rules, not search settings).
SESSION_FIELDS = ("max_proposer_failures",)
# Caps: a later session may tighten them; raising one needs raise_caps. What each is called in messages.
CAPS = {
    "evals_per_iter": ("--evals-per-iter", "--evals-per-iter"),
    "per_iteration": ("a per-iteration budget", "--iter-budget"),
    "per_run": ("a per-run budget", "--max-cost/--max-tokens/--budget"),
}
# Which part of the run's settings holds each setting a change names.
BUDGET_FIELDS = tuple(s.name for s in BUDGET_SETTINGS)
SEARCH_FIELDS = tuple(s.name for s in SEARCH_SETTINGS)
# Names the Python API once took, and the setting each now is (``optimize`` and ``run_config`` keep taking them).
RENAMED_ARGUMENTS = {"options": "proposer_options", "seeds": "seed_files"}


class SettingsChange:
    """What a user gave for a run: any of the run settings (``SETTINGS``) by name, every one optional (``None``:
    not given). ``proposer_options`` may be a ``-P`` mapping, checked when resolved; ``per_iteration`` and
    ``per_run`` name the entries they cap (see the module docstring). Unknown names raise ``InputError``."""

    __slots__ = ("_given",)

    def __init__(self, **given: Any) -> None:
        unknown = sorted(k for k in given if k not in SETTINGS)
        if unknown:
            raise InputError(f"Unknown run setting(s) {', '.join(unknown)}; the settings are {', '.join(SETTINGS)}.")
        object.__setattr__(self, "_given", {k: given[k] for k in SETTINGS if given.get(k) is not None})

    def __getattr__(self, name: str) -> Any:
        if name in SETTINGS:
            return self._given.get(name)
        raise AttributeError(name)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a SettingsChange is not changed in place: use replace()")

    def __getstate__(self) -> dict[str, Any]:  # pickled: the experiment grid hands a cell's to a worker process
        return self._given

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "_given", dict(state))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SettingsChange) and self._given == other._given

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SettingsChange({', '.join(f'{k}={v!r}' for k, v in self._given.items())})"

    @classmethod
    def of(cls, settings: RunSettings) -> SettingsChange:
        """Every setting of ``settings`` given (of their budgets, the capped entries: an entry not capped keeps a
        stored cap; ``evals_per_iter`` only where the per-iteration budget caps no evals)."""
        values = _settings_values(settings)
        if math.isfinite(settings.search.budget.per_iteration.evals):
            values.pop("evals_per_iter")
        return cls(**values)

    def given(self) -> dict[str, Any]:
        """The settings given, by name (in the order they are declared)."""
        return dict(self._given)

    def replace(self, **changes: Any) -> SettingsChange:
        """These settings with ``changes`` (a value of ``None``: not given)."""
        return SettingsChange(**{**self._given, **changes})

    def over(self, base: SettingsChange) -> SettingsChange:
        """The settings of ``base`` with these given over them (a budget entry by entry)."""
        values = {**base.given(), **self.given()}
        for key in ("per_iteration", "per_run"):
            if getattr(base, key) is not None and getattr(self, key) is not None:
                values[key] = _merged(getattr(base, key), getattr(self, key))
        return SettingsChange(**values)

    def check_agreement(self) -> None:
        """InputError when two settings given say different things about one idea: how many example-evaluations an
        iteration may spend (``--iter-budget evals=`` and ``--evals-per-iter``)."""
        budget = self.per_iteration
        if self.evals_per_iter is not None and budget is not None and math.isfinite(budget.evals):
            raise InputError(
                "--iter-budget evals= and --evals-per-iter both say how many example-evaluations an iteration may "
                "spend: give one of them."
            )


def api_settings(given: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments of the Python API as settings: a name it once took (``RENAMED_ARGUMENTS``, and
    ``max_cost``/``max_tokens``, the run budget's ``usd``/``tokens``) with a DeprecationWarning; ``seed_files`` as
    absolute paths."""
    out = dict(given)
    for old, now in RENAMED_ARGUMENTS.items():
        if old in out:
            warnings.warn(f"the argument {old}= is now {now}=", DeprecationWarning, stacklevel=3)
            if out.get(now) is not None:
                raise InputError(f"{old}= is the old name of {now}=: give one of them.")
            out[now] = out.pop(old)
    money = {entry: out.pop(key) for key, entry in (("max_cost", "usd"), ("max_tokens", "tokens")) if key in out}
    money = {entry: value for entry, value in money.items() if value is not None}
    if money:
        warnings.warn("max_cost= and max_tokens= are now per_run=Budget(usd=..., tokens=...)", DeprecationWarning, 3)
        out["per_run"] = _merged(Budget.checked(money), out["per_run"]) if out.get("per_run") else Budget.checked(money)
    if out.get("seed_files") is not None:
        out["seed_files"] = tuple(str(Path(path).expanduser().resolve()) for path in out["seed_files"])
    return out


@dataclass(frozen=True)
class RunSettings:
    """Every setting that shapes a run's search and spending (the module docstring says how they last; each is
    declared once: ``RUN_SETTINGS`` here, ``SEARCH_SETTINGS`` for ``search``, ``BUDGET_SETTINGS`` for its
    ``budget``), checked when made: InputError naming the first bad one."""

    dataset: str
    task_model: str
    proposer: str
    proposer_model: str | None = _RUN["proposer_model"].default
    # The proposer's typed options (None: its defaults).
    proposer_options: ProposerOptions | None = _RUN["proposer_options"].default
    val_limit: int | None = _RUN["val_limit"].default
    task_source: TaskSource | None = _RUN["task_source"].default
    seed_names: tuple[str, ...] | None = _RUN["seed_names"].default
    seed_files: tuple[str, ...] | None = _RUN["seed_files"].default
    # The harness's own time an evaluation allows per example on average (SandboxLimits.average_seconds).
    harness_seconds: float = _RUN["harness_seconds"].default
    search: SearchSettings = field(default_factory=SearchSettings)
    metaharness: str = __version__
    created: str = ""

    def __post_init__(self) -> None:
        if not self.dataset:
            raise InputError("Name the task with --dataset.")
        for setting in RUN_SETTINGS:
            setting.check(getattr(self, setting.name))
        proposer_options(self.proposer, self.proposer_options)  # of this proposer's kind (checked when made)
        if needs_model(self.proposer) and self.proposer_model is None:
            raise InputError(
                f"The {self.proposer} proposer drives a coding agent and needs a proposer model with tool calling: "
                "pass --proposer-model (e.g. anthropic:claude-sonnet-4-5, or openai:MODEL@http://host:port/v1), or "
                "use --proposer offline, which needs no hosted model."
            )

    # -- resolving what was given against what the run holds -----------------------------------------------------

    @classmethod
    def resolve(cls, change: SettingsChange, stored: RunSettings | None, *, raise_caps: bool = False) -> RunSettings:
        """The settings of a session: ``change`` over ``stored`` (the run's, None for a new run), by the rules of
        the module docstring. InputError for a change the rules refuse, or a bad setting. A new run's models are
        defaulted (``default_models``) when it does not name them, its proposer's options typed, its time noted."""
        given = _normalised(change.given())
        if stored is None:
            proposer = given.get("proposer")
            if None in (given.get("task_model"), proposer) or (
                given.get("proposer_model") is None and proposer in MODEL_PROPOSERS
            ):
                models = default_models(given.get("task_model"), proposer, given.get("proposer_model"))
                given.update(
                    task_model=models.task_model, proposer=models.proposer, proposer_model=models.proposer_model
                )
            if "dataset" not in given:
                raise InputError(
                    "Name the task with --dataset (lawbench, symptom2disease, uspto, a task folder or hf:OWNER/NAME), "
                    "or --resume a run."
                )
            given["proposer_options"] = proposer_options(given["proposer"], given.get("proposer_options"))
            return _assembled({**given, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
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
                flag = SETTINGS[key].flag or "--" + key.replace("_", "-")
                raise InputError(
                    f"This run was started with {flag} {_shown(old)}, not {_shown(value)}; a run keeps its settings so "
                    f"that its scores stay comparable. Leave {flag} out (or --resume), or use another --run-dir."
                )
        resolved = _assembled({**old_values, **changes, "metaharness": stored.metaharness, "created": stored.created})
        capped = resolved.search.budget.per_iteration.evals
        if "evals_per_iter" in changes and math.isfinite(capped):
            raise InputError(
                f"This run's --iter-budget caps an iteration at evals={capped:g}, so --evals-per-iter would change "
                "nothing: leave it out, or give --iter-budget evals= instead."
            )
        return resolved

    # -- JSON (settings.json, flat: one key per declared setting) ---------------------------------------------------

    def to_json(self) -> dict[str, object]:
        values = _settings_values(self)
        data = {name: _stored(name, values[name]) for name in SETTINGS}
        return {**data, "metaharness": self.metaharness, "created": self.created}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSettings:
        """Settings as stored (a setting under an older key, ``Setting.old_keys``, too); a run from before settings
        were stored (its ``run.json`` config only) gets the behaviour it ran with: every proposal evaluated fully, in
        order (best-of-N with N = evals per iteration)."""
        values: dict[str, Any] = {k: data[k] for k in ("metaharness", "created") if data.get(k) is not None}
        for name, setting in SETTINGS.items():
            stored = next((data[k] for k in (name, *setting.old_keys) if data.get(k) is not None), None)
            if isinstance(setting.default, Budget):
                values[name] = Budget.checked(_limits(stored, name))
            elif stored is not None:
                values[name] = stored
        values["proposer_options"] = proposer_options(str(values.get("proposer")), values.get("proposer_options"))
        if "evaluation" not in data:
            values["evaluation"] = "best-of-n"
        return _assembled(_normalised(values))


def _assembled(values: Mapping[str, Any]) -> RunSettings:
    """The run's settings from every setting by name (absent: the declared default)."""
    budget = SearchBudget(**{k: values[k] for k in BUDGET_FIELDS if k in values})
    search = SearchSettings(budget=budget, **{k: values[k] for k in SEARCH_FIELDS if k in values})
    own = {k: v for k, v in values.items() if k not in BUDGET_FIELDS and k not in SEARCH_FIELDS}
    return RunSettings(search=search, **own)


def _settings_values(settings: RunSettings) -> dict[str, Any]:
    """Every setting of ``settings`` by name (from the settings, their ``search`` or its ``budget``)."""
    values: dict[str, Any] = {}
    for name in SETTINGS:
        holder: object = settings
        if name in BUDGET_FIELDS:
            holder = settings.search.budget
        elif name in SEARCH_FIELDS:
            holder = settings.search
        values[name] = getattr(holder, name)
    return values


def _stored(name: str, value: object) -> object:
    """A setting's value as settings.json keeps it."""
    if isinstance(value, (Budget, ProposerOptions)):
        return value.to_json()
    if name == "proposer_options":  # None: the proposer's defaults
        return {}
    if name == "task_source":
        return _plain(value)  # type: ignore[arg-type]
    return list(value) if isinstance(value, tuple) else value


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


def _limits(value: object, key: str) -> Mapping[str, object] | None:
    """A stored budget: a mapping of named limits, or absent."""
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
