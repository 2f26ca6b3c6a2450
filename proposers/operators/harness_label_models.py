"""Harness code: label scores without the task model, and the decision that mixes them with the model's answer.
Stdlib only (copied into harnesses by ``harness_code.definitions``).

A scorer maps an input to ``{label: score}`` with non-negative scores where more is likelier:

- ``_neighbour_votes``: the labels of the nearest training examples, each weighted by its similarity to the power
  ``power`` (0: one vote each; higher: the closest count more);
- ``_LabelClassifier``: a classifier trained in ``__init__`` on the training examples, over TF-IDF terms
  (``_NeighbourIndex``'s): ``centroid`` (cosine to each label's mean vector), ``bayes`` (multinomial naive Bayes on
  the TF-IDF weights, posterior probabilities) or ``logistic`` (softmax regression by ``epochs`` passes of
  stochastic gradient descent, probabilities). Multi-label answers train every label they name. Terms "auto"
  choose words, character 2-grams or 3-grams by leave-one-out on the training examples (``_best_terms``); kind
  "auto" chooses the kind and terms together by 3-fold cross-validation on them (``_chosen_classifier``);
- ``_TunedVote``: the neighbour vote with its terms, K, similarity power, label-frequency correction and label-set
  share chosen by leave-one-out on the training examples, wherever they are given as "auto".

``_prior_corrected`` divides scores by the label's training frequency to a power (calibration against labels that
are frequent in training), and ``_decide`` keeps every label within ``share`` of the best score after adding the
model's own labels at ``model_weight`` times the best score (1.0: the winner only; lower: a label set).
"""

# What these definitions use from their sibling modules (the imports are not copied; ``definitions`` copies the
# definitions they name).
from metaharness.proposers.operators.harness_answers import _label_atoms, _label_counts, _multi_label
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
    return _kept(_by_score(votes), share)


def _by_score(votes):
    """{label: score} as (label, score) pairs, best first (ties in label order)."""
    return sorted(votes.items(), key=lambda item: (-item[1], item[0]))


def _kept(ranked, share):
    """The labels of ``_by_score`` pairs within ``share`` of the best score, in order (the best alone when no score
    is positive)."""
    if not ranked:
        return []
    best = ranked[0][1]
    if best <= 0:
        return [ranked[0][0]]
    return [label for label, score in ranked if score >= share * best - 1e-12]


