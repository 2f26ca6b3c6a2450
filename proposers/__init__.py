"""Proposers: what writes the next candidate harnesses (installed as ``metaharness.proposers``).

``get_proposer(name, **config)`` builds one by name (see :data:`PROPOSER_NAMES`); every proposer implements
:class:`metaharness.proposal.Proposer`. Names:

- ``offline``: no hosted model; operator-library revisions, predicted by probing on held-out training examples,
  returned in the order they were made (:mod:`.offline`); the loop allots their evaluations. ``offline-greedy``,
  ``offline-random``, ``offline-best-of-n``: the same proposer under those names (the selection rule they named
  is the loop's now).
- ``base``: the Meta-Harness coding agent (:mod:`.coding`); needs a proposer model with tool calling.
- ``tps``: the coding agent after TPS planning over program space (:mod:`.planned_coding`); ``tps-greedy``,
  ``tps-random``, ``tps-best-of-n``: the same planning with a baseline selection rule.

Config keys (what the optimize loop passes; unknown keys are ignored so callers can pass one dict to any proposer):

- ``task``: a :class:`~metaharness.tasks.Task` or task name (required);
- ``task_model``: ModelClient or spec string of the fixed task model (offline: required, used for the probe);
- ``model``: ModelClient or spec string of the proposer model (``base`` and ``tps``: required); ``claude-code[:MODEL]``
  or ``codex[:MODEL]`` make a coding-agent CLI the engine that writes the candidates (:mod:`.engines`;
  :func:`connect_proposer` builds either);
- ``seed`` (int, default 0), ``workers`` (examples in flight for probes), ``probe_size`` (held-out training
  examples per probe; offline 8, tps 6, base 4), ``plans`` (offline: the least number of new candidates per
  iteration, default 12; tps: revisions sampled per iteration, default 4),
  ``operators`` (offline: restrict the operator library to these names), ``probe_tokens`` / ``frontier`` /
  ``extend`` (offline: a cap on new probe tokens per iteration, default scaled to the proposals wanted; parents
  revised at a time; candidates extended per level),
  ``depth`` (offline and tps: longest revision chain from an implemented candidate, default 3), ``max_steps`` /
  ``max_tokens`` (base/tps: agent turns per iteration, answer tokens per turn), ``context_tokens`` (base/tps: the
  proposer model's context window, which the agent's transcript is compacted to fit; default the client's, else
  32768), ``agent_seconds`` (base/tps with a coding-agent CLI: the wall-time limit of one of its sessions, default
  1800), ``run_dir`` (offline: probe files go under ``<run_dir>/proposer/probe``; base/tps: transcripts and
  planning records under ``<run_dir>/proposer``, else under the run directory the loop passes in
  ``RunState.run_dir``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from metaharness.errors import ConfigurationError, InputError
from metaharness.models.ledger import Ledger
from metaharness.models.types import ModelClient
from metaharness.proposal import Proposer
from metaharness.tasks.task import Task

_SELECTIONS = {"": "auto", "-greedy": "greedy", "-random": "random", "-best-of-n": "best_of_n"}
_FAMILIES = ("offline", "tps")
# Proposer settings get_proposer passes on (see the module docstring); any other config key is ignored.
OPTION_KEYS = (
    "seed",
    "workers",
    "probe_size",
    "plans",
    "operators",
    "probe_tokens",
    "frontier",
    "extend",
    "depth",
    "max_steps",
    "max_tokens",
    "context_tokens",
    "agent_seconds",
)
# The settings each family takes (``tps`` also takes ``plans``).
OFFLINE_KEYS = ("seed", "workers", "probe_size", "plans", "operators", "probe_tokens", "frontier", "extend", "depth")
CODING_KEYS = ("seed", "workers", "probe_size", "max_steps", "max_tokens", "context_tokens", "agent_seconds")
PROPOSER_NAMES: tuple[str, ...] = ("offline", "base", "tps") + tuple(
    f"{family}{suffix}" for family in _FAMILIES for suffix in _SELECTIONS if suffix
)


def _task(config: dict[str, Any]) -> Task:
    task = config.get("task")
    if task is None:
        raise ConfigurationError("A proposer needs the task (get_proposer(name, task=...)).")
    if isinstance(task, str):
        from metaharness.tasks import get_task

        return get_task(task, data_dir=config.get("data_dir"))
    return task


def _split(name: str) -> tuple[str, str]:
    if name == "base":
        return "base", "auto"
    for suffix, selection in _SELECTIONS.items():
        for family in _FAMILIES:
            if name == family + suffix:
                return family, selection
    raise InputError(f"Unknown proposer '{name}': use one of {', '.join(PROPOSER_NAMES)}.")


# What each proposer setting must be: (check, description for the message).
_INT = (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer")
_POSITIVE = ("workers", "probe_size", "plans", "frontier", "depth", "max_steps", "max_tokens")
_VALUES: dict[str, tuple[Any, str]] = {
    **{k: (lambda v: _INT[0](v) and v >= 1, "an integer >= 1") for k in _POSITIVE},
    "context_tokens": (lambda v: _INT[0](v) and v >= 256, "an integer >= 256"),
    "extend": (lambda v: _INT[0](v) and v >= 0, "an integer >= 0"),
    "seed": _INT,
    "probe_tokens": (
        lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf"),
        "a number > 0",
    ),
    "agent_seconds": (
        lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf"),
        "a number of seconds > 0",
    ),
}


def proposer_keys(name: str) -> tuple[str, ...]:
    """The settings (``-P`` keys) the proposer ``name`` takes; raises InputError for an unknown proposer."""
    family, _ = _split(name.strip().lower())
    if family == "offline":
        return OFFLINE_KEYS
    return CODING_KEYS + (("plans", "depth") if family == "tps" else ())


def needs_model(name: str) -> bool:
    """True for the proposers that drive a coding agent with a proposer model (``base``, ``tps`` and its baselines)."""
    return _split(name.strip().lower())[0] != "offline"


def check_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """User-given settings (``-P KEY=VALUE``) for the proposer ``name``, checked and normalised (``operators`` as
    a list of names). Raises :class:`InputError` with one line for an unknown key (with the closest known one),
    a key this proposer does not take, an unknown operator or a bad value. :func:`get_proposer` itself ignores
    unknown keys, so that the loop can pass its own (``task``, ``model``, ...) in the same dict."""
    import difflib

    keys = proposer_keys(name)
    checked: dict[str, Any] = {}
    for key, value in options.items():
        if key not in keys:
            if key in OPTION_KEYS:
                raise InputError(
                    f"Proposer option '{key}' does not apply to the {name} proposer; it takes: {', '.join(keys)}."
                )
            close = difflib.get_close_matches(key, OPTION_KEYS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise InputError(f"Unknown proposer option '{key}'; known: {', '.join(keys)}{hint}.")
        if key == "operators":
            checked[key] = operator_names(value)
            continue
        check, wanted = _VALUES[key]
        if not check(value):
            raise InputError(f"Proposer option {key} must be {wanted}, got {value!r}.")
        checked[key] = value
    return checked


def operator_names(value: Any) -> list[str]:
    """``operators`` as a list of known operator names (a comma-separated string is split); InputError otherwise."""
    from metaharness.proposers.operators import OPERATOR_NAMES

    names = [n.strip() for n in value.split(",")] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise InputError(f"Proposer option operators takes operator names separated by commas, got {value!r}.")
    unknown = [n for n in names if n not in OPERATOR_NAMES]
    if unknown:
        raise InputError(f"Unknown operator(s) {', '.join(unknown)}: use one of {', '.join(OPERATOR_NAMES)}.")
    return names


def connect_proposer(spec: str, ledger: Ledger | None = None) -> ModelClient:
    """The proposer model a spec names: a coding-agent CLI engine (``claude-code[:MODEL]``, ``codex[:MODEL]``) or
    a model (:func:`metaharness.models.connect`), counting into ``ledger``."""
    from metaharness.proposers.engines import EngineClient, is_engine

    if is_engine(spec):
        return EngineClient(spec, ledger=ledger)
    from metaharness.models import connect

    return connect(spec, ledger=ledger)


def check_proposer_model(name: str, spec: str) -> None:
    """Before a run starts: ``spec`` is a valid proposer model for the proposer ``name``; an engine is installed
    and logged in (:meth:`~metaharness.proposers.engines.EngineClient.check`). InputError / ConfigurationError
    with one line otherwise."""
    from metaharness.proposers.engines import EngineClient, is_engine

    if not is_engine(spec):
        from metaharness.models.spec import parse_spec

        parse_spec(spec)
        return
    if not needs_model(name):
        raise InputError(
            f"{spec} is a coding-agent engine for the base and tps proposers, not for {name}; use --proposer base or "
            "--proposer tps with it."
        )
    EngineClient(spec).check()


def get_proposer(name: str, **config: Any) -> Proposer:
    """Build the proposer ``name`` from ``config`` (keys in the module docstring)."""
    family, selection = _split(name.strip().lower())
    task = _task(config)
    run_dir = config.get("run_dir")
    options = {k: config[k] for k in OPTION_KEYS if config.get(k) is not None}
    if family == "offline":
        from metaharness.proposers.offline import OfflineProposer

        task_model = config.get("task_model")
        if task_model is None:
            raise ConfigurationError("The offline proposer probes with the task model: pass task_model=.")
        probe_dir = str(Path(run_dir) / "proposer" / "probe") if run_dir else None
        offline = {k: v for k, v in options.items() if k in OFFLINE_KEYS}
        if "operators" in offline:
            offline["operators"] = operator_names(offline["operators"])
        return OfflineProposer(task, task_model, name=name.strip().lower(), probe_dir=probe_dir, **offline)
    model = config.get("model")
    if model is None:
        raise ConfigurationError(
            f"The {name} proposer drives a coding agent and needs a proposer model with tool calling: pass "
            "--proposer-model (e.g. anthropic:claude-sonnet-4-5, openai:MODEL@http://host:port/v1, or a coding-agent "
            "CLI: claude-code, codex), or use --proposer offline, which needs no hosted model."
        )
    coding = {k: options[k] for k in CODING_KEYS if k in options and k != "agent_seconds"}
    if isinstance(model, str):
        model = connect_proposer(model)
    if "agent_seconds" in options and hasattr(model, "seconds"):
        model.seconds = float(options["agent_seconds"])
    if family == "base":
        from metaharness.proposers.coding import CodingProposer

        return CodingProposer(model, task, config.get("task_model"), run_dir=run_dir, **coding)
    from metaharness.proposers.planned_coding import TPSProposer

    return TPSProposer(
        model,
        task,
        config.get("task_model"),
        run_dir=run_dir,
        selection=selection,
        plans=config.get("plans") or 4,
        depth=config.get("depth") or 3,
        **coding,
    )
