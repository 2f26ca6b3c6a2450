"""Operators whose task-model calls are constrained to the label set read from the training data.

The harness code is ``harness_constrained``'s (every answer a JSON-schema enum of the labels, or an array of
them for multi-label tasks, through ``lm.json``; a failed constrained call falls back to the plain one):

- ``constrained_labels``: every model call the harness makes answers with training labels only (the harness's
  own prompt, a constrained answer);
- ``label_shortlist``: the same, constrained to the ``SHORTLIST_SIZE`` labels a classifier trained on the training
  examples ranks first for this input, listed in the system prompt: the model chooses among likely labels;
- ``label_primed_query``: the model call replaced by the Meta-Harness paper's label-primed query (the valid
  labels, one retrieved example per label, contrastive pairs of similar examples with different labels);
- ``draft_verify``: the model call replaced by the paper's draft-then-verify (a draft label from the nearest
  examples, then confirmers and challengers of it in a second call).

The last two replace what the harness asks the model (the innermost ``predict``, ``editing.replace_model_call``)
and keep every wrapper around it (snapping, votes, a classifier's mix). They answer with labels written as the
training answers write them, the form the metric reads. Long label lists are cut to fit ``lm.context_window``
(likeliest labels first), and an enum whose schema would be too large is not sent.
"""

from __future__ import annotations

from collections.abc import Callable

from metaharness.proposers.operators.base import COMBINED_MARK, Operator
from metaharness.proposers.operators.editing import (
    SourceEditor,
    add_constants,
    append_helpers,
    model_call_method,
    replace_model_call,
    wrap_predict_around,
)
from metaharness.proposers.operators.harness_code import definitions
from metaharness.proposers.operators.labels import labelled, with_labels
from metaharness.proposers.operators.settings import grid

CONSTRAINED_LM = (
    "lm = self._constrained = _ConstrainedLM(lm, _known_labels(train), _multi_label(train), _label_joiner(train))\n"
)
SHORTLIST_GRID = (2, 3, 5, 8)
PRIMED_PAIRS_GRID = (0, 1, 2, 4)
SHOT_CHARS_GRID = (150, 300, 600)
DRAFT_K_GRID = (3, 5, 9)
DRAFT_CHECKS_GRID = (1, 2, 3)
DRAFT_BY_GRID = ("model", "neighbours")
# Blocks that replace the model call: a harness gets at most one of them.
REPLACERS = ("_LabelPrimedQuery(", "_DraftVerify(")


def _calls_model(editor: SourceEditor) -> bool:
    """The harness has a model-calling method whose body starts on a line of its own (so it can be replaced)."""
    method = model_call_method(editor)
    return method is not None and method.body[0].lineno > method.lineno


def _constrained(source: str) -> tuple[str, str]:
    source = with_labels(source, CONSTRAINED_LM)
    source = append_helpers(source, definitions("_ConstrainedLM", "_known_labels", "_multi_label", "_label_joiner"))
    return source, "constrain every model answer to the training labels (a JSON-schema enum of them)"


def _no_constraint(editor: SourceEditor) -> bool:
    return "_ConstrainedLM(" not in editor.source and not any(r in editor.source for r in REPLACERS)


def _shortlist(source: str) -> tuple[str, str]:
    source = wrap_predict_around(
        source,
        "shortlist",
        "scores = self._shortlister.scores(x)\n"
        "self._constrained.allowed = sorted(scores, key=lambda label: (-scores[label], label))[:SHORTLIST_SIZE]\n"
        "return self._predict_before_shortlist(x)\n",
    )
    source = add_constants(
        source, {"SHORTLIST_SIZE": 3}, "The model chooses among this many labels, the classifier's likeliest."
    )
    source = with_labels(source, CONSTRAINED_LM, "self._shortlister = _LabelClassifier(train, 'centroid', 'auto')\n")
    source = append_helpers(
        source, definitions("_ConstrainedLM", "_known_labels", "_multi_label", "_label_joiner", "_LabelClassifier")
    )
    return source, (
        "the model chooses among the 3 labels a classifier trained on the training examples ranks first "
        "(constrained answer, the shortlist in the system prompt)"
    )


