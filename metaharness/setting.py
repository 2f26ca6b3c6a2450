"""A run setting, declared once (`Setting`): its name, type, default, help and check, and how a user gives it.

Each setting is declared beside the type that holds it (``metaharness.budget.BUDGET_SETTINGS``,
``metaharness.search.settings.SEARCH_SETTINGS``, ``metaharness.runner.settings.RUN_SETTINGS``); that type takes
its field's default from the declaration and runs its check when it is made. Everything else is derived from the
declarations: the command line's options (``metaharness.cli.options.run_setting_options``), the Python API's
keyword arguments (``SettingsChange``, ``run_config``, ``optimize``) and the keys of a run's ``settings.json``.

>>> limit = Setting("val_limit", int, None, "Search on the first N validation examples only.", at_least(1),
...                 flag="--val-limit", shown_default="all")
>>> limit.check(0)
Traceback (most recent call last):
...
metaharness.errors.InputError: --val-limit must be a whole number >= 1, got 0.
>>> limit.check(None), limit.option_names()
(None, ['--val-limit'])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from metaharness.errors import InputError


@dataclass(frozen=True)
class Setting:
    """One setting. ``name``: its field in the type that holds it, its key in ``settings.json``, its keyword in
    the Python API; ``type``: its value's type (a setting not given is ``None``); ``default``: what a new run takes
    when it is not given (``None``: decided when the run resolves its settings, said in ``shown_default``);
    ``help``: one sentence for the command line; ``check(value)``: raises ``InputError`` naming the flag for a bad
    value (``None``, not given, always passes).

    How a user gives it: ``flag`` (None: no option of its own; e.g. the task's source, which ``--dataset`` sets),
    ``short``, ``metavar``, ``parse`` (the option's text to a value; typer converts by ``type`` without one),
    ``repeat`` (an option given several times, read by ``parse`` as a list), ``spreads`` (``parse`` gives several
    settings at once, as a mapping of their names to values), ``minimum`` (the least a number option takes,
    checked by the command line before anything runs), ``parts`` (other flags that each give one entry of a
    budget: flag -> (entry, parse, help, metavar)), ``old_flags`` (earlier names of the flag, still taken, with a
    deprecation note) and ``old_keys`` (the keys older runs stored it under in ``settings.json``)."""

    name: str
    type: Any
    default: Any
    help: str
    check_value: Callable[[Any, str], None] | None = None
    flag: str | None = None
    short: str | None = None
    metavar: str | None = None
    parse: Callable[[Any], Any] | None = None
    shown_default: str | None = None
    repeat: bool = False
    spreads: bool = False
    minimum: float | None = None
    parts: Mapping[str, tuple[str, Callable[[str], Any], str, str]] | None = None
    old_flags: tuple[str, ...] = ()
    old_keys: tuple[str, ...] = ()

    def check(self, value: object) -> None:
        """Raise ``InputError`` (naming the flag) when ``value`` is not a valid value of this setting."""
        if value is not None and self.check_value is not None:
            self.check_value(value, self.flag or "--" + self.name.replace("_", "-"))

    def option_names(self) -> list[str]:
        """The flags that give it on the command line (its own and its short form)."""
        return [name for name in (self.flag, self.short) if name]


def at_least(least: int) -> Callable[[Any, str], None]:
    """The check of a whole number >= ``least``."""

    def check(value: object, flag: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InputError(f"{flag} must be a whole number >= {least}, got {value!r}.")

    return check


def seconds(value: object, flag: str) -> None:
    """The check of a number of seconds > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise InputError(f"{flag} must be a number of seconds > 0, got {value!r}.")


def by_name(settings: tuple[Setting, ...]) -> dict[str, Setting]:
    """The settings of a declaration list by name; a name declared twice is a bug (ValueError)."""
    out: dict[str, Setting] = {}
    for setting in settings:
        if setting.name in out:
            raise ValueError(f"the setting {setting.name} is declared twice")
        out[setting.name] = setting
    return out