def _best_terms(train, options, checked=100, built=None):
    """The term setting (``_text_terms``'s ``ngram``) among ``options`` whose label centroids name one of a
    training example's labels most often when that example is left out of its centroids (first on ties), checked
    on ``checked`` examples spread over the training set (so the choice stays fast). The index of each setting is
    put in ``built`` (a dict, when given), for the caller to reuse the chosen one's."""
    import math

    labels = [_label_atoms(item["target"]) for item in train]
    best, best_hits = options[0], -1
    for ngram in options:
        index = _NeighbourIndex(train, ngram)
        if built is not None:
            built[ngram] = index
        rows = list(zip(index.doc_weights, labels, strict=True))
        # Plain dicts, not Counters: a Counter's += is several times slower, and these loops are the choice's cost.
        sums: dict = {}  # term -> {label: summed weight}
        for vector, names in rows:
            for label in names:
                for term, value in vector.items():
                    row = sums.setdefault(term, {})
                    row[label] = row.get(label, 0.0) + value
        square: dict = {}
        for row in sums.values():
            for label, value in row.items():
                square[label] = square.get(label, 0) + value * value
        hits = 0
        for vector, names in rows[:: max(1, len(rows) // checked)]:
            dots: dict = {}
            for term, value in vector.items():
                for label, weight in sums[term].items():
                    dots[label] = dots.get(label, 0) + value * weight
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
    """A label scorer trained on ``train`` (see the module docstring); ``scores(text)`` -> {label: score}. Kind
    "auto" chooses the kind and (with terms "auto") the terms by cross-validation (``_chosen_classifier``)."""

    def __init__(self, train, kind="centroid", ngram=3, epochs=10):
        if kind == "auto":
            kind, ngram, self.index, vectors = _chosen_classifier(train, ngram, epochs)
        elif ngram == "auto":
            built: dict = {}  # the index of every setting tried: the chosen one's is not built again
            ngram = _best_terms(train, (0, 2, 3), built=built)
            self.index = built[ngram]
            vectors = self.index.vectors()
        else:
            self.index = _NeighbourIndex(train, ngram)
            vectors = self.index.vectors()
        self.ngram = ngram
        self._fit(kind, [(v, _label_atoms(item["target"])) for v, item in zip(vectors, train, strict=True)], epochs)

    @classmethod
    def _trained(cls, kind, index, rows, epochs):
        """A classifier of ``kind`` fitted to (vector, labels) ``rows`` weighed by ``index`` (a fold's model)."""
        model = cls.__new__(cls)
        model.index, model.ngram = index, index.ngram
        model._fit(kind, rows, epochs)
        return model

    def _fit(self, kind, rows, epochs):
        import math
        import random
        from collections import Counter

        self.kind = kind
        self.terms = 128 if kind == "logistic" else 0  # a long input's strongest terms only: the SGD stays fast
        rows = [(self._cut(vector), names) for vector, names in rows]
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
        # Centroid and naive Bayes keep each label's summed term weights and transform a pair only when an input
        # scores it (fitting stays cheap, so cross-validation can afford many fits).
        for vector, names in rows:
            for label in names:
                for term, value in vector.items():
                    row = self.weights.setdefault(term, {})
                    row[label] = row.get(label, 0.0) + value
        # One fit serves both (``kind`` says how to score): the centroid's norms and naive Bayes's priors (summed in
        # plain dicts: a Counter's += is several times slower).
        totals: dict = {}
        squares: dict = {}
        for row in self.weights.values():
            for label, value in row.items():
                totals[label] = totals.get(label, 0) + value
                squares[label] = squares.get(label, 0) + value * value
        self.norms = {label: math.sqrt(squares.get(label, 0)) or 1.0 for label in self.labels}
        self.alpha, self.smoothed = 0.01, {}
        self.base = {label: -math.log(totals.get(label, 0) + self.alpha * len(self.weights)) for label in self.labels}
        total = sum(counts.values())
        self.priors = {label: math.log(counts[label] / total) for label in self.labels}

    def _cut(self, vector):
        """``vector`` kept to its ``terms`` strongest terms (all of them when ``terms`` is 0)."""
        if self.terms and len(vector) > self.terms:
            return dict(sorted(vector.items(), key=lambda item: -item[1])[: self.terms])
        return vector

    def vector(self, text):
        from collections import Counter

        return self._cut(self.index.weigh(Counter(self.index.tokens(text))))

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
        return self.scores_of(self.vector(text))

    def scores_of(self, vector):
        """``scores`` of a text's TF-IDF vector (``index.weigh``'s)."""
        import math

        vector = self._cut(vector)
        if self.kind == "centroid":
            return {label: max(0.0, value / self.norms[label]) for label, value in self._raw(vector).items()}
        if self.kind == "bayes":
            # log P(label) + sum over terms of weight x log P(term | label), with the smoothing of unseen terms.
            smoothing, mass = math.log(self.alpha), sum(vector.values())
            raw = {label: self.priors[label] + mass * (smoothing + self.base[label]) for label in self.labels}
            for term, value in vector.items():
                row = self.smoothed.get(term)
                if row is None:  # a term's log-probability ratios, worked out the first time an input has it
                    totals = self.weights.get(term, {}).items()
                    row = self.smoothed[term] = {label: math.log(t + self.alpha) - smoothing for label, t in totals}
                for label, weight in row.items():
                    raw[label] += value * weight
            return self._softmax(raw)
        return self._softmax(self._raw(vector))


def _chosen_classifier(train, ngram="auto", epochs=10, folds=3, work=4e6):
    """(kind, terms, index, vectors): the classifier kind and terms (every one of words, character 2- and 3-grams
    for terms "auto", else the terms given) whose classifier, trained on the other folds, ranks one of a training
    example's labels first most often, over ``folds`` folds (example i in fold i % folds; ties: the earlier of
    centroid, bayes, logistic, then of the terms). Centroid and naive Bayes are always tried; logistic regression
    only when its estimated work (passes x the folds' training terms x labels, about a second per 10 million
    here) stays under ``work``, since it trains far slower. The vectors are weighed with the whole set's IDF (inputs
    only, no labels) and reused by every fold and by the final classifier."""
    labels = [_label_atoms(item["target"]) for item in train]
    distinct = len({label for names in labels for label in names})
    best, best_hits = None, -1
    for terms in (0, 2, 3) if ngram == "auto" else (ngram,):
        index = _NeighbourIndex(train, terms)
        vectors = index.vectors()
        effort = epochs * (folds - 1) * sum(min(128, len(v)) for v in vectors) * distinct  # every fold's SGD
        kinds = ("centroid", "bayes", "logistic") if effort <= work else ("centroid", "bayes")
        hits = dict.fromkeys(kinds, 0)
        for fold in range(folds):
            rows = [(v, names) for i, (v, names) in enumerate(zip(vectors, labels, strict=True)) if i % folds != fold]
            if not rows:
                continue
            shared = _LabelClassifier._trained("centroid", index, rows, epochs)  # naive Bayes scores the same fit
            for kind in kinds:
                model = _LabelClassifier._trained(kind, index, rows, epochs) if kind == "logistic" else shared
                model.kind = kind
                for i in range(fold, len(train), folds):
                    scores = model.scores_of(vectors[i])
                    first = max(scores, key=lambda label: (scores[label], label), default=None)
                    hits[kind] += first in labels[i]
        for kind in kinds:
            if hits[kind] > best_hits:
                best, best_hits = (kind, terms, index, vectors), hits[kind]
    return best


class _TunedVote:
    """A neighbour vote that chooses its own settings: each one given as "auto" (terms ``ngram``, neighbours ``k``,
    similarity ``power``, label-frequency correction ``prior``, and for multi-label training answers the ``share``
    of the top vote a label needs) takes the value of ``OPTIONS`` whose leave-one-out vote on ``train`` answers
    exactly the example's own labels most often (ties: the earlier value). The rankings of every training example's
    nearest others are computed once per terms setting (``_NeighbourIndex.others``) and shared by every other
    setting. ``scores(text)`` -> {label: vote} at the chosen settings; ``k``, ``power``, ``prior``, ``share`` and
    ``ngram`` say what was chosen and ``loo`` what share of the training examples it answered exactly."""

    OPTIONS = {
        "ngram": (0, 2, 3, 4),
        "k": (1, 3, 5, 9, 15, 25),
        "power": (0.0, 1.0, 2.0, 4.0),
        "prior": (0.0, 0.5),
        "share": (1.0, 0.75, 0.5, 0.3),
    }

    def __init__(self, train, ngram="auto", k="auto", power="auto", share="auto", scoring="tfidf", prior="auto"):
        given = {"ngram": ngram, "k": k, "power": power, "prior": prior, "share": share}
        options = {name: self.OPTIONS[name] if value == "auto" else (value,) for name, value in given.items()}
        if share == "auto" and not _multi_label(train):
            options["share"] = (1.0,)
        self.counts = _label_counts(train)
        best: tuple = ()
        best_hits = -1
        for terms in options["ngram"]:
            index = _NeighbourIndex(train, terms, scoring)
            for setting, hits in _loo_vote_hits(index.others(max(options["k"])), train, self.counts, options).items():
                if hits > best_hits:
                    best, best_hits, self.index = (terms, *setting), hits, index
        self.ngram, self.k, self.power, self.prior, self.share = best
        self.loo = best_hits / max(1, len(train))

    def scores(self, text):
        votes = _neighbour_votes(self.index.nearest(text, self.k), self.power)
        return _prior_corrected(votes, self.counts, self.prior)


def _loo_vote_hits(others, train, counts, options):
    """{(k, power, prior, share): how many training examples the vote of their ``others`` (``_NeighbourIndex.others``,
    by index) answers with exactly their own labels}, in the order of ``options``; the label counts exclude the
    example voted on. Each vote is judged as ``_decide`` would answer it (``_prior_corrected``, then ``_kept``), but
    with each label's correction worked out once per example and the kept labels found without sorting: the grid
    asks thousands of votes."""
    atoms = [_label_atoms(item["target"]) for item in train]
    hits = {
        (k, power, prior, share): 0
        for k in options["k"]
        for power in options["power"]
        for prior in options["prior"]
        for share in options["share"]
    }
    for i, near in enumerate(others):
        own = set(atoms[i])
        rest = dict(counts)
        for label in own:
            rest[label] -= 1
        total = sum(rest.values()) or 1
        # ``_prior_corrected``'s divisor of each label, per prior (none at prior 0).
        divisors = {
            prior: {label: (max(1, rest.get(label, 0)) / total) ** prior for label in rest}
            for prior in options["prior"]
            if prior
        }
        asked: dict = {}  # how many neighbours -> the K values that ask them (K past the end asks every one)
        for k in options["k"]:
            asked.setdefault(min(k, len(near)), []).append(k)
        for power in options["power"]:
            votes: dict = {}
            for rank, (sim, j) in enumerate(near, 1):
                weight = max(0.0, sim) ** power
                for label in atoms[j]:
                    votes[label] = votes.get(label, 0.0) + weight
                for k in asked.get(rank, ()):
                    for prior in options["prior"]:
                        if prior:
                            divisor = divisors[prior]
                            scores = {label: s / divisor[label] for label, s in votes.items()}
                        else:
                            scores = votes
                        for share in options["share"]:
                            hits[(k, power, prior, share)] += _kept_set(scores, share) == own
    return hits


def _kept_set(scores, share):
    """``set(_kept(_by_score(scores), share))``, without the sort."""
    if not scores:
        return set()
    best = max(scores.values())
    if best <= 0:
        return {min(scores, key=lambda label: (-scores[label], label))}
    floor = share * best - 1e-12
    return {label for label, score in scores.items() if score >= floor}
