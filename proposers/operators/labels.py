"""Operators that use the training answers as a label vocabulary: snapping, neighbour votes, fallbacks, hints.

They fit tasks whose answers are labels (``AnswerProfile.labelled``), of any number, single or multi-label
(LawBench answers are sets of charges). The generated code is stdlib only and reads the vocabulary from the
``train`` the harness receives, so it works on any split it is given. Answers keep the format the metric reads:
the span inside ``[TAG]...[/TAG]`` or ``[TAG]...<eoa>`` is replaced, tags kept; an untagged answer is replaced
whole, labels joined with ``;``.

The votes expose their settings as module constants (``VOTE_K``, ``VOTE_MODEL_WEIGHT``, ``VOTE_SHARE``,
``INDEX_NGRAM``), so later revisions tune them and a reader finds them at the top of the file.
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

LABEL_HELPERS = {
    "_label_atoms": '''
def _label_atoms(answer):
    """The labels an answer names: split on the first list separator present (; ； , ，), stripped."""
    text = str(answer).strip()
    separator = next((s for s in (";", "；", ",", "，") if s in text), None)
    return [part.strip() for part in (text.split(separator) if separator else [text]) if part.strip()]
''',
    "_known_labels": '''
def _known_labels(train):
    """Every distinct label of the training answers (each label of a multi-label answer counts), any number."""
    return sorted({label for item in train for label in _label_atoms(item["target"])})
''',
    "_answer_span": '''
def _answer_span(text):
    """(start, end) of the answer in ``[TAG]answer[/TAG]`` or ``[TAG]answer<eoa>`` (else after a lone ``[TAG]``),
    else of the whole text."""
    import re

    match = re.search(r"\\[([^\\[\\]/]+)\\](.*?)(?:\\[/\\1\\]|<eoa>)", text, re.S) or re.search(
        r"\\[([^\\[\\]/]+)\\](.*)$", text, re.S
    )
    return (match.start(2), match.end(2)) if match else (0, len(text))
''',
    "_snap_label": '''
def _snap_label(text, labels):
    """The label the text names: exact after normalising, else the longest label mentioned, else the closest
    spelling (difflib ratio >= 0.6), else None."""
    import difflib
    import re

    def norm(value):
        return re.sub(r"[\\s_]+", " ", re.sub(r"[.!?,;:'\\"。！？]+$", "", value.strip().lower()))

    by_norm = {norm(label): label for label in labels}
    said = norm(text)
    if said in by_norm:
        return by_norm[said]
    mentioned = [(said.find(key), -len(key), label) for key, label in by_norm.items() if key and key in said]
    if mentioned:
        return min(mentioned)[2]
    close = difflib.get_close_matches(said, list(by_norm), n=1, cutoff=0.6)
    return by_norm[close[0]] if close else None
''',
    "_snap_labels": '''
def _snap_labels(text, labels):
    """Each label the answer text names, snapped to the vocabulary, in order, without repeats."""
    snapped = [_snap_label(part, labels) for part in _label_atoms(text)]
    return list(dict.fromkeys(label for label in snapped if label))
''',
    "_with_answer": '''
def _with_answer(text, labels):
    """The response with its answer span replaced by ``labels`` joined with ";" (tags kept)."""
    answer = ";".join(labels)
    start, end = _answer_span(text)
    return text[:start] + answer + text[end:] if (start, end) != (0, len(text)) else answer
''',
}

NEIGHBOUR_HELPERS = {
    "_NeighbourIndex": '''
class _NeighbourIndex:
    """TF-IDF cosine over the training inputs; stdlib only. Terms: lower-cased words and single CJK characters,
    or, with ``ngram`` > 0, character n-grams of the text without spaces (Chinese, SMILES)."""

    def __init__(self, train, ngram=0):
        import math
        from collections import Counter

        self.ngram = ngram
        self.targets = [str(item["target"]).strip() for item in train]
        docs = [Counter(self.tokens(item["input"])) for item in train]
        df = Counter(token for doc in docs for token in doc)
        self.idf = {token: math.log((1 + len(docs)) / (1 + count)) + 1 for token, count in df.items()}
        self.vectors = [self.weigh(doc) for doc in docs]

    def tokens(self, text):
        import re

        if self.ngram > 0:
            chars = re.sub(r"\\s+", "", str(text))
            return [chars[i : i + self.ngram] for i in range(max(1, len(chars) - self.ngram + 1))]
        return re.findall(r"[a-z0-9]+|[^\\x00-\\x7f]", str(text).lower())

    def weigh(self, counts):
        import math

        vector = {t: c * self.idf.get(t, 1.0) for t, c in counts.items()}
        norm = math.sqrt(sum(v * v for v in vector.values())) or 1.0
        return {t: v / norm for t, v in vector.items()}

    def nearest(self, text, k):
        from collections import Counter

        query = self.weigh(Counter(self.tokens(text)))
        sims = [(sum(w * vec.get(t, 0.0) for t, w in query.items()), i) for i, vec in enumerate(self.vectors)]
        return [(sim, self.targets[i]) for sim, i in sorted(sims, reverse=True)[:k]]
''',
    "_vote": '''
def _vote(neighbours, said, model_weight, share):
    """Labels by weighted vote: each neighbour's labels get its similarity, the model's own labels get
    ``model_weight`` x the top vote; every label within ``share`` of the winner's votes is kept (1.0: the
    winner only, as a single-label answer; lower: a label set)."""
    from collections import Counter

    votes = Counter()
    for sim, target in neighbours:
        for label in _label_atoms(target):
            votes[label] += sim
    top = max(votes.values(), default=1.0)
    for label in said:
        votes[label] += model_weight * top
    if not votes:
        return []
    best = votes.most_common(1)[0][1]
    return [label for label, count in votes.most_common() if count >= share * best - 1e-12]
''',
}

# Method-body prefix of the label post-processors: leave a non-text answer alone, else read the labels it names.
_LABELLED_ANSWER = (
    "labels = self._label_set\n"
    "if not labels or not isinstance(answer, str):\n"
    "    return answer\n"
    "start, end = _answer_span(answer)\n"
    "said = _snap_labels(answer[start:end], labels)\n"
)


def labelled(profile: AnswerProfile) -> bool:
    return profile.labelled


def _no_wrap(tag: str) -> Callable[[SourceEditor], bool]:
    return lambda editor: f"_predict_before_{tag}" not in editor.source


def _snap(source: str) -> tuple[str, str]:
    source = wrap_predict(source, "snap", _LABELLED_ANSWER + "return _with_answer(answer, said) if said else answer\n")
    source = prepend_to_init(source, "self._label_set = _known_labels(train)\n")
    return append_helpers(source, LABEL_HELPERS), (
        "snap every label the answer names to the closest training label (normalised, then fuzzy match)"
    )


def _with_neighbours(source: str) -> str:
    """Build the training labels and the neighbour index in ``__init__``, with the helpers they need."""
    source = prepend_to_init(
        source, "self._neighbours = _NeighbourIndex(train, INDEX_NGRAM)\nself._label_set = _known_labels(train)\n"
    )
    source = add_constants(source, {"INDEX_NGRAM": 0}, "Neighbour index terms: 0 = words, n > 0 = character n-grams.")
    return append_helpers(source, {**LABEL_HELPERS, **NEIGHBOUR_HELPERS})


def _vote_operator(k: int, model_weight: float) -> Callable[[str], tuple[str, str]]:
    def apply(source: str) -> tuple[str, str]:
        source = wrap_predict(
            source,
            "vote",
            _LABELLED_ANSWER + "neighbours = self._neighbours.nearest(x, VOTE_K)\n"
            "voted = _vote(neighbours, said, VOTE_MODEL_WEIGHT, VOTE_SHARE)\n"
            "return _with_answer(answer, voted) if voted else answer\n",
        )
        source = add_constants(
            source,
            {"VOTE_K": k, "VOTE_MODEL_WEIGHT": model_weight, "VOTE_SHARE": 1.0},
            "Neighbour vote: neighbours asked, weight of the model's own answer, share of the top vote kept.",
        )
        source = _with_neighbours(source)
        return source, (
            f"vote between the model's answer (weight {model_weight} x the top vote) and the labels of the {k} most "
            "similar training examples (TF-IDF)"
        )

    return apply


def _neighbour_fallback(source: str) -> tuple[str, str]:
    source = wrap_predict(
        source,
        "fallback",
        _LABELLED_ANSWER + "if said:\n"
        "    return _with_answer(answer, said)\n"
        "nearest = self._neighbours.nearest(x, 1)\n"
        "return _with_answer(answer, _label_atoms(nearest[0][1])) if nearest else answer\n",
    )
    source = _with_neighbours(source)
    return source, "when the answer names no known label, answer with the labels of the most similar training example"


def _label_hint(source: str) -> tuple[str, str]:
    source = prepend_to_init(source, "lm = _LabelHintLM(lm, _known_labels(train))\n")
    source = append_helpers(
        source,
        {
            **LABEL_HELPERS,
            "_LabelHintLM": '''
class _LabelHintLM:
    """The task model with the list of possible answers added to every system prompt."""

    def __init__(self, lm, labels):
        self._lm = lm
        self._hint = "Possible answers: " + "; ".join(labels) + "." if labels else ""

    def __getattr__(self, name):
        return getattr(self._lm, name)

    def __call__(self, prompt_or_messages, *, system=None, **options):
        if self._hint:
            system = (system + "\\n\\n" if system else "") + self._hint
        return self._lm(prompt_or_messages, system=system, **options)
''',
        },
    )
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


def _tune(
    operator: str,
    name: str,
    new: Callable[[float], float],
    applies: Callable[[float], bool],
    phrase: str,
    fits: Callable[[AnswerProfile], bool] = labelled,
    family: str = "",
) -> Operator:
    """The operator ``operator``: change the numeric vote setting ``name`` (present once a vote was added)."""

    def can(editor: SourceEditor) -> bool:
        value = constant(editor, name)
        return isinstance(value, (int, float)) and applies(float(value))

    def apply(source: str) -> tuple[str, str]:
        old = constant(source, name)
        assert isinstance(old, (int, float))
        value: float = new(float(old))
        value = int(value) if isinstance(old, int) else round(value, 3)
        return set_constant(source, name, value), f"{phrase}: {name} {old} -> {value}"

    return Operator(operator, phrase, can, apply, fits=fits, post_processing=True, family=family or name.lower())


def _grid(
    prefix: str,
    name: str,
    values: tuple[float, ...],
    phrase: str,
    fits: Callable[[AnswerProfile], bool] = labelled,
) -> tuple[Operator, ...]:
    """One ``_tune`` operator per value: ``<prefix><value>`` sets the vote setting ``name`` to it."""

    def to(value: float) -> Callable[[float], float]:
        return lambda old: value

    def other_than(value: float) -> Callable[[float], bool]:
        return lambda old: old != value

    return tuple(_tune(f"{prefix}{v}", name, to(v), other_than(v), f"{phrase} {v}", fits) for v in values)


def _index_ngram(n: int) -> Operator:
    def can(editor: SourceEditor) -> bool:
        value = constant(editor, "INDEX_NGRAM")
        return isinstance(value, int) and value != n

    def terms(value: object) -> str:
        return f"character {value}-grams" if value else "words"

    def apply(source: str) -> tuple[str, str]:
        old = constant(source, "INDEX_NGRAM")
        return set_constant(source, "INDEX_NGRAM", n), f"neighbour index on {terms(n)} instead of {terms(old)}"

    return Operator(
        f"char_{n}grams" if n else "word_terms",
        f"neighbour retrieval over {terms(n)} (n-grams: text without word spaces, Chinese, SMILES)",
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
    Operator(
        "neighbour_fallback",
        "nearest training example's labels when the answer names no label",
        _no_wrap("fallback"),
        _neighbour_fallback,
        fits=labelled,
        post_processing=True,
    ),
    _tune("more_voters", "VOTE_K", lambda k: k * 2, lambda k: k < 40, "twice as many voting neighbours"),
    _tune("fewer_voters", "VOTE_K", lambda k: max(1, k // 2), lambda k: k > 1, "half as many voting neighbours"),
    *_grid("vote_k", "VOTE_K", VOTE_K_GRID, "voting neighbours:"),
    _tune("model_free_vote", "VOTE_MODEL_WEIGHT", lambda w: 0.0, lambda w: w > 0, "the model's answer not counted"),
    _tune("trust_model", "VOTE_MODEL_WEIGHT", lambda w: max(1.0, w * 2), lambda w: w < 1, "model answer counts more"),
    *_grid("vote_weight_", "VOTE_MODEL_WEIGHT", VOTE_WEIGHT_GRID, "weight of the model's answer in the vote:"),
    _tune(
        "label_sets",
        "VOTE_SHARE",
        lambda s: 0.5,
        lambda s: s > 0.5,
        "answer every label with at least half the top vote (a label set)",
        fits=lambda p: p.multi_label,
    ),
    *_grid("vote_share_", "VOTE_SHARE", VOTE_SHARE_GRID, "share of the top vote kept:", fits=lambda p: p.multi_label),
    *(_index_ngram(n) for n in INDEX_NGRAM_GRID),
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
