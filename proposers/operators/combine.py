"""Two-parent revisions: one harness made of two good candidates, their answers combined.

The new file holds both parents' sources as string constants (``FIRST``: the candidate revised; ``SECOND``: its
partner), each executed into a namespace of its own and constructed on the same ``lm`` and ``train``
(``harness_pairing``), so it makes only calls its parents make: where both were evaluated, it replays free from
their recorded calls. How the answers combine:

- ``combine_fallback`` (any task): the first parent's answer; the second's where the first fails, answers no
  text, or (label tasks) names no training label;
- ``combine_vote`` (label tasks): the labels both name win; where they disagree, a classifier trained on the
  training examples breaks the tie (each parent's labels add ``COMBINE_WEIGHT`` times the classifier's best
  score to the classifier's scores); ``combine_weight_<w>`` tunes the weight.

The proposer picks the partner (``Combination.partner``); see the package docstring for the contract.
"""

from __future__ import annotations

import ast

from metaharness.proposers.operators.base import Combination, Operator
from metaharness.proposers.operators.editing import append_helpers
from metaharness.proposers.operators.harness_code import definitions
from metaharness.proposers.operators.labels import labelled
from metaharness.proposers.operators.settings import grid

COMBINE_WEIGHT_GRID = (0.5, 1.0, 2.0)


def literal(text: str) -> str:
    """``text`` as a Python string literal that reads well in a file: triple-quoted raw text where that gives the
    text back exactly, else ``repr``."""
    for quote in ("'''", '"""'):
        candidate = f"r{quote}{text}{quote}"
        try:
            if ast.literal_eval(candidate) == text:
                return candidate
        except (SyntaxError, ValueError):
            continue
    return repr(text)


def combined(
    first: str, second: str, partner: str, how: str, constants: dict[str, object], init: str, body: str
) -> str:
    """The combined harness file: a docstring saying ``how``, the parents, ``constants``, a ``Harness`` whose
    ``__init__`` loads both and runs ``init``, and whose ``predict`` runs ``body`` (both unindented)."""
    settings = "".join(f"{name} = {value!r}\n" for name, value in constants.items())
    indent = "        "
    source = (
        f'"""Two candidates in one harness: {how}\n\n'
        f"FIRST is the candidate this revision started from, SECOND is {partner}; each runs in a namespace of its "
        'own.\n"""\n\n'
        f"FIRST = {literal(first)}\n"
        f"SECOND = {literal(second)}\n"
        f"{settings}\n\n"
        "class Harness:\n"
        "    def __init__(self, lm, train):\n"
        f"{indent}self._first = _load_harness(FIRST, lm, train)\n"
        f"{indent}self._second = _load_harness(SECOND, lm, train)\n"
        + "".join(f"{indent}{line}\n" for line in init.splitlines())
        + "\n    def predict(self, x):\n"
        + "".join(f"{indent}{line}\n" if line else "\n" for line in body.splitlines())
    )
    return source


def _fallback(source: str, other: str, partner: str) -> tuple[str, str]:
    how = f"the first's answer; {partner}'s where the first fails or names no training label"
    new = combined(
        source,
        other,
        partner,
        how,
        {},
        "self._label_set = _known_labels(train)",
        "answer, _ = _answer_or_error(self._first, x)\n"
        "if answer is not None and (not self._label_set or _snap_labels(answer, self._label_set)):\n"
        "    return answer\n"
        "backup, error = _answer_or_error(self._second, x)\n"
        "if backup is not None:\n"
        "    return backup\n"
        "if answer is not None:\n"
        "    return answer\n"
        "raise error",
    )
    helpers = definitions("_load_harness", "_answer_or_error", "_known_labels", "_snap_labels")
    return append_helpers(new, helpers), f"fall back to {partner} where this candidate fails or names no label"


def _vote(source: str, other: str, partner: str) -> tuple[str, str]:
    how = f"the labels both name; where they disagree with {partner}, a training-label classifier decides"
    new = combined(
        source,
        other,
        partner,
        how,
        {"COMBINE_WEIGHT": 1.0},
        "self._label_set = _known_labels(train)\nself._tie_break = _LabelClassifier(train, 'centroid', 'auto')",
        "answers = [a for a, _ in (_answer_or_error(self._first, x), _answer_or_error(self._second, x)) if a]\n"
        "if not answers:\n"
        "    raise ValueError('neither combined harness answered')\n"
        "said = [label for a in answers for label in _snap_labels(a[slice(*_answer_span(a))], self._label_set)]\n"
        "chosen = _decide(self._tie_break.scores(x), said, COMBINE_WEIGHT, 1.0)\n"
        "return _with_answer(answers[0], chosen) if chosen else answers[0]",
    )
    helpers = definitions(
        "_load_harness", "_answer_or_error", "_known_labels", "_snap_labels", "_answer_span", "_with_answer"
    )
    helpers |= definitions("_LabelClassifier", "_decide")
    return append_helpers(new, helpers), (
        f"combine with {partner}: the label both name, else what a training-label classifier prefers of the two"
    )


COMBINATIONS: tuple[Combination, ...] = (
    Combination("combine_fallback", "this candidate, falling back to a partner's answer", _fallback),
    Combination("combine_vote", "this candidate and a partner vote; a classifier breaks ties", _vote, fits=labelled),
)

COMBINE_OPERATORS: tuple[Operator, ...] = grid(
    "combine_weight_", "COMBINE_WEIGHT", COMBINE_WEIGHT_GRID, "weight of each combined answer:", labelled
)
