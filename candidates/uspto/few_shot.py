"""Few-shot USPTO harness: as many training reactions as fit the model's context, then the product to analyse.

Each example is a user turn (the training question) and an assistant turn (its reactant SMILES); the model
answers the last question with SMILES only.
"""

SYSTEM = (
    "You are an expert organic chemist. Given a reaction type and a product SMILES, answer with the SMILES of "
    "the reactants only, separated by periods (.)."
)
ANSWER_TOKENS = 128


def approx_tokens(text):
    """A cautious token estimate without the tokenizer: SMILES tokenize densely, up to 0.65 tokens per
    character with SmolLM2's tokenizer."""
    return int(len(text) * 0.7) + 8


def first_smiles(response):
    """The answer's first whitespace-separated token: the reactant SMILES joined by "."."""
    return response.strip().split()[0] if response.strip() else ""


class Harness:
    def __init__(self, lm, train):
        self.lm = lm
        self.shots = [
            [{"role": "user", "content": item["input"].strip()}, {"role": "assistant", "content": item["target"]}]
            for item in train
        ]

    def predict(self, x):
        budget = int(self.lm.context_window * 0.9) - ANSWER_TOKENS - approx_tokens(SYSTEM + x)
        examples = []
        for turns in self.shots:
            budget -= sum(approx_tokens(turn["content"]) for turn in turns)
            if budget < 0:
                break
            examples.extend(turns)
        while True:
            messages = [{"role": "system", "content": SYSTEM}, *examples, {"role": "user", "content": x.strip()}]
            try:
                response = self.lm(messages, max_tokens=ANSWER_TOKENS, stop=["\n"])
                break
            except self.lm.Error as error:  # the estimate was too generous: halve the examples and retry
                if not examples or "context" not in str(error).lower():
                    raise
                examples = examples[: len(examples) // 4 * 2]
        return first_smiles(response)
