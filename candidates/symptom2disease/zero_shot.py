"""Zero-shot Symptom2Disease harness: the paper's instruction, the 22 labels, no examples.

Harness contract: ``Harness(lm, train)`` then ``predict(x) -> str``; ``x`` is the patient's description, the
answer must contain ``[DIAGNOSIS]name[/DIAGNOSIS]``. ``lm(prompt, system=..., max_tokens=...) -> str`` is the task
model (temperature 0).
"""

import re

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

INSTRUCTION = (
    "You are an expert medical diagnostician. Based on the patient's symptoms, provide a diagnosis.\n\n"
    "Possible diagnoses include: " + ", ".join(LABELS) + ".\n\n"
    "Please analyze the symptoms step by step, then provide your final diagnosis in the format:\n"
    "[DIAGNOSIS]diagnosis_name[/DIAGNOSIS]\n\nFor example:\n[DIAGNOSIS]diabetes[/DIAGNOSIS]"
)


def tagged_answer(response):
    """Keep a tagged answer; otherwise tag the first label the response names (the metric reads the tag)."""
    if re.search(r"\[DIAGNOSIS\].*?\[/DIAGNOSIS\]", response, re.I | re.S):
        return response
    text = response.lower()
    named = [(text.find(label), label) for label in LABELS if label in text]
    return f"[DIAGNOSIS]{min(named)[1]}[/DIAGNOSIS]" if named else response


class Harness:
    def __init__(self, lm, train):
        self.lm = lm

    def predict(self, x):
        prompt = f"{INSTRUCTION}\n\n## Patient Symptoms\n{x}\n\nPlease provide your reasoning and final diagnosis."
        return tagged_answer(self.lm(prompt, max_tokens=256))
