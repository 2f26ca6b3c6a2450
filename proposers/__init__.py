"""Proposers: what writes the next candidate harnesses (installed as ``metaharness.proposers``).

``get_proposer(name, options, ...)`` builds one by name (see ``PROPOSER_NAMES``); every proposer implements
``metaharness.search.protocol.Proposer``. Names:

- ``offline``: no hosted model; operator-library revisions, predicted from recorded calls where they only
  post-process answers, else from what their operator family gained in the run (or, with ``probe_size`` > 0, by
  probing held-out training examples), returned in the order they were made (``.offline``); the loop allots their
  evaluations.
- ``coding``: the Meta-Harness coding agent (``.coding``); needs a proposer model with tool calling.
- ``tps``: the coding agent after TPS planning over program space (``.tps``); ``tps-greedy``,
  ``tps-random``, ``tps-best-of-n``: the same planning with a baseline selection rule.

Old names still work (``RENAMED``), with a note where a user typed them: ``base`` is ``coding`` (a prediction's
``base`` is the candidate it was made from; the proposer is named for what it is), and ``offline-greedy``,
``offline-random``, ``offline-best-of-n`` are ``offline`` (the selection rule they named is the loop's
``--evaluation`` now, so they were one proposer under four names).

``get_proposer(name, options, task=..., task_model=..., model=..., run_dir=...)``: ``task`` is a
``Task`` or task name; ``task_model`` the fixed task model (offline: required, used for the
probe); ``model`` the proposer model (``coding`` and ``tps``: required; ``claude-code[:MODEL]`` or ``codex[:MODEL]``
make a coding-agent CLI the engine that writes the candidates, ``.engines``; ``connect_proposer`` builds
either); ``run_dir``: offline probe files go under ``<run_dir>/proposer/probe``, coding/tps transcripts and planning
records under ``<run_dir>/proposer`` (else under the run directory the loop passes in ``RunState.run_dir``).

The options are typed (``OfflineOptions``, ``CodingOptions``, ``TPSOptions``; constructing them is
the check, ``proposer_options`` builds them from ``-P KEY=VALUE`` settings):

- ``seed`` (int, default 0), ``workers`` (examples in flight for probes), ``probe_size`` (held-out training
  examples per probe; offline 0: no probe, tps 6, coding 4; a probe's calls are spent from the iteration's budget),
  ``plans`` (offline: the least number of new candidates per iteration, default 12; tps: revisions sampled per
  iteration, default 4), ``operators`` (offline: restrict the operator library to these names), ``frontier`` /
  ``extend`` (offline: parents revised at a time; candidates extended per level),
  ``depth`` (offline and tps: longest revision chain from an implemented candidate, default 3), ``max_steps`` /
  ``max_tokens`` (coding/tps: agent turns per iteration, answer tokens per turn), ``context_tokens`` (coding/tps: the
  proposer model's context window, which the agent's transcript is compacted to fit; default the client's, else
  32768), ``agent_seconds`` (coding/tps with a coding-agent CLI: the wall-time limit of one of its sessions, default
  1800).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from metaharness.errors import ConfigurationError, InputError
from metaharness.models import connect
from metaharness.models.ledger import Ledger
from metaharness.models.protocol import ModelClient
from metaharness.models.spec import parse_spec
from metaharness.proposers.coding import MAX_STEPS, CodingProposer
from metaharness.proposers.engines import EngineClient, is_engine
from metaharness.search.protocol import Proposer
from metaharness.tasks import get_task
from metaharness.tasks.protocol import Task

T = TypeVar("T")

_SELECTIONS = {"": "auto", "-greedy": "greedy", "-random": "random", "-best-of-n": "best_of_n"}
PROPOSER_NAMES: tuple[str, ...] = ("offline", "coding", "tps") + tuple(
    f"tps{suffix}" for suffix in _SELECTIONS if suffix
)
# Old names, still accepted (stored runs and grids hold them), and what each is now (the module docstring).
RENAMED = {
    "base": "coding",
    "offline-greedy": "offline",
    "offline-random": "offline",
    "offline-best-of-n": "offline",
}


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _integer(default: T, least: int | None = 1) -> T:
    """An integer option (>= ``least``; None: no bound); None (when the default) means the proposer chooses."""
    wanted = "an integer" if least is None else f"an integer >= {least}"
    return field(
        default=default, metadata={"wanted": wanted, "ok": lambda v: _whole(v) and (least is None or v >= least)}
    )


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf


def _amount(wanted: str) -> float | None:
    """A finite number > 0, or None (not set)."""
    return field(default=None, metadata={"wanted": wanted, "ok": _positive})


@dataclass(frozen=True)
class ProposerOptions:
    """A proposer's settings (the ``-P`` keys), checked when constructed (``InputError`` with one line).

    ``seed`` and ``workers`` default to the run's seed and the session's workers. Each family has its own class
    (``options_class``); their fields are the keys it takes, their defaults the proposer's."""

    seed: int | None = _integer(None, least=None)
    workers: int | None = _integer(None)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and "ok" in f.metadata and not f.metadata["ok"](value):
                raise InputError(f"Proposer option {f.name} must be {f.metadata['wanted']}, got {value!r}.")

    def given(self) -> dict[str, object]:
        """The settings that differ from the defaults (what a run's ``settings.json`` keeps)."""
        default = type(self)()
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != getattr(default, f.name)
        }

    def to_json(self) -> dict[str, object]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.given().items()}


