"""Retrieval LawBench harness: the training cases most similar to the case (BM25 on character bigrams).

BM25 (k1=1.5, b=0.75) implemented here in plain Python; Chinese has no spaces, so the terms are character
bigrams. The ``K`` best cases (facts cut to ``SHOT_CHARS``) are shown as user/assistant turns, most similar last,
then the case to judge.
"""

import math
from collections import Counter

SYSTEM = "请你模拟法官依据下面事实给出罪名，只需要给出罪名的名称，将答案写在[罪名]和<eoa>之间。多个罪名用;分隔。"
K = 4
SHOT_CHARS = 400
ANSWER_TOKENS = 48


def tokenize(text):
    chars = [ch for ch in text if not ch.isspace() and ch not in "，。、；：（）×"]
    return [a + b for a, b in zip(chars, chars[1:], strict=False)]


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


def approx_tokens(text):
    """A cautious token estimate without the tokenizer: ~3.3 ASCII characters per token, 2.2 tokens otherwise
    (SmolLM2's tokenizer spends 1.9-2.1 tokens per Chinese character)."""
    return int(sum(0.3 if ord(ch) < 128 else 2.2 for ch in text)) + 4


def fit(text, tokens):
    """The longest prefix of ``text`` whose estimate stays within ``tokens``."""
    while text and approx_tokens(text) > tokens:
        text = text[: int(len(text) * 0.9)]
    return text


class Harness:
    def __init__(self, lm, train):
        self.lm = lm
        self.train = train
        self.index = BM25([item["input"] for item in train])

    def predict(self, x):
        cap = int(self.lm.context_window * 0.9) - ANSWER_TOKENS - approx_tokens(SYSTEM)
        query = fit(x, cap // 2)
        shots = [
            [
                {"role": "user", "content": self.train[i]["input"][:SHOT_CHARS]},
                {"role": "assistant", "content": f"[罪名]{self.train[i]['target']}<eoa>"},
            ]
            for i in reversed(self.index.top(x, K))  # most similar last
        ]
        while shots and sum(approx_tokens(t["content"]) for turns in shots for t in turns) > cap - approx_tokens(query):
            shots.pop(0)  # drop the least similar
        messages = [
            {"role": "system", "content": SYSTEM},
            *(t for turns in shots for t in turns),
            {"role": "user", "content": query},
        ]
        response = self.lm(messages, max_tokens=ANSWER_TOKENS, stop=["<eoa>"])
        answer = response if "[罪名]" in response else f"[罪名]{response.strip()}"
        return answer if answer.rstrip().endswith("<eoa>") else answer.rstrip() + "<eoa>"  # one form, said or not
