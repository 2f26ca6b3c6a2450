"""A library of program transformations of harness source: the revisions the offline proposer plans over.

Every operator is a real edit of a harness file (the contract of ``metaharness.candidates.protocol``:
``class Harness`` with ``__init__(self, lm, train)`` and ``predict(self, x)``), located with ``ast`` and spliced
into the original text (``.editing``), so comments and layout survive and ``git diff`` between a candidate and its
parent shows exactly the revision. Contract of an ``Operator``:

- ``applies(source, profile=None) -> bool``: whether it can edit this harness (and, given the task's
  ``AnswerProfile``, whether the revision means something for the task's answers);
- ``apply(source) -> Revision``: the complete new source (it always compiles) and a one-line summary; raises
  ``metaharness.errors.InputError`` when the operator does not apply;
- ``post_processing``: the revision changes only what happens after the model answers, so evaluating it reuses
  its parent's cached model calls.

Operators compose: each edits the output of the previous one (a vote, then more voters, then character n-grams),
and every chain of applicable operators is a valid harness. The families, one module each:

- ``.labels``: label vocabularies of any size from the training answers, single or multi-label: snapping,
  neighbour votes (and their settings: K, the model's weight, share, terms, BM25, similarity power,
  label-frequency correction), fallbacks, a label list in the prompt, label-balanced shots;
- ``.classifiers``: a label classifier trained on the training examples (nearest centroid, naive Bayes, softmax
  regression), mixed with the model's answer by a weight, and its settings;
- ``.constrained``: model calls constrained to the training labels (a JSON-schema enum), a shortlist the model
  chooses from, the Meta-Harness paper's label-primed query and draft-then-verify;
- ``.combine``: two-parent revisions (below);
- ``.prompts``: answer-format sentence, answer length, retrieval size;
- ``.smiles``: canonical SMILES and model-free retro rules for molecule answers.

``.settings`` makes the operators that set one module constant (a grid per setting); the code a revision adds to a
harness is real, tested, stdlib-only Python in the ``harness_*`` modules, copied by name (``.harness_code``).

Two-parent revisions (``Combination``, in ``COMBINATIONS``, not in ``OPERATORS``): ``combines(source, other)``
says whether two harness sources can be combined (distinct, neither a combination already);
``partner(other_name, other_source) -> Operator`` binds the second parent and returns a plain one-parent operator
named ``<name>+<other_name>`` (its family, ``fits`` and ``post_processing`` the combination's), whose ``apply(source)``
writes one harness holding both. Whoever offers combinations (the offline proposer) picks the partner and binds it;
everything downstream sees one-parent operators only. ``get_operator("<name>+<id>")`` gives the bound operator
without the partner's source (right name, family and flags; it applies to nothing), which is what a recorded chain
needs. ``post_processing`` of a combination means: its calls are its two parents' calls.

>>> src = open("candidates/symptom2disease/zero_shot.py").read()  # doctest: +SKIP
>>> get_operator("snap_to_labels").apply(src).summary  # doctest: +SKIP
'snap every label the answer names to the closest training label (normalised, then fuzzy match)'
"""

from __future__ import annotations

from metaharness.errors import InputError
from metaharness.proposers.operators.base import (
    AnswerProfile,
    Combination,
    Operator,
    Revision,
    answer_profile,
    label_atoms,
)
from metaharness.proposers.operators.classifiers import CLASSIFIER_OPERATORS
from metaharness.proposers.operators.combine import COMBINATIONS, COMBINE_OPERATORS
from metaharness.proposers.operators.constrained import CONSTRAINED_OPERATORS
from metaharness.proposers.operators.editing import harness_editor
from metaharness.proposers.operators.labels import LABEL_OPERATORS
from metaharness.proposers.operators.prompts import PROMPT_OPERATORS
from metaharness.proposers.operators.smiles import SMILES_OPERATORS

OPERATORS: tuple[Operator, ...] = (
    *LABEL_OPERATORS,
    *CLASSIFIER_OPERATORS,
    *CONSTRAINED_OPERATORS,
    *COMBINE_OPERATORS,
    *PROMPT_OPERATORS,
    *SMILES_OPERATORS,
)
# Every name a restriction of the library may use: the one-parent operators and the two-parent combinations.
OPERATOR_NAMES = tuple(op.name for op in OPERATORS) + tuple(c.name for c in COMBINATIONS)

__all__ = [
    "COMBINATIONS",
    "OPERATORS",
    "OPERATOR_NAMES",
    "AnswerProfile",
    "Combination",
    "Operator",
    "Revision",
    "answer_profile",
    "applicable",
    "get_operator",
    "label_atoms",
]


def get_operator(name: str) -> Operator:
    """The operator ``name``; for a two-parent revision bound to a partner (``combine_vote+c015``), the bound
    operator without the partner's source: its name, family and flags are right, it applies to nothing."""
    base, bound, partner = name.partition("+")
    if bound:
        for combination in COMBINATIONS:
            if combination.name == base:
                return combination.partner(partner, "")
    for op in OPERATORS:
        if op.name == name:
            return op
    known = ", ".join(OPERATOR_NAMES)
    raise InputError(f"Unknown operator '{name}': use one of {known} (a combination bound to a partner: NAME+ID).")


def applicable(source: str, profile: AnswerProfile | None = None) -> list[Operator]:
    """The operators that can edit this harness source (for a task with ``profile``'s answers, when given)."""
    editor = harness_editor(source)
    if editor is None:
        return []
    return [op for op in OPERATORS if op._applies(editor) and (profile is None or op.fits(profile))]
