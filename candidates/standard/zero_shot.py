"""Zero-shot standard seed: the task's description and answer instruction, then the input; no examples.

metaharness writes the block between the task markers from the task file (description, answer instruction,
template, choices) when a task folder brings no seeds of its own. Harness contract: ``Harness(lm, train)`` then
``predict(x) -> str``; ``lm(messages, max_tokens=..., stop=...) -> str`` is the task model (temperature 0).
"""

# --- task (written from the task file) ---
DESCRIPTION = "Answer the question."
INSTRUCTION = "Reply with the answer only."
TEMPLATE = "{target}"
CHOICES: list[str] = []
# --- end of task ---

ANSWER_TOKENS = 16 if CHOICES else 256
SYSTEM = "\n\n".join(
    part for part in (DESCRIPTION, INSTRUCTION, "Possible answers: " + ", ".join(CHOICES) if CHOICES else "") if part
)


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

    def predict(self, x):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": x}]
        return to_answer(self.lm(messages, max_tokens=ANSWER_TOKENS))
