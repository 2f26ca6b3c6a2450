"""BM25 retrieval over tool names and descriptions, so an agent sees a short candidate list per plan step.

Plain Python (Okapi BM25, k1 = 1.2, b = 0.75). Tool names are split on underscores, so ``get_order_buyer``
matches a step that says "buyer of the order".
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "at",
        "by",
        "for",
        "from",
        "in",
        "into",
        "is",
        "it",
        "of",
        "on",
        "or",
        "the",
        "to",
        "with",
        "that",
        "this",
        "its",
        "step",
        "use",
    ]
)


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens with a crude plural strip; underscores and digits split words."""
    words = re.findall(r"[a-z]+", text.lower().replace("_", " "))
    return [
        w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in words if w not in _STOPWORDS
    ]


class BM25Index:
    """An index over documents; ``top`` returns the ids of the best-scoring documents for a query."""

    def __init__(self, documents: Sequence[str], *, k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        self.docs = [Counter(tokenize(d)) for d in documents]
        self.lengths = [sum(c.values()) for c in self.docs]
        self.avg_length = sum(self.lengths) / max(len(self.docs), 1)
        df: Counter[str] = Counter()
        for counts in self.docs:
            df.update(counts.keys())
        n = len(self.docs)
        self.idf = {term: math.log(1 + (n - f + 0.5) / (f + 0.5)) for term, f in df.items()}
        self.postings: dict[str, list[int]] = {}
        for i, counts in enumerate(self.docs):
            for term in counts:
                self.postings.setdefault(term, []).append(i)

    def scores(self, query: str) -> dict[int, float]:
        scores: dict[int, float] = {}
        for term in set(tokenize(query)):
            idf = self.idf.get(term)
            if idf is None:
                continue
            for i in self.postings[term]:
                tf = self.docs[i][term]
                norm = tf + self.k1 * (1 - self.b + self.b * self.lengths[i] / self.avg_length)
                scores[i] = scores.get(i, 0.0) + idf * tf * (self.k1 + 1) / norm
        return scores

    def top(self, query: str, k: int) -> list[int]:
        """Ids of the ``k`` best documents, best first (ties broken by document order)."""
        scores = self.scores(query)
        return sorted(scores, key=lambda i: (-scores[i], i))[:k]
