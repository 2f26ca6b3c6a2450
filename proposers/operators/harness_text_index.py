"""Harness code: text as weighted terms, and the training examples most similar to an input. Stdlib only (copied
into harnesses by ``harness_code.definitions``).

Terms (``_text_terms``): ``ngram`` 0 gives lower-cased words and single CJK characters; ``n`` > 0 character
n-grams of the lower-cased text with runs of whitespace as one space (Chinese, SMILES, spelling variants);
``(lo, hi)`` every n-gram length from lo to hi. The index scores a query against every training input by TF-IDF
cosine (term frequencies damped) or by BM25 (k1 1.5, b 0.75, divided by the best score, so the most similar example
has similarity 1 either way).
"""


def _text_terms(text, ngram):
    """The terms of ``text``: words (``ngram`` 0), character n-grams (n) or all n-grams from lo to hi ((lo, hi))."""
    import re

    if not ngram:
        return re.findall(r"[a-z0-9]+|[^\x00-\x7f]", str(text).lower())
    lo, hi = (ngram, ngram) if isinstance(ngram, int) else ngram
    chars = re.sub(r"\s+", " ", str(text).lower())
    return [chars[i : i + n] for n in range(lo, hi + 1) for i in range(max(1, len(chars) - n + 1))]


class _NeighbourIndex:
    """The training inputs, searchable by similarity: ``scoring`` "tfidf" (cosine) or "bm25"."""

    def __init__(self, train, ngram=0, scoring="tfidf"):
        import math
        from collections import Counter

        self.ngram, self.scoring = ngram, scoring
        self.targets = [str(item["target"]).strip() for item in train]
        docs = [Counter(self.tokens(item["input"])) for item in train]
        df: Counter = Counter()
        for doc in docs:
            df.update(doc.keys())
        n = len(docs)
        self.lengths = [sum(doc.values()) for doc in docs]
        self.mean_length = sum(self.lengths) / max(1, n) or 1.0
        if scoring == "bm25":
            self.idf = {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}
            self.doc_weights = [self._bm25_terms(doc, length) for doc, length in zip(docs, self.lengths, strict=True)]
        else:
            self.idf = {t: math.log((1 + n) / (1 + c)) + 1 for t, c in df.items()}
            # Each input's ``weigh``, in its own term order: what a query of that input weighs (``_best_terms``).
            self.doc_weights = [self.weigh(doc) for doc in docs]
        self.postings: dict = {}  # term -> [(example, weight)]
        for i, weights in enumerate(self.doc_weights):
            for token, weight in weights.items():
                self.postings.setdefault(token, []).append((i, weight))

    def tokens(self, text):
        return _text_terms(text, self.ngram)

    def weigh(self, counts):
        """TF-IDF weights of term counts (term frequency damped: 1 + log count), unit length."""
        import math

        vector = {t: (1 + math.log(c)) * self.idf.get(t, 1.0) for t, c in counts.items()}
        norm = math.sqrt(sum(v * v for v in vector.values())) or 1.0
        return {t: v / norm for t, v in vector.items()}

    def _bm25_terms(self, counts, length):
        k1, b = 1.5, 0.75
        norm = k1 * (1 - b + b * length / self.mean_length)
        return {t: c * (k1 + 1) / (c + norm) for t, c in counts.items()}

    def similarities(self, text):
        """The similarity of ``text`` to every training input, in training order."""
        from collections import Counter

        counts = Counter(self.tokens(text))
        sims = [0.0] * len(self.targets)
        if self.scoring == "bm25":
            for token in counts:
                idf = self.idf.get(token, 0.0)
                for i, weight in self.postings.get(token, ()):
                    sims[i] += idf * weight
            top = max(sims, default=0.0)
            return [s / top for s in sims] if top > 0 else sims
        for token, weight in self.weigh(counts).items():
            for i, theirs in self.postings.get(token, ()):
                sims[i] += weight * theirs
        return sims

    def vectors(self):
        """The TF-IDF vector of every training input, {term: weight} in training order, read off the postings (a
        "tfidf" index: its postings hold the weights ``weigh`` gives the input's terms)."""
        found: list = [{} for _ in self.targets]
        for token, posting in self.postings.items():
            for i, weight in posting:
                found[i][token] = weight
        return found

    def others(self, k):
        """For every training example, the ``k`` other training examples most similar to its input as (similarity,
        index), most similar first, ranked as ``nearest`` ranks them: the neighbours a leave-one-out vote asks,
        from the postings alone (every pair of inputs sharing a term, once per term, both ways at once for the
        symmetric cosine). It holds all n x n similarities at once: meant for a few thousand examples at most.
        BM25 similarities are not divided by the best here: a vote decides the same on scores scaled alike."""
        import heapq

        n = len(self.targets)
        sims = [[0.0] * n for _ in range(n)]
        symmetric = self.scoring != "bm25"
        for token, posting in self.postings.items():
            idf = self.idf.get(token, 0.0)
            for a, (i, weight) in enumerate(posting):
                row, mine = sims[i], weight if symmetric else idf
                for j, theirs in posting[a + 1 :] if symmetric else posting:
                    row[j] += mine * theirs
        if symmetric:
            for i, row in enumerate(sims):
                for j in range(i):
                    row[j] = sims[j][i]
        # The k + 1 most similar of all with the example itself dropped (ties: the later example first, as ``nearest``).
        return [
            [pair for pair in heapq.nlargest(k + 1, zip(row, range(n), strict=True)) if pair[1] != i][:k]
            for i, row in enumerate(sims)
        ]

    def nearest(self, text, k):
        """The ``k`` most similar training examples as (similarity, target), most similar first."""
        sims = self.similarities(text)
        return [(sim, self.targets[i]) for sim, i in sorted(((s, i) for i, s in enumerate(sims)), reverse=True)[:k]]
