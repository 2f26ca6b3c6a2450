"""The simple baseline a search must beat: a nearest-neighbour vote over the training labels, with no model at all.

For a small task model this is a strong baseline: the training data alone often says more than the model does. A
search whose best does not beat it on held-out examples found nothing the training data did not already say
(the loop's judgement, ``metaharness.search.judgement``, shows both side by side).

`NeighbourVote.fit(task)` tunes itself on the training examples only, by leave-one-out with the task's own metric:
which terms index the texts (lower-cased words, or character n-grams of the text without spaces, n = 2..4), how
many neighbours vote (``KS``) and, when answers are label sets, how large a share of the top vote a label needs to
be kept. Votes are TF-IDF cosine similarities. A training answer is split into labels the way multi-label metrics
read them (the first of ``;`` ``；`` ``,`` ``，`` present); a single-label answer is one label. It is trusted code
of the framework (no harness runs here) and calls no model, so judging it costs nothing.

>>> from metaharness.tasks.protocol import Example
>>> class Colours:
...     name, description = "colours", ""
...     def load(self, split):
...         rows = [("a red apple", "red"), ("a red cherry", "red"), ("green grass", "green"), ("green moss", "green")]
...         return [Example(f"{split}-{i}", x, y) for i, (x, y) in enumerate(rows)]
...     def score(self, prediction, example):
...         return {"primary": float(prediction == example.target)}
...     def metric_names(self):
...         return ["primary"]
>>> vote = NeighbourVote.fit(Colours())
>>> vote.predict("a red rose"), vote.settings["loo_score"]
('red', 1.0)
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from metaharness.tasks.protocol import Example, Task

TERMS = ("words", "chars2", "chars3", "chars4")
KS = (1, 3, 5, 9, 15)
SHARES = (1.0, 0.5)  # label sets: the share of the top vote a label needs (1.0: the winner only)
LABEL_SEPARATORS = (";", "；", ",", "，")

Vector = dict[str, float]


def tokens(text: str, terms: str) -> list[str]:
    """The terms of ``text``: lower-cased words (and single CJK characters), or character n-grams (``charsN``) of
    the text without white space."""
    if terms == "words":
        return re.findall(r"[a-z0-9]+|[^\x00-\x7f]", text.lower())
    n = int(terms[-1])
    chars = re.sub(r"\s+", "", text.lower())
    return [chars[i : i + n] for i in range(max(1, len(chars) - n + 1))]


def labels_of(answer: str) -> tuple[list[str], str]:
    """The labels an answer names and the separator it joins them with (single-label answers: one label)."""
    text = answer.strip()
    separator = next((s for s in LABEL_SEPARATORS if s in text), "")
    parts = [p.strip() for p in text.split(separator)] if separator else [text]
    return [p for p in parts if p], separator or ";"


class _Index:
    """TF-IDF vectors of the training inputs under one kind of terms."""

    def __init__(self, texts: Sequence[str], terms: str) -> None:
        self.terms = terms
        counts = [Counter(tokens(t, terms)) for t in texts]
        df = Counter(term for c in counts for term in c)
        self.idf = {term: math.log((1 + len(counts)) / (1 + n)) + 1 for term, n in df.items()}
        self.vectors = [self.weigh(c) for c in counts]

    def weigh(self, counts: Counter[str]) -> Vector:
        vector = {t: n * self.idf.get(t, 1.0) for t, n in counts.items()}
        norm = math.sqrt(sum(v * v for v in vector.values())) or 1.0
        return {t: v / norm for t, v in vector.items()}

    def similarities(self, query: Vector) -> list[float]:
        return [sum(w * vec.get(t, 0.0) for t, w in query.items()) for vec in self.vectors]


@dataclass
class NeighbourVote:
    """A fitted vote (see the module docstring): ``settings`` says what leave-one-out chose and what it scored."""

    train: list[Example]
    index: _Index
    k: int
    share: float
    separator: str
    settings: dict[str, object]

    @classmethod
    def fit(cls, task: Task) -> NeighbourVote:
        """Tuned on ``task``'s training examples by leave-one-out with its metric (ties: the earlier setting)."""
        train = task.load("train")
        if len(train) < 2:
            raise ValueError("a neighbour vote needs two training examples or more")
        separator = Counter(labels_of(e.target)[1] for e in train).most_common(1)[0][0]
        multi = sum(len(labels_of(e.target)[0]) > 1 for e in train) >= max(2, len(train) // 10)
        best: tuple[float, str, int, float] | None = None
        for terms in TERMS:
            index = _Index([e.input for e in train], terms)
            ranked = [_ranked(index.similarities(v), skip=i) for i, v in enumerate(index.vectors)]
            for k in KS:
                for share in SHARES if multi else (1.0,):
                    answers = [_vote(train, ranked[i][:k], share, separator) for i in range(len(train))]
                    scores = [float(task.score(a, e).get("primary", 0.0)) for a, e in zip(answers, train, strict=True)]
                    score = sum(scores) / len(train)
                    if best is None or score > best[0] + 1e-12:
                        best = (score, terms, k, share)
        assert best is not None
        score, terms, k, share = best
        settings: dict[str, object] = {"terms": terms, "k": k, "share": share, "loo_score": round(score, 4)}
        return cls(train, _Index([e.input for e in train], terms), k, share, separator, settings)

    @classmethod
    def scorer(cls, task: Task) -> Callable[[Sequence[str]], tuple[list[float], dict[str, object]]]:
        """A function scoring the vote (fitted on first use) on ``task``'s validation examples by id: their primary
        scores in the order asked, and the settings it chose (the loop's ``Baseline``)."""
        fitted: list[NeighbourVote] = []

        def score(ids: Sequence[str]) -> tuple[list[float], dict[str, object]]:
            if not fitted:
                fitted.append(cls.fit(task))
            vote, by_id = fitted[0], {e.id: e for e in task.load("val")}
            return [float(task.score(vote.predict(by_id[i].input), by_id[i]).get("primary", 0.0)) for i in ids], dict(
                vote.settings
            )

        return score

    def predict(self, text: str) -> str:
        query = self.index.weigh(Counter(tokens(text, self.index.terms)))
        return _vote(self.train, _ranked(self.index.similarities(query))[: self.k], self.share, self.separator)


def _ranked(similarities: list[float], skip: int | None = None) -> list[tuple[float, int]]:
    """(similarity, training index), most similar first (ties: the earlier example), without ``skip``."""
    return sorted(((s, i) for i, s in enumerate(similarities) if i != skip), key=lambda p: (-p[0], p[1]))


def _vote(train: Sequence[Example], neighbours: Sequence[tuple[float, int]], share: float, separator: str) -> str:
    """The labels of ``neighbours`` weighted by similarity: the winner, and any label within ``share`` of it."""
    votes: dict[str, float] = {}
    first: dict[str, int] = {}
    for rank, (similarity, i) in enumerate(neighbours):
        for label in labels_of(train[i].target)[0]:
            votes[label] = votes.get(label, 0.0) + max(similarity, 1e-9)
            first.setdefault(label, rank)
    if not votes:
        return ""
    top = max(votes.values())
    kept = sorted(
        (label for label, v in votes.items() if v >= share * top - 1e-12), key=lambda x: (-votes[x], first[x])
    )
    return separator.join(kept) if share < 1.0 else kept[0]
