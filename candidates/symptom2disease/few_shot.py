"""Few-shot Symptom2Disease harness: as many training examples as fit the model's context, then the question.

The examples are taken in training order, each as a user turn (the symptoms) and an assistant turn (the tagged
diagnosis), until the estimated prompt size reaches the context cap (``lm.context_window`` minus room for the
answer); the model then answers the question in the same format.
"""

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
ANSWER_TOKENS = 24


def approx_tokens(text):
    """A cautious token estimate without the tokenizer: ~3.3 ASCII characters per token, 2.2 tokens otherwise
    (SmolLM2's tokenizer spends 1.9-2.1 tokens per Chinese character)."""
    return int(sum(0.3 if ord(ch) < 128 else 2.2 for ch in text)) + 8


def to_label(answer):
    """The label the model's answer names (the first one it mentions), else the answer itself."""
    text = answer.replace("[DIAGNOSIS]", " ").strip().lower()
    named = [(text.find(label), label) for label in LABELS if label in text]
    return min(named)[1] if named else text


class Harness:
    def __init__(self, lm, train):
        self.lm = lm
        self.shots = [
            [
                {"role": "user", "content": item["input"]},
                {"role": "assistant", "content": f"[DIAGNOSIS]{item['target']}[/DIAGNOSIS]"},
            ]
            for item in train
        ]

    def predict(self, x):
        budget = int(self.lm.context_window * 0.9) - ANSWER_TOKENS - approx_tokens(SYSTEM) - approx_tokens(x)
        examples = []
        for turns in self.shots:
            budget -= sum(approx_tokens(turn["content"]) for turn in turns)
            if budget < 0:
                break
            examples.extend(turns)
        while True:
            messages = [{"role": "system", "content": SYSTEM}, *examples, {"role": "user", "content": x}]
            try:
                response = self.lm(messages, max_tokens=ANSWER_TOKENS, stop=["[/DIAGNOSIS]"])
                break
            except self.lm.Error as error:  # the estimate was too generous: halve the examples and retry
                if not examples or "context" not in str(error).lower():
                    raise
                examples = examples[: len(examples) // 4 * 2]
        return f"[DIAGNOSIS]{to_label(response)}[/DIAGNOSIS]"
