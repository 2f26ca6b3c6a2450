"""Zero-shot USPTO harness: the paper's retrosynthesis instruction, no examples.

Harness contract: ``Harness(lm, train)`` then ``predict(x) -> str``; ``x`` is "Context: The reaction type is
...\\nInput: <product SMILES>\\nAnswer: ". The metric reads the reactant SMILES (joined by ".") from the
"final_answer" field of a JSON answer, or the bare answer. ``lm(prompt, max_tokens=...) -> str`` is the task model.
"""

INSTRUCTION = """You are an expert organic chemist specializing in retrosynthesis analysis.

Retrosynthesis Problem:
{question}

Instructions:
- Analyze the product structure and identify key functional groups and bonds
- Consider the reaction type and typical disconnection strategies
- Propose the most likely precursor reactants based on the reaction mechanism
- Output SMILES strings separated by periods (.) for multiple reactants

You MUST respond with a valid JSON object containing exactly two fields:
1. "reasoning": Your step-by-step retrosynthetic analysis (less than 200 words)
2. "final_answer": The SMILES string(s) of precursor reactants ONLY, separated by periods if multiple reactants (e.g., "CC(=O)Cl.c1ccccc1O")
"""


class Harness:
    def __init__(self, lm, train):
        self.lm = lm

    def predict(self, x):
        return self.lm(INSTRUCTION.format(question=x.strip()), max_tokens=512)
