"""The run options the commands take, derived from the settings' declarations (``metaharness.setting.Setting``;
``metaharness.runner.settings.SETTINGS``), and the few options that are the commands' own.

``run_setting_options(*names)`` gives a command one option per run setting named: its flag, short form, metavar,
the least it takes, its help and its default as a new run takes it, all read from the setting's declaration; the
flags that give one entry of a budget (``--max-cost``, ``--max-tokens``: ``Setting.parts``); and each old name of a
flag (hidden, taken with a deprecation note). The command gets the settings given as one ``SettingsChange``
(``settings``); two flags that disagree are an error, never a silent override.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Mapping
from functools import wraps
from typing import Any, TypeVar

import typer

from metaharness.budget import Budget, parse_usd
from metaharness.cli.output import console
from metaharness.errors import InputError
from metaharness.runner.settings import SETTINGS, SettingsChange
from metaharness.setting import Setting

Command = TypeVar("Command", bound=Callable[..., Any])


def run_setting_options(
    *names: str, help: Mapping[str, str] | None = None, shown: Mapping[str, str] | None = None
) -> Callable[[Command], Command]:
    """Add the run settings ``names`` to a command as options (the module docstring); ``help`` and ``shown`` (by
    setting name) replace a declaration's help or default in words where the command means something of its own by
    it. The command is called with its own parameters and ``settings``, the ``SettingsChange`` given."""
    declared = [SETTINGS[name] for name in names]

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        own = [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for p in signature.parameters.values()
            if p.name != "settings"
        ]
        options: list[inspect.Parameter] = []
        for setting in declared:
            options.extend(_parameters(setting, (help or {}).get(setting.name), (shown or {}).get(setting.name)))

        @wraps(command)
        def run(**given: Any) -> Any:
            settings = _change(declared, given)
            return command(settings=settings, **given)

        parameters = [*options, *own]  # the run settings first, as a user reads them
        run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        return run  # type: ignore[return-value]

    return decorate


def _parameters(setting: Setting, help: str | None, shown: str | None) -> list[inspect.Parameter]:
    """The command-line parameters of ``setting``: its option, the options of its parts, its old flags (hidden)."""
    if setting.flag is None:
        return []
    text = help or setting.help
    literal = None if setting.default is None or isinstance(setting.default, Budget) else setting.default
    said = shown or setting.shown_default
    if said is None and literal is not None:
        said = f"{literal:g}" if isinstance(literal, float) else str(literal)
    if setting.repeat:
        option = typer.Option([], *setting.option_names(), help=text, show_default=said or False)
        out = [_keyword(setting.name, option, list[str])]
    else:
        option = typer.Option(
            None,
            *setting.option_names(),
            min=setting.minimum,
            metavar=setting.metavar,
            help=text,
            show_default=said or False,
        )
        out = [_keyword(setting.name, option, _typed(setting))]
    for flag, (_entry, _parse, part_help, metavar) in (setting.parts or {}).items():
        option = typer.Option(None, flag, metavar=metavar, help=part_help, show_default="no cap")
        out.append(_keyword(_param(flag), option, str | None))
    for old in setting.old_flags:
        annotation = list[str] if setting.repeat else _typed(setting)
        out.append(
            _keyword(_param(old, "old_"), typer.Option([] if setting.repeat else None, old, hidden=True), annotation)
        )
    return out


def _typed(setting: Setting) -> Any:
    """The type typer converts the option's text to: the setting's own for a number or a name, text for one it
    parses itself (``Setting.parse``)."""
    if setting.parse is None and setting.type in (int, float, str):
        return setting.type | None
    return str | None


def _keyword(name: str, default: Any, annotation: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def _param(flag: str, prefix: str = "") -> str:
    return prefix + flag.lstrip("-").replace("-", "_")


def _change(declared: list[Setting], given: dict[str, Any]) -> SettingsChange:
    """The settings the declared options gave (popped from ``given``); InputError for two flags that disagree."""
    values: dict[str, Any] = {}
    for setting in declared:
        if setting.flag is None:
            continue
        raw = given.pop(setting.name)
        for old in setting.old_flags:
            raw = renamed(setting.flag, raw, old, given.pop(_param(old, "old_")))
        if raw not in (None, []):
            value = setting.parse(raw) if setting.parse is not None else raw
            if setting.spreads:
                values.update(value)
            else:
                values[setting.name] = value
        for flag, (entry, parse, _help, _metavar) in (setting.parts or {}).items():
            part = given.pop(_param(flag))
            if part is None:
                continue
            number, budget = parse(part), values.get(setting.name) or Budget()
            if math.isfinite(getattr(budget, entry)) and getattr(budget, entry) != number:
                raise InputError(f"{setting.flag} {entry}= and {flag} disagree: give one of them.")
            values[setting.name] = dataclasses.replace(budget, **{entry: number})
    change = SettingsChange(**values)
    change.check_agreement()
    return change


def renamed(flag: str, value: Any, old: str, old_value: Any) -> Any:
    """``flag``'s value, or that of ``old``, its old name, with a deprecation note; both given: InputError (an
    option not given is ``None``, a repeatable one ``[]``)."""
    if old_value in (None, []):
        return value
    if value not in (None, []):
        raise InputError(f"{old} is the old name of {flag}: give one of them.")
    console().print(f"[yellow]note: {old} is deprecated; it is {flag}[/]")
    return old_value


def max_cost_option(help: str) -> Any:
    """``--max-cost USD``, checked by ``parse_usd`` (default: no cap)."""
    return typer.Option(
        None,
        "--max-cost",
        parser=parse_usd,
        metavar="USD",
        help=help,
        show_default="no cap",
    )


def dask_scheduler_option(help: str) -> Any:
    """``--dask-scheduler ADDRESS`` (default: evaluate here)."""
    return typer.Option(None, "--dask-scheduler", metavar="ADDRESS", help=help, show_default="evaluate here")


def ray_address_option(help: str) -> Any:
    """``--ray-address ADDRESS`` (default: evaluate here)."""
    return typer.Option(None, "--ray-address", metavar="ADDRESS", help=help, show_default="evaluate here")


def iters_option(default: int | None, help: str, shown: str | None = None) -> Any:
    """``--iters N``: a whole number >= 0; ``shown`` says what the command takes without it when ``default`` is None."""
    return typer.Option(default, "--iters", min=0, help=help, show_default=shown if shown is not None else True)


def data_dir_option() -> Any:
    """``--data-dir DIR``: where the paper's datasets' splits are (else downloaded)."""
    return typer.Option(None, "--data-dir", help="Folder with the task's splits.", show_default="download them")
