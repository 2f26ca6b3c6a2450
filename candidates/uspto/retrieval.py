"""Retrieval USPTO harness: the training reactions most similar to the product (BM25 on SMILES 4-grams).

BM25 (k1=1.5, b=0.75) implemented here in plain Python; the terms are the reaction-type words and the character
4-grams of the product SMILES. The ``K`` best reactions are shown as user/assistant turns, most similar last,
then the product.
"""

import math
import re
from collections import Counter

SYSTEM = (
    "You are an expert organic chemist. Given a reaction type and a product SMILES, answer with the SMILES of "
    "the reactants only, separated by periods (.)."
)
K = 6
ANSWER_TOKENS = 128


def tokenize(question):
    reaction = re.search(r"reaction type is (.*?)\.?\n", question)
    product = re.search(r"Input:\s*(\S+)", question)
    words = reaction.group(1).lower().split() if reaction else []
    smiles = product.group(1) if product else question
    return ["type:" + w for w in words] + [smiles[i : i + 4] for i in range(max(len(smiles) - 3, 1))]


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
        terms = set(tokenize(query))
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


def first_smiles(response):
    """The answer's first whitespace-separated token: the reactant SMILES joined by "."."""
    return response.strip().split()[0] if response.strip() else ""


class Harness:
    def __init__(self, lm, train):
        self.lm = lm
        self.train = train
        self.index = BM25([item["input"] for item in train])

    def predict(self, x):
        messages = [{"role": "system", "content": SYSTEM}]
        for i in reversed(self.index.top(x, K)):  # most similar last
            messages.append({"role": "user", "content": self.train[i]["input"].strip()})
            messages.append({"role": "assistant", "content": self.train[i]["target"]})
        messages.append({"role": "user", "content": x.strip()})
        return first_smiles(self.lm(messages, max_tokens=ANSWER_TOKENS, stop=["\n"]))
