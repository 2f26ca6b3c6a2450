"""Retrieval Symptom2Disease harness: the training examples most similar to the question (BM25), then the question.

BM25 (k1=1.5, b=0.75) over lower-cased word tokens, implemented here in plain Python; the ``K`` best training
examples are shown as user/assistant turns, most similar last (closest to the question).
"""

import math
import re
from collections import Counter

LABELS = [
    "drug reaction",
    "allergy",
    "chicken pox",
    "diabetes",
    "psoriasis",
    "hypertension",
    "cervical spondylosis",
    "bronchial asthma",
    "varicose veins",
    "malaria",
    "dengue",
    "arthritis",
    "impetigo",
    "fungal infection",
    "common cold",
    "gastroesophageal reflux disease",
    "urinary tract infection",
    "typhoid",
    "pneumonia",
    "peptic ulcer disease",
    "jaundice",
    "migraine",
]
SYSTEM = (
    "You are an expert medical diagnostician. Read the patient's symptoms and answer with exactly one diagnosis "
    "from this list, in the format [DIAGNOSIS]diagnosis_name[/DIAGNOSIS]: " + ", ".join(LABELS) + "."
)
K = 0
ANSWER_TOKENS = 24
STOPWORDS = set(
    [
        "i",
        "a",
        "an",
        "the",
        "and",
        "or",
        "my",
        "me",
        "is",
        "are",
        "am",
        "be",
        "been",
        "have",
        "has",
        "had",
        "it",
        "this",
        "that",
        "of",
        "to",
        "in",
        "on",
        "for",
        "with",
    ]
)

# Neighbour vote: neighbours asked, weight of the model's own answer, share of the top vote kept.
VOTE_K = 5
VOTE_MODEL_WEIGHT = 0.5
VOTE_SHARE = 1.0

# Neighbour index terms: 0 = words, n > 0 = character n-grams.
INDEX_NGRAM = 3


def tokenize(text):
    return [word for word in re.findall(r"[a-z0-9]+", text.lower()) if word not in STOPWORDS]


class BM25:
    def __init__(self, documents, k1=1.5, b=0.75):
        self.docs = [Counter(tokenize(doc)) for doc in documents]
        self.lengths = [sum(doc.values()) for doc in self.docs]
        self.avg_length = sum(self.lengths) / max(len(self.docs), 1)
        frequency = Counter(term for doc in self.docs for term in doc)
        n = len(self.docs)
        self.idf = {term: math.log(1 + (n - df + 0.5) / (df + 0.5)) for term, df in frequency.items()}
        self.k1, self.b = k1, b

    def scores(self, query):
        terms = tokenize(query)
        result = []
        for doc, length in zip(self.docs, self.lengths, strict=False):
            norm = self.k1 * (1 - self.b + self.b * length / self.avg_length)
            result.append(
                sum(self.idf.get(t, 0.0) * doc[t] * (self.k1 + 1) / (doc[t] + norm) for t in terms if t in doc)
            )
        return result

    def top(self, query, k):
        scores = self.scores(query)
        return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]


def to_label(answer):
    """The label the model's answer names (the first one it mentions), else the answer itself."""
    text = answer.replace("[DIAGNOSIS]", " ").strip().lower()
    named = [(text.find(label), label) for label in LABELS if label in text]
    return min(named)[1] if named else text


class Harness:
    def __init__(self, lm, train):
        self._label_set = _known_labels(train)
        self._neighbours = _NeighbourIndex(train, INDEX_NGRAM)
        self._label_set = _known_labels(train)
        self.lm = lm
        self.train = train
        self.index = BM25([item["input"] for item in train])

    def _predict_before_vote(self, x):
        messages = [{"role": "system", "content": SYSTEM}]
        for i in reversed(self.index.top(x, K)):  # most similar last
            messages.append({"role": "user", "content": self.train[i]["input"]})
            messages.append({"role": "assistant", "content": f"[DIAGNOSIS]{self.train[i]['target']}[/DIAGNOSIS]"})
        messages.append({"role": "user", "content": x})
        response = self.lm(messages, max_tokens=ANSWER_TOKENS, stop=["[/DIAGNOSIS]"])
        return f"[DIAGNOSIS]{to_label(response)}[/DIAGNOSIS]"

    def _predict_before_snap(self, x):
        answer = self._predict_before_vote(x)
        labels = self._label_set
        if not labels or not isinstance(answer, str):
            return answer
        start, end = _answer_span(answer)
        said = _snap_labels(answer[start:end], labels)
        neighbours = self._neighbours.nearest(x, VOTE_K)
        voted = _vote(neighbours, said, VOTE_MODEL_WEIGHT, VOTE_SHARE)
        return _with_answer(answer, voted) if voted else answer

    def predict(self, x):
        answer = self._predict_before_snap(x)
        labels = self._label_set
        if not labels or not isinstance(answer, str):
            return answer
        start, end = _answer_span(answer)
        said = _snap_labels(answer[start:end], labels)
        return _with_answer(answer, said) if said else answer


def _label_atoms(answer):
    """The labels an answer names: split on the first list separator present (; ； , ，), stripped."""
    text = str(answer).strip()
    separator = next((s for s in (";", "；", ",", "，") if s in text), None)
    return [part.strip() for part in (text.split(separator) if separator else [text]) if part.strip()]



def _known_labels(train):
    """Every distinct label of the training answers (each label of a multi-label answer counts), any number."""
    return sorted({label for item in train for label in _label_atoms(item["target"])})



def _answer_span(text):
    """(start, end) of the answer in ``[TAG]answer[/TAG]`` or ``[TAG]answer<eoa>`` (else after a lone ``[TAG]``),
    else of the whole text."""
    import re

    match = re.search(r"\[([^\[\]/]+)\](.*?)(?:\[/\1\]|<eoa>)", text, re.S) or re.search(
        r"\[([^\[\]/]+)\](.*)$", text, re.S
    )
    return (match.start(2), match.end(2)) if match else (0, len(text))



def _snap_label(text, labels):
    """The label the text names: exact after normalising, else the longest label mentioned, else the closest
    spelling (difflib ratio >= 0.6), else None."""
    import difflib
    import re

    def norm(value):
        return re.sub(r"[\s_]+", " ", re.sub(r"[.!?,;:'\"。！？]+$", "", value.strip().lower()))

    by_norm = {norm(label): label for label in labels}
    said = norm(text)
    if said in by_norm:
        return by_norm[said]
    mentioned = [(said.find(key), -len(key), label) for key, label in by_norm.items() if key and key in said]
    if mentioned:
        return min(mentioned)[2]
    close = difflib.get_close_matches(said, list(by_norm), n=1, cutoff=0.6)
    return by_norm[close[0]] if close else None



def _snap_labels(text, labels):
    """Each label the answer text names, snapped to the vocabulary, in order, without repeats."""
    snapped = [_snap_label(part, labels) for part in _label_atoms(text)]
    return list(dict.fromkeys(label for label in snapped if label))



def _with_answer(text, labels):
    """The response with its answer span replaced by ``labels`` joined with ";" (tags kept)."""
    answer = ";".join(labels)
    start, end = _answer_span(text)
    return text[:start] + answer + text[end:] if (start, end) != (0, len(text)) else answer



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
            chars = re.sub(r"\s+", "", str(text))
            return [chars[i : i + self.ngram] for i in range(max(1, len(chars) - self.ngram + 1))]
        return re.findall(r"[a-z0-9]+|[^\x00-\x7f]", str(text).lower())

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