@dataclass(frozen=True)
class OfflineOptions(ProposerOptions):
    """The ``offline`` proposer's (see the module docstring)."""

    probe_size: int = _integer(0, 0)
    plans: int = _integer(12)
    operators: tuple[str, ...] | None = None
    frontier: int = _integer(2)
    extend: int = _integer(2, 0)
    depth: int = _integer(3)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.operators is not None:
            object.__setattr__(self, "operators", tuple(operator_names(self.operators)))


@dataclass(frozen=True)
class CodingOptions(ProposerOptions):
    """The ``coding`` agent's (see the module docstring)."""

    probe_size: int = _integer(4)
    max_steps: int = _integer(MAX_STEPS)
    max_tokens: int = _integer(4096)
    context_tokens: int | None = _integer(None, 256)
    agent_seconds: float | None = _amount("a number of seconds > 0")


@dataclass(frozen=True)
class TPSOptions(CodingOptions):
    """The ``tps`` proposer's: the coding agent's, with the planning's."""

    probe_size: int = _integer(6)
    plans: int = _integer(4)
    depth: int = _integer(3)


# Every key some proposer takes, in the order messages list them.
OPTION_KEYS = tuple(dict.fromkeys(f.name for kind in (OfflineOptions, TPSOptions) for f in fields(kind)))


def _task(task: Task | str, data_dir: str | Path | None) -> Task:
    if isinstance(task, str):
        return get_task(task, data_dir=data_dir)
    return task


def proposer_name(name: str) -> str:
    """The proposer's name now: ``name`` (any case, spaces around) or, for an old name, its new one (`RENAMED`)."""
    plain = name.strip().lower()
    return RENAMED.get(plain, plain)


def renamed_note(name: str) -> str | None:
    """What to say to a user who typed an old proposer name (None for a current one)."""
    plain = name.strip().lower()
    if plain not in RENAMED:
        return None
    why = "" if plain == "base" else " (the selection is --evaluation's)"
    return (
        f"--proposer {plain} is deprecated: it is the {RENAMED[plain]} proposer{why}; use --proposer {RENAMED[plain]}."
    )


def _split(name: str) -> tuple[str, str]:
    name = proposer_name(name)
    if name in ("offline", "coding"):
        return name, "auto"
    for suffix, selection in _SELECTIONS.items():
        if name == "tps" + suffix:
            return "tps", selection
    raise InputError(f"Unknown proposer '{name}': use one of {', '.join(PROPOSER_NAMES)}.")


def options_class(name: str) -> type[ProposerOptions]:
    """The options the proposer ``name`` takes; raises InputError for an unknown proposer."""
    family, _ = _split(name.strip().lower())
    return {"offline": OfflineOptions, "coding": CodingOptions, "tps": TPSOptions}[family]


def proposer_keys(name: str) -> tuple[str, ...]:
    """The settings (``-P`` keys) the proposer ``name`` takes; raises InputError for an unknown proposer."""
    return tuple(f.name for f in fields(options_class(name)))


def needs_model(name: str) -> bool:
    """True for the proposers that drive a coding agent with a proposer model (``coding``, ``tps`` and its
    baselines)."""
    return _split(name.strip().lower())[0] != "offline"


