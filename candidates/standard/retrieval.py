"""Retrieval standard seed: the training examples most similar to the input (BM25 over words), then the input.

BM25 (k1=1.5, b=0.75) over lower-cased word tokens, in plain Python; the ``K`` best training examples are shown as
user/assistant turns (targets written with the answer template), most similar last. metaharness writes the block
between the task markers from the task file when a task folder brings no seeds of its own.
"""

import math
import re
from collections import Counter

# --- task (written from the task file) ---
DESCRIPTION = "Answer the question."
INSTRUCTION = "Reply with the answer only."
TEMPLATE = "{target}"
CHOICES: list[str] = []
# --- end of task ---

K = 4
ANSWER_TOKENS = 16 if CHOICES else 256
SYSTEM = "\n\n".join(
    part for part in (DESCRIPTION, INSTRUCTION, "Possible answers: " + ", ".join(CHOICES) if CHOICES else "") if part
)


def tokenize(text):
    return re.findall(r"\w+", text.lower())


class BM25:
    def __init__(self, documents, k1=1.5, b=0.75):
        self.docs = [Counter(tokenize(doc)) for doc in documents]
        self.lengths = [sum(doc.values()) for doc in self.docs]
        self.avg_length = sum(self.lengths) / max(len(self.docs), 1) or 1.0
        frequency = Counter(term for doc in self.docs for term in doc)
        n = len(self.docs)
        self.idf = {term: math.log(1 + (n - df + 0.5) / (df + 0.5)) for term, df in frequency.items()}
        self.k1, self.b = k1, b

    def top(self, query, k):
        terms = set(tokenize(query))
        scores = []
        for doc, length in zip(self.docs, self.lengths, strict=False):
            norm = self.k1 * (1 - self.b + self.b * length / self.avg_length)
            scores.append(sum(self.idf[t] * doc[t] * (self.k1 + 1) / (doc[t] + norm) for t in terms if t in doc))
        return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]


def to_answer(response):
    """The model's reply in the task's answer form: the first choice it names (when the task has choices),
    written with the answer template; otherwise the reply as it is."""
    text = response.strip()
    lowered = text.lower()
    named = [(lowered.find(c.lower()), -len(c), c) for c in CHOICES if c.lower() in lowered]
    if named:
        return TEMPLATE.replace("{target}", min(named)[2])
    return text


class Harness:
    def __init__(self, lm, train):
        self.lm = lm
        self.train = train
        self.index = BM25([item["input"] for item in train])

    def predict(self, x):
        messages = [{"role": "system", "content": SYSTEM}]
        for i in reversed(self.index.top(x, K)):  # most similar last
            messages.append({"role": "user", "content": self.train[i]["input"]})
            messages.append({"role": "assistant", "content": TEMPLATE.replace("{target}", self.train[i]["target"])})
        messages.append({"role": "user", "content": x})
        return to_answer(self.lm(messages, max_tokens=ANSWER_TOKENS))