def _no_shortlist(editor: SourceEditor) -> bool:
    return "_predict_before_shortlist" not in editor.source and not any(r in editor.source for r in REPLACERS)


def _replacer(
    name: str, make: str, constants: dict[str, object], comment: str, summary: str
) -> Callable[[str], tuple[str, str]]:
    def apply(source: str) -> tuple[str, str]:
        source = replace_model_call(source, f"return self._label_joiner.join(self._{name}.answer(x))\n")
        source = add_constants(source, constants, comment)
        source = with_labels(source, f"self._{name} = {make}\n", "self._label_joiner = _label_joiner(train)\n")
        helper = make.split("(")[0]
        return append_helpers(source, definitions(helper, "_label_joiner", "_known_labels")), summary

    return apply


def _no_replacer(editor: SourceEditor) -> bool:
    """A harness that asks the model itself (not one already replaced, nor two candidates combined, whose own
    ``predict`` only combines its parents' answers)."""
    return _calls_model(editor) and not any(r in editor.source for r in (*REPLACERS, COMBINED_MARK))


CONSTRAINED_OPERATORS: tuple[Operator, ...] = (
    Operator(
        "constrained_labels",
        "every model answer constrained to the training labels (JSON-schema enum)",
        _no_constraint,
        _constrained,
        fits=labelled,
        family="constrained_labels",
    ),
    Operator(
        "label_shortlist",
        "the model chooses among the labels a classifier ranks first (constrained)",
        _no_shortlist,
        _shortlist,
        fits=labelled,
        family="constrained_labels",
    ),
    *grid("shortlist_size_", "SHORTLIST_SIZE", SHORTLIST_GRID, "labels the model chooses among:", labelled),
    Operator(
        "label_primed_query",
        "the paper's label-primed query: labels listed, one example per label, contrastive pairs (constrained)",
        _no_replacer,
        _replacer(
            "primed",
            "_LabelPrimedQuery(lm, train, PRIMED_SHOT_CHARS, PRIMED_PAIRS)",
            {"PRIMED_SHOT_CHARS": 300, "PRIMED_PAIRS": 2},
            "Label-primed query: characters of each example shown, contrastive pairs of examples.",
            "ask the model the label-primed query: every label that fits listed, one similar example per label, "
            "then similar examples with different labels; answer constrained to the labels",
        ),
        fits=labelled,
        family="query_shape",
    ),
    *grid("primed_pairs_", "PRIMED_PAIRS", PRIMED_PAIRS_GRID, "contrastive pairs in the label-primed query:", labelled),
    *grid("primed_chars_", "PRIMED_SHOT_CHARS", SHOT_CHARS_GRID, "characters of each primed example:", labelled),
    Operator(
        "draft_verify",
        "the paper's draft-then-verify: a draft label, then confirmers and challengers in a second call",
        _no_replacer,
        _replacer(
            "verify",
            "_DraftVerify(lm, train, DRAFT_K, DRAFT_CHECKS, DRAFT_SHOT_CHARS, DRAFT_BY)",
            {"DRAFT_K": 5, "DRAFT_CHECKS": 2, "DRAFT_SHOT_CHARS": 300, "DRAFT_BY": "model"},
            "Draft-then-verify: nearest examples for the draft, confirmers and challengers shown, characters of "
            "each, who drafts ('model': a first call; 'neighbours': their vote).",
            "draft a label from the nearest examples, then show the model confirmers and challengers of the draft "
            "in a second call; answers constrained to the labels",
        ),
        fits=labelled,
        family="query_shape",
    ),
    *grid("draft_k_", "DRAFT_K", DRAFT_K_GRID, "nearest examples for the draft:", labelled),
    *grid("draft_checks_", "DRAFT_CHECKS", DRAFT_CHECKS_GRID, "confirmers and challengers shown:", labelled),
    *grid("draft_by_", "DRAFT_BY", DRAFT_BY_GRID, "the draft from", labelled, describe=str),
    *grid("draft_chars_", "DRAFT_SHOT_CHARS", SHOT_CHARS_GRID, "characters of each draft example:", labelled),
)
