"""Operators that use the training answers as a label vocabulary: snapping, neighbour votes, fallbacks, hints.

They fit tasks whose answers are labels (``AnswerProfile.labelled``), of any number, single or multi-label
(LawBench answers are sets of charges). The generated code is stdlib only and reads the vocabulary from the
``train`` the harness receives, so it works on any split it is given. Answers keep the format the metric reads:
the span inside ``[TAG]...[/TAG]`` or ``[TAG]...<eoa>`` is replaced, tags kept; an untagged answer is replaced
whole, labels joined with ``;``.

The votes expose their settings as module constants (``VOTE_K``, ``VOTE_MODEL_WEIGHT``, ``VOTE_SHARE``,
``INDEX_NGRAM``), so later revisions tune them and a reader finds them at the top of the file. The self-tuning vote
(``tuned_vote``) writes its settings as ``"auto"``: the harness chooses them in ``__init__`` by leave-one-out on
the training examples it receives (``harness_label_models._TunedVote``), so they come from the training split,
not from the few validation examples a search scores; a grid operator may still fix one of them.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from metaharness.proposers.operators.base import AnswerProfile, Operator
from metaharness.proposers.operators.editing import (
    SourceEditor,
    add_constants,
    append_helpers,
    constant,
    prepend_to_init,
    set_constant,
    wrap_predict,
)
from metaharness.proposers.operators.harness_code import definitions
from metaharness.proposers.operators.settings import grid, step

# The harness code each kind of revision appends (with what it uses; ``harness_code``).
LABEL_HELPERS = definitions("_known_labels", "_snap_labels", "_answer_span", "_with_answer")
NEIGHBOUR_HELPERS = definitions("_NeighbourIndex", "_label_counts", "_neighbour_votes", "_prior_corrected", "_decide")
TUNED_VOTE_HELPERS = definitions("_TunedVote", "_decide")
# A setting a block chooses itself from the training examples it receives.
AUTO = "auto"

# Method-body prefix of the label post-processors: leave a non-text answer alone, else read the labels it names.
LABELLED_ANSWER = (
    "labels = self._label_set\n"
    "if not labels or not isinstance(answer, str):\n"
    "    return answer\n"
    "start, end = _answer_span(answer)\n"
    "said = _snap_labels(answer[start:end], labels)\n"
)


def labelled(profile: AnswerProfile) -> bool:
    return profile.labelled


def multi_label(profile: AnswerProfile) -> bool:
    return profile.multi_label


def _no_wrap(tag: str) -> Callable[[SourceEditor], bool]:
    return lambda editor: f"_predict_before_{tag}" not in editor.source


def _snap(source: str) -> tuple[str, str]:
    source = wrap_predict(source, "snap", LABELLED_ANSWER + "return _with_answer(answer, said) if said else answer\n")
    source = with_labels(source)
    return append_helpers(source, LABEL_HELPERS), (
        "snap every label the answer names to the closest training label (normalised, then fuzzy match)"
    )


def with_labels(source: str, *lines: str) -> str:
    """Build the training label vocabulary (``self._label_set``) and ``lines`` in ``__init__``, each assignment
    only where the harness does not assign its ``self.<attribute>`` yet, with the helpers they need."""
    wanted = ["self._label_set = _known_labels(train)\n", *lines]
    missing = "".join(line for line in wanted if f"{_attribute(line)} =" not in source)
    return prepend_to_init(source, missing) if missing else source


def _attribute(line: str) -> str:
    """The ``self.<name>`` an assignment line sets (its first such target)."""
    node = ast.parse(line).body[0]
    assert isinstance(node, ast.Assign)
    return next(ast.unparse(t) for t in node.targets if isinstance(t, ast.Attribute))


def _with_neighbours(source: str) -> str:
    """Build the training labels, their counts and the neighbour index in ``__init__``, with the helpers they
    need (a harness that already has an index keeps it)."""
    source = with_labels(
        source,
        "self._neighbours = _NeighbourIndex(train, INDEX_NGRAM, INDEX_SCORING)\n",
        "self._label_counts = _label_counts(train)\n",
    )
    source = add_constants(
        source,
        {"INDEX_NGRAM": 0, "INDEX_SCORING": "tfidf"},
        "Neighbour index: terms (0 = words, n > 0 = character n-grams), similarity ('tfidf' cosine or 'bm25').",
    )
    return append_helpers(source, {**LABEL_HELPERS, **NEIGHBOUR_HELPERS})


def _vote_operator(k: int, model_weight: float) -> Callable[[str], tuple[str, str]]:
    def apply(source: str) -> tuple[str, str]:
        source = wrap_predict(
            source,
            "vote",
            LABELLED_ANSWER + "neighbours = self._neighbours.nearest(x, VOTE_K)\n"
            "votes = _prior_corrected(_neighbour_votes(neighbours, VOTE_POWER), self._label_counts, VOTE_PRIOR)\n"
            "voted = _decide(votes, said, VOTE_MODEL_WEIGHT, VOTE_SHARE)\n"
            "return _with_answer(answer, voted) if voted else answer\n",
        )
        source = add_constants(
            source,
            {"VOTE_K": k, "VOTE_MODEL_WEIGHT": model_weight, "VOTE_SHARE": 1.0, "VOTE_POWER": 1.0, "VOTE_PRIOR": 0.0},
            "Neighbour vote: neighbours asked, weight of the model's own answer, share of the top vote kept, "
            "similarity power (0: one vote each), label-frequency correction (0: none).",
        )
        source = _with_neighbours(source)
        return source, (
            f"vote between the model's answer (weight {model_weight} x the top vote) and the labels of the {k} most "
            "similar training examples (TF-IDF)"
        )

    return apply


def _tuned_vote_operator(model_weight: float) -> Callable[[str], tuple[str, str]]:
    """A vote whose settings are "auto": ``_TunedVote`` chooses them by leave-one-out on the ``train`` it gets."""

    def apply(source: str) -> tuple[str, str]:
        source = wrap_predict(
            source,
            "vote",
            LABELLED_ANSWER + "voted = _decide(self._vote.scores(x), said, VOTE_MODEL_WEIGHT, self._vote.share)\n"
            "return _with_answer(answer, voted) if voted else answer\n",
        )
        source = add_constants(
            source,
            {
                "VOTE_K": AUTO,
                "VOTE_MODEL_WEIGHT": model_weight,
                "VOTE_SHARE": AUTO,
                "VOTE_POWER": AUTO,
                "VOTE_PRIOR": AUTO,
            },
            "Neighbour vote: neighbours asked, weight of the model's own answer, share of the top vote kept, "
            "similarity power, label-frequency correction; 'auto': chosen by leave-one-out on the training examples.",
        )
        source = add_constants(
            source,
            {"INDEX_NGRAM": AUTO, "INDEX_SCORING": "tfidf"},
            "Neighbour index: terms (0 = words, n > 0 = character n-grams, 'auto': chosen with the vote), similarity.",
        )
        source = with_labels(
            source,
            "self._vote = _TunedVote(train, INDEX_NGRAM, VOTE_K, VOTE_POWER, VOTE_SHARE, INDEX_SCORING, VOTE_PRIOR)\n",
            "self._neighbours = self._vote.index\n",
        )
        source = append_helpers(source, {**LABEL_HELPERS, **TUNED_VOTE_HELPERS})
        return source, (
            f"vote between the model's answer (weight {model_weight} x the top vote) and the labels of the nearest "
            "training examples, with terms, K, similarity power, frequency correction and label-set share chosen by "
            "leave-one-out on the training examples"
        )

    return apply


def _neighbour_fallback(source: str) -> tuple[str, str]:
    source = wrap_predict(
        source,
        "fallback",
        LABELLED_ANSWER + "if said:\n"
        "    return _with_answer(answer, said)\n"
        "nearest = self._neighbours.nearest(x, 1)\n"
        "return _with_answer(answer, _label_atoms(nearest[0][1])) if nearest else answer\n",
    )
    source = _with_neighbours(source)
    return source, "when the answer names no known label, answer with the labels of the most similar training example"


def _label_hint(source: str) -> tuple[str, str]:
    source = prepend_to_init(source, "lm = _LabelHintLM(lm, _known_labels(train))\n")
    source = append_helpers(source, {**LABEL_HELPERS, **definitions("_LabelHintLM")})
    return source, "add the list of possible answers (distinct training labels) to every system prompt"


def _balanced_order(source: str) -> tuple[str, str]:
    source = prepend_to_init(source, "train = _label_round_robin(train)\n")
    source = append_helpers(
        source,
        {
            "_label_round_robin": '''
def _label_round_robin(train):
    """Training examples reordered round-robin over their answers, so any prefix covers the labels evenly."""
    from collections import defaultdict

    groups = defaultdict(list)
    for item in train:
        groups[str(item["target"]).strip()].append(item)
    queues = list(groups.values())
    ordered = []
    while any(queues):
        for queue in queues:
            if queue:
                ordered.append(queue.pop(0))
    return ordered
''',
        },
    )
    return source, "order the training examples round-robin over labels (few-shot prefixes cover every label)"


def _uses_train(editor: SourceEditor) -> bool:
    init = editor.method("__init__")
    names = {n.id for n in ast.walk(init) if isinstance(n, ast.Name)} if init else set()
    return "train" in names and not editor.defines("_label_round_robin")


# ---------------------------------------------------------------- tuning a vote once it is there


def _vote_step(
    operator: str,
    name: str,
    new: Callable[[float], float],
    applies: Callable[[float], bool],
    phrase: str,
    fits: Callable[[AnswerProfile], bool] = labelled,
) -> Operator:
    """A relative step of a vote setting (present once a vote was added)."""
    return step(operator, name, new, applies, phrase, fits)


def _vote_grid(
    prefix: str, name: str, values: tuple[object, ...], phrase: str, fits: Callable[[AnswerProfile], bool] = labelled
) -> tuple[Operator, ...]:
    """One operator per value of a vote setting."""
    return grid(prefix, name, values, phrase, fits, describe=str)


def _index_ngram(n: int) -> Operator:
    def can(editor: SourceEditor) -> bool:
        value = constant(editor, "INDEX_NGRAM")
        return isinstance(value, int) and value != n or value == AUTO

    def terms(value: object) -> str:
        if value == AUTO:
            return "terms chosen by leave-one-out"
        return f"character {value}-grams" if value else "words"

    def apply(source: str) -> tuple[str, str]:
        old = constant(source, "INDEX_NGRAM")
        return set_constant(source, "INDEX_NGRAM", n), f"neighbour index on {terms(n)} instead of {terms(old)}"

    return Operator(
        f"char_{n}grams" if n else "word_terms",
        f"neighbour retrieval over {terms(n)} (n-grams: Chinese, SMILES, spelling variants)",
        can,
        apply,
        post_processing=True,
        family="index_terms",
    )


def _has_label_list(editor: SourceEditor) -> bool:
    return not any(editor.defines(name) for name in ("LABELS", "_LabelHintLM"))


def _small_vocabulary(profile: AnswerProfile) -> bool:
    """A label list in the prompt only helps when it is short enough to read (and to fit the context)."""
    return 1 < profile.labels <= 60


# The vote settings' grids: a new vote takes K from the middle three and the weight from every other value.
VOTE_K_GRID = (1, 3, 5, 9, 15, 25)
VOTE_WEIGHT_GRID = (0.0, 0.25, 0.5, 1.0, 2.0)
VOTE_SHARE_GRID = (1.0, 0.75, 0.5, 0.3)
INDEX_NGRAM_GRID = (0, 2, 3, 4)
# Tuned similarity: how much closer neighbours count, and how much a label's training frequency is discounted.
VOTE_POWER_GRID = (0.0, 1.0, 2.0, 4.0)
VOTE_PRIOR_GRID = (0.0, 0.5, 1.0)
INDEX_SCORING_GRID = ("tfidf", "bm25")

LABEL_OPERATORS: tuple[Operator, ...] = (
    Operator(
        "snap_to_labels",
        "output normalisation and fuzzy matching of every answer label to a known label",
        _no_wrap("snap"),
        _snap,
        fits=labelled,
        post_processing=True,
    ),
    *(
        Operator(
            "neighbour_vote" if (k, w) == (5, 0.5) else f"neighbour_vote_k{k}_w{w}",
            f"vote with the labels of the {k} nearest training examples (the model's answer at weight {w})",
            _no_wrap("vote"),
            _vote_operator(k, w),
            fits=labelled,
            post_processing=True,
            family="neighbour_vote",
        )
        for k in VOTE_K_GRID[1:4]
        for w in VOTE_WEIGHT_GRID[::2]
    ),
    *(
        Operator(
            "tuned_vote" + ("" if w == 0.0 else f"_w{w}"),
            "a neighbour vote that chooses its terms, K, similarity power, frequency correction and label-set share "
            f"by leave-one-out on the training examples (the model's answer at weight {w})",
            _no_wrap("vote"),
            _tuned_vote_operator(w),
            fits=labelled,
            post_processing=True,
            family="tuned_vote",
        )
        for w in VOTE_WEIGHT_GRID[:3:2]
    ),
    Operator(
        "neighbour_fallback",
        "nearest training example's labels when the answer names no label",
        _no_wrap("fallback"),
        _neighbour_fallback,
        fits=labelled,
        post_processing=True,
    ),
    _vote_step("more_voters", "VOTE_K", lambda k: k * 2, lambda k: k < 40, "twice as many voting neighbours"),
    _vote_step("fewer_voters", "VOTE_K", lambda k: max(1, k // 2), lambda k: k > 1, "half as many voting neighbours"),
    *_vote_grid("vote_k", "VOTE_K", VOTE_K_GRID, "voting neighbours:"),
    _vote_step(
        "model_free_vote", "VOTE_MODEL_WEIGHT", lambda w: 0.0, lambda w: w > 0, "the model's answer not counted"
    ),
    _vote_step(
        "trust_model", "VOTE_MODEL_WEIGHT", lambda w: max(1.0, w * 2), lambda w: w < 1, "model answer counts more"
    ),
    *_vote_grid("vote_weight_", "VOTE_MODEL_WEIGHT", VOTE_WEIGHT_GRID, "weight of the model's answer in the vote:"),
    _vote_step(
        "label_sets",
        "VOTE_SHARE",
        lambda s: 0.5,
        lambda s: s > 0.5,
        "answer every label with at least half the top vote (a label set)",
        fits=lambda p: p.multi_label,
    ),
    *_vote_grid(
        "vote_share_", "VOTE_SHARE", VOTE_SHARE_GRID, "share of the top vote kept:", fits=lambda p: p.multi_label
    ),
    *(_index_ngram(n) for n in INDEX_NGRAM_GRID),
    *_vote_grid("vote_power_", "VOTE_POWER", VOTE_POWER_GRID, "similarity power of a neighbour's vote (0: one each):"),
    *_vote_grid("vote_prior_", "VOTE_PRIOR", VOTE_PRIOR_GRID, "votes divided by label frequency to the power"),
    *_vote_grid("index_", "INDEX_SCORING", INDEX_SCORING_GRID, "neighbour similarity:"),
    Operator(
        "label_list",
        "the list of possible answers in the system prompt (vocabularies of up to 60 labels)",
        _has_label_list,
        _label_hint,
        fits=_small_vocabulary,
    ),
    Operator(
        "balanced_shots",
        "few-shot ordering: round-robin over labels",
        _uses_train,
        _balanced_order,
        fits=lambda p: labelled(p) and not p.multi_label,
    ),
)