def proposer_options(name: str, given: Mapping[str, object] | ProposerOptions | None = None) -> ProposerOptions:
    """The options of the proposer ``name`` from user-given settings (``-P KEY=VALUE``; ``operators`` may be a
    comma-separated string): constructing them is the check. Raises ``InputError`` with one line for an
    unknown key (with the closest known one), a key this proposer does not take, an unknown operator or a bad
    value. Options already constructed must be this proposer's kind."""
    kind = options_class(name)
    if isinstance(given, ProposerOptions):
        if type(given) is not kind:
            raise InputError(f"{type(given).__name__} are not the options of the {name} proposer ({kind.__name__}).")
        return given
    keys = proposer_keys(name)
    for key in given or {}:
        if key not in keys:
            if key in OPTION_KEYS:
                raise InputError(
                    f"Proposer option '{key}' does not apply to the {name} proposer; it takes: {', '.join(keys)}."
                )
            close = difflib.get_close_matches(key, OPTION_KEYS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise InputError(f"Unknown proposer option '{key}'; known: {', '.join(keys)}{hint}.")
    values: dict[str, Any] = dict(given or {})  # each is checked by the options' own __post_init__
    return kind(**values)


def operator_names(value: object) -> list[str]:
    """``operators`` as a list of known operator names (a comma-separated string is split); InputError otherwise."""
    # Here: the agent sandbox imports this package; the operator library loads when it is asked for.
    from metaharness.proposers.operators import OPERATOR_NAMES

    names = [n.strip() for n in value.split(",")] if isinstance(value, str) else value
    if isinstance(names, tuple):
        names = list(names)
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise InputError(f"Proposer option operators takes operator names separated by commas, got {value!r}.")
    unknown = [n for n in names if n not in OPERATOR_NAMES]
    if unknown:
        raise InputError(f"Unknown operator(s) {', '.join(unknown)}: use one of {', '.join(OPERATOR_NAMES)}.")
    return names


def connect_proposer(spec: str, ledger: Ledger | None = None) -> ModelClient:
    """The proposer model a spec names: a coding-agent CLI engine (``claude-code[:MODEL]``, ``codex[:MODEL]``) or
    a model (``metaharness.models.connect``), counting into ``ledger``."""
    if is_engine(spec):
        return EngineClient(spec, ledger=ledger)

    return connect(spec, ledger=ledger)


def check_proposer_model(name: str, spec: str) -> None:
    """Before a run starts: ``spec`` is a valid proposer model for the proposer ``name``; an engine is installed
    and logged in (``check``). InputError / ConfigurationError
    with one line otherwise."""
    if not is_engine(spec):
        parse_spec(spec)
        return
    if not needs_model(name):
        raise InputError(
            f"{spec} is a coding-agent engine for the coding and tps proposers, not for {name}; use --proposer coding "
            "or --proposer tps with it."
        )
    EngineClient(spec).check()


def get_proposer(
    name: str,
    options: Mapping[str, object] | ProposerOptions | None = None,
    *,
    task: Task | str,
    task_model: ModelClient | str | None = None,
    model: ModelClient | str | None = None,
    run_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    seed: int = 0,
    workers: int | None = None,
    **settings: object,
) -> Proposer:
    """Build the proposer ``name`` (see the module docstring): ``options`` (``proposer_options``; keyword
    ``settings`` are more of them) over the session's ``seed`` and ``workers``."""
    family, selection = _split(name.strip().lower())
    if settings:
        given = options.given() if isinstance(options, ProposerOptions) else dict(options or {})
        options = {**given, **settings}
    checked = proposer_options(name, options)
    seed = seed if checked.seed is None else checked.seed
    workers = workers if checked.workers is None else checked.workers
    task = _task(task, data_dir)
    if isinstance(checked, OfflineOptions):
        # Here: `python -m metaharness.proposers.agent_sandbox` imports this package; a proposer loads when built.
        from metaharness.proposers.offline import OfflineProposer

        if task_model is None:
            raise ConfigurationError("The offline proposer probes with the task model: pass task_model=.")
        return OfflineProposer(
            task,
            task_model,
            name=proposer_name(name),
            probe_dir=str(Path(run_dir) / "proposer" / "probe") if run_dir else None,
            plans=checked.plans,
            extend=checked.extend,
            depth=checked.depth,
            frontier=checked.frontier,
            probe_size=checked.probe_size,
            operators=list(checked.operators) if checked.operators else None,
            seed=seed,
            workers=workers,
        )
    assert isinstance(checked, CodingOptions)
    if model is None:
        raise ConfigurationError(
            f"The {name} proposer drives a coding agent and needs a proposer model with tool calling: pass "
            "--proposer-model (e.g. anthropic:claude-sonnet-4-5, openai:MODEL@http://host:port/v1, or a coding-agent "
            "CLI: claude-code, codex), or use --proposer offline, which needs no hosted model."
        )
    if isinstance(model, str):
        model = connect_proposer(model)
    if checked.agent_seconds is not None and hasattr(model, "seconds"):
        model.seconds = float(checked.agent_seconds)
    if not isinstance(checked, TPSOptions):
        return CodingProposer(
            model,
            task,
            task_model,
            run_dir=run_dir,
            probe_size=checked.probe_size,
            seed=seed,
            workers=workers,
            max_steps=checked.max_steps,
            max_tokens=checked.max_tokens,
            context_tokens=checked.context_tokens,
        )

    from metaharness.proposers.tps import TPSProposer  # here, as OfflineProposer above

    return TPSProposer(
        model,
        task,
        task_model,
        selection=selection,
        plans=checked.plans,
        depth=checked.depth,
        probe_size=checked.probe_size,
        run_dir=run_dir,
        seed=seed,
        workers=workers,
        max_steps=checked.max_steps,
        max_tokens=checked.max_tokens,
        context_tokens=checked.context_tokens,
    )
