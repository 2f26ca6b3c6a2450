"""Few-shot USPTO harness: as many training reactions as fit the model's context, then the product to analyse.

Each example is the training question followed by its reactant SMILES; the model completes the last "Answer: "
with SMILES only.
"""

SYSTEM = ("You are an expert organic chemist. Given a reaction type and a product SMILES, answer with the SMILES of "
          "the reactants only, separated by periods (.).")  # fmt: skip
ANSWER_TOKENS = 128


def approx_tokens(text):
    """A cautious token estimate without the tokenizer: SMILES tokenize densely, ~2 characters per token."""
    return len(text) // 2 + 4


class Harness:
    def __init__(self, lm, train):
        self.lm = lm
        self.shots = [f"{item['input'].strip()} {item['target']}\n\n" for item in train]

    def predict(self, x):
        query = x.strip() + " "
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
                                   stop=["\n"])
                break
            except self.lm.Error as error:  # the estimate was too generous: halve the examples and retry
                if not examples or "context" not in str(error).lower():
                    raise
                examples = examples[: len(examples) // 2]
        return response.strip().split()[0] if response.strip() else ""
