"""Operators that change one module constant a revision added (``VOTE_K``, ``CLASSIFIER``, ...).

``step`` makes one operator that moves a numeric setting relative to its value (twice as many voters); ``grid``
makes one operator per value of a grid (``vote_k1``, ``vote_k3``, ...), each setting the constant to that value and
applying wherever the constant exists with another value. Values are literals: numbers, strings, tuples. The
operators of one grid share a family (the constant's name, lower-cased, unless given), so the offline proposer
samples across settings before it tries a second value of one.
"""

from __future__ import annotations

from collections.abc import Callable

from metaharness.proposers.operators.base import AnswerProfile, Operator
from metaharness.proposers.operators.editing import SourceEditor, constant, set_constant

Fits = Callable[[AnswerProfile], bool]


def step(
    operator: str,
    name: str,
    new: Callable[[float], float],
    applies: Callable[[float], bool],
    phrase: str,
    fits: Fits,
    family: str = "",
    post_processing: bool = True,
) -> Operator:
    """The operator ``operator``: set the numeric constant ``name`` to ``new(old)`` where ``applies(old)``."""

    def can(editor: SourceEditor) -> bool:
        value = constant(editor, name)
        return isinstance(value, (int, float)) and not isinstance(value, bool) and applies(float(value))

    def apply(source: str) -> tuple[str, str]:
        old = constant(source, name)
        assert isinstance(old, (int, float))
        value: float = new(float(old))
        value = int(value) if isinstance(old, int) else round(value, 3)
        return set_constant(source, name, value), f"{phrase}: {name} {old} -> {value}"

    return Operator(
        operator, phrase, can, apply, fits=fits, post_processing=post_processing, family=family or name.lower()
    )


def value_name(value: object) -> str:
    """How a value reads in an operator name: ``3``, ``0.5``, ``bm25``, ``2_4`` for ``(2, 4)``."""
    if isinstance(value, tuple):
        return "_".join(value_name(v) for v in value)
    return str(value)


def _like(value: object, old: object) -> object:
    """``value`` written like the number it replaces (an int for an int, a float rounded to 3 places for a float);
    anything else as it is."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(old, int) and not isinstance(old, bool):
            return int(value)
        if isinstance(old, float):
            return round(float(value), 3)
    return value


def grid(
    prefix: str,
    name: str,
    values: tuple[object, ...],
    phrase: str,
    fits: Fits,
    *,
    family: str = "",
    post_processing: bool = True,
    describe: Callable[[object], str] = repr,
    when: Callable[[SourceEditor], bool] = lambda editor: True,
) -> tuple[Operator, ...]:
    """One operator per value: ``<prefix><value>`` sets the constant ``name`` to it, wherever the constant holds
    another value and ``when`` holds (a setting that only matters beside another one)."""

    def make(value: object) -> Operator:
        def can(editor: SourceEditor) -> bool:
            old = constant(editor, name)
            return old is not None and _like(value, old) != old and when(editor)

        def apply(source: str) -> tuple[str, str]:
            old = constant(source, name)
            new = _like(value, old)
            return set_constant(source, name, new), f"{phrase} {describe(value)}: {name} {old!r} -> {new!r}"

        return Operator(
            f"{prefix}{value_name(value)}",
            f"{phrase} {describe(value)}",
            can,
            apply,
            fits=fits,
            post_processing=post_processing,
            family=family or name.lower(),
        )

    return tuple(make(v) for v in values)
