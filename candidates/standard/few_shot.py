"""Few-shot standard seed: the first training examples that fit the context (at most ``SHOTS``), then the input.

Each example is a user turn (its input) and an assistant turn (its target written with the answer template), after
a system turn with the task's description and answer instruction. metaharness writes the block between the task
markers from the task file when a task folder brings no seeds of its own.
"""

# --- task (written from the task file) ---
DESCRIPTION = "Answer the question."
INSTRUCTION = "Reply with the answer only."
TEMPLATE = "{target}"
CHOICES: list[str] = []
# --- end of task ---

SHOTS = 16
ANSWER_TOKENS = 16 if CHOICES else 256
SYSTEM = "\n\n".join(
    part for part in (DESCRIPTION, INSTRUCTION, "Possible answers: " + ", ".join(CHOICES) if CHOICES else "") if part
)


def approx_tokens(text):
    """A cautious token estimate without the tokenizer: ~3.3 ASCII characters per token, 2.2 tokens otherwise."""
    return int(sum(0.3 if ord(ch) < 128 else 2.2 for ch in text)) + 8


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
        self.shots = [
            [
                {"role": "user", "content": item["input"]},
                {"role": "assistant", "content": TEMPLATE.replace("{target}", item["target"])},
            ]
            for item in train[:SHOTS]
        ]

    def predict(self, x):
        budget = int(self.lm.context_window * 0.8) - ANSWER_TOKENS - approx_tokens(SYSTEM) - approx_tokens(x)
        examples = []
        for turns in self.shots:
            budget -= sum(approx_tokens(turn["content"]) for turn in turns)
            if budget < 0:
                break
            examples.extend(turns)
        messages = [{"role": "system", "content": SYSTEM}, *examples, {"role": "user", "content": x}]
        return to_answer(self.lm(messages, max_tokens=ANSWER_TOKENS))
