"""Few-shot Symptom2Disease harness: as many training examples as fit the model's context, then the question.

The examples are taken in training order until the estimated prompt size reaches the context cap
(``lm.context_window`` minus room for the answer); the model answers directly with the tag.
"""

LABELS = [
    "drug reaction", "allergy", "chicken pox", "diabetes", "psoriasis", "hypertension", "cervical spondylosis",
    "bronchial asthma", "varicose veins", "malaria", "dengue", "arthritis", "impetigo", "fungal infection",
    "common cold", "gastroesophageal reflux disease", "urinary tract infection", "typhoid", "pneumonia",
    "peptic ulcer disease", "jaundice", "migraine",
]
SYSTEM = (
    "You are an expert medical diagnostician. Read the patient's symptoms and answer with exactly one diagnosis "
    "from this list, in the format [DIAGNOSIS]diagnosis_name[/DIAGNOSIS]: " + ", ".join(LABELS) + "."
)
ANSWER_TOKENS = 24


def approx_tokens(text):
    """A cautious token estimate without the tokenizer: ~3.3 ASCII characters per token, 1.5 tokens otherwise."""
    return int(sum(0.3 if ord(ch) < 128 else 1.5 for ch in text)) + 4


def shot(question, answer):
    return f"Symptoms: {question}\nAnswer: [DIAGNOSIS]{answer}[/DIAGNOSIS]\n\n"


def to_label(answer):
    """The label the model's answer names (the first one it mentions), else the answer itself."""
    text = answer.strip().lower()
    named = [(text.find(label), label) for label in LABELS if label in text]
    return min(named)[1] if named else answer.strip()


class Harness:
    def __init__(self, lm, train):
        self.lm = lm
        self.shots = [shot(item["input"], item["target"]) for item in train]

    def predict(self, x):
        query = f"Symptoms: {x}\nAnswer: [DIAGNOSIS]"
        budget = int(self.lm.context_window * 0.9) - ANSWER_TOKENS - approx_tokens(SYSTEM + query)
        examples = []
        for text in self.shots:
            budget -= approx_tokens(text)
            if budget < 0:
                break
            examples.append(text)
        while True:
            try:
                response = self.lm("".join(examples) + query, system=SYSTEM, max_tokens=ANSWER_TOKENS,
                                   stop=["[/DIAGNOSIS]", "\n"])
                break
            except self.lm.Error as error:  # the estimate was too generous: halve the examples and retry
                if not examples or "context" not in str(error).lower():
                    raise
                examples = examples[: len(examples) // 2]
        return f"[DIAGNOSIS]{to_label(response)}[/DIAGNOSIS]"
