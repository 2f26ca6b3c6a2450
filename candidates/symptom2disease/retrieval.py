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
K = 8
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
        self.lm = lm
        self.train = train
        self.index = BM25([item["input"] for item in train])

    def predict(self, x):
        messages = [{"role": "system", "content": SYSTEM}]
        for i in reversed(self.index.top(x, K)):  # most similar last
            messages.append({"role": "user", "content": self.train[i]["input"]})
            messages.append({"role": "assistant", "content": f"[DIAGNOSIS]{self.train[i]['target']}[/DIAGNOSIS]"})
        messages.append({"role": "user", "content": x})
        response = self.lm(messages, max_tokens=ANSWER_TOKENS, stop=["[/DIAGNOSIS]"])
        return f"[DIAGNOSIS]{to_label(response)}[/DIAGNOSIS]"
