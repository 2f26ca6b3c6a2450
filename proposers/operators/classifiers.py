"""Operators that add a label classifier trained on the training examples, mixed with the model's answer.

A better model-free label predictor than the neighbour vote: ``harness_label_models._LabelClassifier`` (nearest
centroid, multinomial naive Bayes or softmax regression over TF-IDF terms, trained in ``__init__``; multi-label
answers train every label they name). The revision wraps ``predict`` like the vote does: the classifier's scores,
corrected for label frequency (``CLASSIFIER_PRIOR``), plus the model's own labels at ``CLASSIFIER_MODEL_WEIGHT``
times the best score; every label within ``CLASSIFIER_SHARE`` of the best is answered. At weight 0 the answer does
not depend on the model at all. Only post-processing: the model's calls are the parent's.

Settings are module constants that later revisions tune (one operator per value of each grid):

- ``CLASSIFIER``: ``"centroid"``, ``"bayes"``, ``"logistic"`` or ``"auto"`` (the kind and, with terms "auto", the
  terms chosen by 3-fold cross-validation on the training examples the harness receives: ``classifier_auto``);
- ``CLASSIFIER_TERMS``: ``"auto"`` (words, character 2- or 3-grams, chosen by leave-one-out on the training
  examples), 0 (words), n (character n-grams) or (lo, hi);
- ``CLASSIFIER_EPOCHS`` (logistic), ``CLASSIFIER_PRIOR``, ``CLASSIFIER_MODEL_WEIGHT``, ``CLASSIFIER_SHARE``.
"""

from __future__ import annotations

from collections.abc import Callable

from metaharness.proposers.operators.base import Operator
from metaharness.proposers.operators.editing import SourceEditor, add_constants, append_helpers, constant, wrap_predict
from metaharness.proposers.operators.harness_code import definitions
from metaharness.proposers.operators.labels import (
    AUTO,
    LABEL_HELPERS,
    LABELLED_ANSWER,
    labelled,
    multi_label,
    with_labels,
)
from metaharness.proposers.operators.settings import grid

CLASSIFIER_KINDS = ("centroid", "bayes", "logistic")
# A new classifier takes one of these weights of the model's answer; the grid below tunes it.
CLASSIFIER_NEW_WEIGHTS = (0.0, 0.5)
CLASSIFIER_WEIGHT_GRID = (0.0, 0.25, 0.5, 1.0, 2.0)
CLASSIFIER_TERMS_GRID: tuple[object, ...] = ("auto", 0, 2, 3, 4, (2, 4))
CLASSIFIER_EPOCHS_GRID = (5, 10, 20)
CLASSIFIER_PRIOR_GRID = (0.0, 0.5, 1.0)
CLASSIFIER_SHARE_GRID = (1.0, 0.75, 0.5, 0.3)
CLASSIFIER_HELPERS = definitions("_LabelClassifier", "_label_counts", "_prior_corrected", "_decide")

TAG = "classifier"


def _add_classifier(kind: str, model_weight: float) -> Callable[[str], tuple[str, str]]:
    def apply(source: str) -> tuple[str, str]:
        source = wrap_predict(
            source,
            TAG,
            LABELLED_ANSWER
            + "scores = _prior_corrected(self._classifier.scores(x), self._label_counts, CLASSIFIER_PRIOR)\n"
            "chosen = _decide(scores, said, CLASSIFIER_MODEL_WEIGHT, CLASSIFIER_SHARE)\n"
            "return _with_answer(answer, chosen) if chosen else answer\n",
        )
        source = add_constants(
            source,
            {
                "CLASSIFIER": kind,
                "CLASSIFIER_TERMS": "auto",
                "CLASSIFIER_EPOCHS": 10,
                "CLASSIFIER_PRIOR": 0.0,
                "CLASSIFIER_MODEL_WEIGHT": model_weight,
                "CLASSIFIER_SHARE": 1.0,
            },
            "Label classifier trained on the training examples: kind, terms, SGD passes (logistic), label-frequency "
            "correction, weight of the model's answer, share of the best score kept.",
        )
        source = with_labels(
            source,
            "self._classifier = _LabelClassifier(train, CLASSIFIER, CLASSIFIER_TERMS, CLASSIFIER_EPOCHS)\n",
            "self._label_counts = _label_counts(train)\n",
        )
        source = append_helpers(source, {**LABEL_HELPERS, **CLASSIFIER_HELPERS})
        return source, (
            f"mix the model's answer (weight {model_weight} x the best score) with {_kind(kind)} trained on the "
            "training examples"
        )

    return apply


def _kind(kind: object) -> str:
    if kind == AUTO:
        return "a label classifier (its kind and terms chosen by 3-fold cross-validation)"
    return f"a {kind} label classifier"


def _kind_name(kind: object) -> str:
    return "chosen by cross-validation" if kind == AUTO else str(kind)


def _no_classifier(editor: SourceEditor) -> bool:
    return f"_predict_before_{TAG}" not in editor.source


def _terms(value: object) -> str:
    if value == "auto":
        return "words or character n-grams chosen by leave-one-out"
    if value == 0:
        return "words"
    if isinstance(value, tuple):
        return f"character {value[0]}- to {value[1]}-grams"
    return f"character {value}-grams"


def _logistic(editor: SourceEditor) -> bool:
    return constant(editor, "CLASSIFIER") == "logistic"


CLASSIFIER_OPERATORS: tuple[Operator, ...] = (
    *(
        Operator(
            f"classifier_{kind}" + ("" if weight == 0.0 else f"_w{weight}"),
            f"{_kind(kind)} trained on the training examples (the model's answer at weight {weight})",
            _no_classifier,
            _add_classifier(kind, weight),
            fits=labelled,
            post_processing=True,
            family="tuned_classifier" if kind == AUTO else "label_classifier",
        )
        for kind in (*CLASSIFIER_KINDS, AUTO)
        for weight in CLASSIFIER_NEW_WEIGHTS
    ),
    *grid(
        "classifier_kind_", "CLASSIFIER", (*CLASSIFIER_KINDS, AUTO), "label classifier:", labelled, describe=_kind_name
    ),
    *grid(
        "classifier_terms_", "CLASSIFIER_TERMS", CLASSIFIER_TERMS_GRID, "classifier terms:", labelled, describe=_terms
    ),
    *grid(
        "classifier_epochs_",
        "CLASSIFIER_EPOCHS",
        CLASSIFIER_EPOCHS_GRID,
        "logistic classifier SGD passes:",
        labelled,
        when=_logistic,
    ),
    *grid(
        "classifier_prior_",
        "CLASSIFIER_PRIOR",
        CLASSIFIER_PRIOR_GRID,
        "classifier scores divided by label frequency to the power",
        labelled,
    ),
    *grid(
        "classifier_weight_",
        "CLASSIFIER_MODEL_WEIGHT",
        CLASSIFIER_WEIGHT_GRID,
        "weight of the model's answer against the classifier:",
        labelled,
    ),
    *grid("classifier_share_", "CLASSIFIER_SHARE", CLASSIFIER_SHARE_GRID, "share of the best score kept:", multi_label),
)
