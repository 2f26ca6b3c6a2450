"""Harness code: label scores without the task model, and the decision that mixes them with the model's answer.
Stdlib only (copied into harnesses by ``harness_code.definitions``).

A scorer maps an input to ``{label: score}`` with non-negative scores where more is likelier:

- ``_neighbour_votes``: the labels of the nearest training examples, each weighted by its similarity to the power
  ``power`` (0: one vote each; higher: the closest count more);
- ``_LabelClassifier``: a classifier trained in ``__init__`` on the training examples, over TF-IDF terms
  (``_NeighbourIndex``'s): ``centroid`` (cosine to each label's mean vector), ``bayes`` (multinomial naive Bayes on
  the TF-IDF weights, posterior probabilities) or ``logistic`` (softmax regression by ``epochs`` passes of
  stochastic gradient descent, probabilities). Multi-label answers train every label they name. Terms "auto"
  choose words, character 2-grams or 3-grams by leave-one-out on the training examples (``_best_terms``).

``_prior_corrected`` divides scores by the label's training frequency to a power (calibration against labels that
are frequent in training), and ``_decide`` keeps every label within ``share`` of the best score after adding the
model's own labels at ``model_weight`` times the best score (1.0: the winner only; lower: a label set).
"""

# What these definitions use from their sibling modules (the imports are not copied; ``definitions`` copies the
# definitions they name).
from metaharness.proposers.operators.harness_answers import _label_atoms
from metaharness.proposers.operators.harness_text_index import _NeighbourIndex


def _neighbour_votes(neighbours, power=1.0):
    """{label: sum of similarity ** power} over (similarity, target) neighbours (each label of a target counts)."""
    votes: dict = {}
    for sim, target in neighbours:
        for label in _label_atoms(target):
            votes[label] = votes.get(label, 0.0) + max(0.0, sim) ** power
    return votes


def _prior_corrected(scores, counts, power):
    """Scores divided by (the label's share of training mentions) ** ``power``; unchanged at power 0."""
    if not power:
        return dict(scores)
    total = sum(counts.values()) or 1
    return {label: s / (max(1, counts.get(label, 0)) / total) ** power for label, s in scores.items()}


def _decide(scores, said, model_weight, share):
    """Labels by score: the model's own labels (``said``) get ``model_weight`` x the best score on top; every
    label within ``share`` of the winner's score is kept, best first (ties in label order)."""
    votes = dict(scores)
    top = max(votes.values(), default=0.0)
    for label in said:
        votes[label] = votes.get(label, 0.0) + model_weight * (top if top > 0 else 1.0)
    if not votes:
        return []
    ranked = sorted(votes.items(), key=lambda item: (-item[1], item[0]))
    best = ranked[0][1]
    if best <= 0:
        return [ranked[0][0]]
    return [label for label, score in ranked if score >= share * best - 1e-12]


def _best_terms(train, options, checked=100):
    """The term setting (``_text_terms``'s ``ngram``) among ``options`` whose label centroids name one of a
    training example's labels most often when that example is left out of its centroids (first on ties), checked
    on ``checked`` examples spread over the training set (so the choice stays fast)."""
    import math
    from collections import Counter

    best, best_hits = options[0], -1
    for ngram in options:
        index = _NeighbourIndex(train, ngram)
        rows = [(index.weigh(Counter(index.tokens(item["input"]))), _label_atoms(item["target"])) for item in train]
        sums: dict = {}  # term -> {label: summed weight}
        for vector, names in rows:
            for label in names:
                for term, value in vector.items():
                    row = sums.setdefault(term, {})
                    row[label] = row.get(label, 0.0) + value
        square: Counter = Counter()
        for row in sums.values():
            for label, value in row.items():
                square[label] += value * value
        hits = 0
        for vector, names in rows[:: max(1, len(rows) // checked)]:
            dots: Counter = Counter()
            for term, value in vector.items():
                for label, weight in sums[term].items():
                    dots[label] += value * weight
            cosines = {}
            for label, dot in dots.items():
                own = label in names  # this example's own vector (unit length) taken out of the label's sum
                norm = square[label] - 2 * dot + 1.0 if own else square[label]
                if norm > 1e-9:
                    cosines[label] = (dot - 1.0 if own else dot) / math.sqrt(norm)
            best_label = max(cosines, key=lambda label: (cosines[label], label), default=None)
            if best_label in names and cosines[best_label] > 1e-9:
                hits += 1
        if hits > best_hits:
            best, best_hits = ngram, hits
    return best


class _LabelClassifier:
    """A label scorer trained on ``train`` (see the module docstring); ``scores(text)`` -> {label: score}."""

    def __init__(self, train, kind="centroid", ngram=3, epochs=10):
        import math
        import random
        from collections import Counter

        self.kind = kind
        self.ngram = _best_terms(train, (0, 2, 3)) if ngram == "auto" else ngram
        self.index = _NeighbourIndex(train, self.ngram)
        self.terms = 128 if kind == "logistic" else 0  # a long input's strongest terms only: the SGD stays fast
        rows = [(self.vector(item["input"]), _label_atoms(item["target"])) for item in train]
        self.labels = sorted({label for _, names in rows for label in names})
        counts = Counter(label for _, names in rows for label in names)
        self.weights: dict = {}  # term -> {label: weight}
        self.bias = {label: 0.0 for label in self.labels}
        if kind == "logistic":
            order = list(range(len(rows)))
            shuffle = random.Random(0)
            for _ in range(epochs):
                shuffle.shuffle(order)
                for i in order:
                    vector, names = rows[i]
                    probs = self._softmax(self._raw(vector))
                    goal = {label: 1.0 / len(names) for label in names}
                    # The gradient's large entries: the answer's labels and the likeliest wrong ones.
                    likely = sorted(probs, key=lambda label: -probs[label])[:5]
                    for label in set(likely) | set(names):
                        step = probs[label] - goal.get(label, 0.0)
                        self.bias[label] -= step
                        for term, value in vector.items():
                            row = self.weights.setdefault(term, {})
                            row[label] = row.get(label, 0.0) - step * value
            return
        for vector, names in rows:
            for label in names:
                for term, value in vector.items():
                    row = self.weights.setdefault(term, {})
                    row[label] = row.get(label, 0.0) + value
        if kind == "bayes":
            alpha = 0.01
            totals: Counter = Counter()
            for row in self.weights.values():
                for label, value in row.items():
                    totals[label] += value
            size = len(self.weights)
            self.base = {label: -math.log(totals[label] + alpha * size) for label in self.labels}
            self.weights = {
                term: {label: math.log(value + alpha) - math.log(alpha) for label, value in row.items()}
                for term, row in self.weights.items()
            }
            total = sum(counts.values())
            self.bias = {label: math.log(counts[label] / total) for label in self.labels}
            self.alpha = alpha
        else:  # centroid: unit-length sums
            norms: Counter = Counter()
            for row in self.weights.values():
                for label, value in row.items():
                    norms[label] += value * value
            self.weights = {
                term: {label: value / math.sqrt(norms[label]) for label, value in row.items()}
                for term, row in self.weights.items()
            }

    def vector(self, text):
        from collections import Counter

        vector = self.index.weigh(Counter(self.index.tokens(text)))
        if self.terms and len(vector) > self.terms:
            vector = dict(sorted(vector.items(), key=lambda item: -item[1])[: self.terms])
        return vector

    def _raw(self, vector):
        """Per label: the bias plus the dot product of ``vector`` with the label's weights."""
        raw = dict(self.bias)
        for term, value in vector.items():
            for label, weight in self.weights.get(term, {}).items():
                raw[label] += value * weight
        return raw

    @staticmethod
    def _softmax(raw):
        import math

        top = max(raw.values(), default=0.0)
        exp = {label: math.exp(value - top) for label, value in raw.items()}
        total = sum(exp.values()) or 1.0
        return {label: value / total for label, value in exp.items()}

    def scores(self, text):
        """{label: score} for ``text``: cosines (centroid) or probabilities (bayes, logistic)."""
        vector = self.vector(text)
        if self.kind == "centroid":
            return {label: max(0.0, value) for label, value in self._raw(vector).items()}
        if self.kind == "bayes":
            import math

            # log P(label) + sum over terms of weight x log P(term | label), with the smoothing of unseen terms.
            raw = {
                label: self.bias[label] + sum(vector.values()) * (math.log(self.alpha) + self.base[label])
                for label in self.labels
            }
            for term, value in vector.items():
                for label, weight in self.weights.get(term, {}).items():
                    raw[label] += value * weight
            return self._softmax(raw)
        return self._softmax(self._raw(vector))
