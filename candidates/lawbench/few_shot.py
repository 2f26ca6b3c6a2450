"""Few-shot LawBench harness: as many training cases as fit the model's context, then the case to judge.

Training cases are taken in order (facts cut to ``SHOT_CHARS`` characters each), each as a user turn (the facts)
and an assistant turn (``[罪名]charges<eoa>``), until the estimated prompt reaches the context cap; the model then
answers the case in the same format.
"""

SYSTEM = "请你模拟法官依据下面事实给出罪名，只需要给出罪名的名称，将答案写在[罪名]和<eoa>之间。多个罪名用;分隔。"
SHOT_CHARS = 300
ANSWER_TOKENS = 48


def approx_tokens(text):
    """A cautious token estimate without the tokenizer: ~3.3 ASCII characters per token, 2.2 tokens otherwise
    (SmolLM2's tokenizer spends 1.9-2.1 tokens per Chinese character)."""
    return int(sum(0.3 if ord(ch) < 128 else 2.2 for ch in text)) + 8


def fit(text, tokens):
    """The longest prefix of ``text`` whose estimate stays within ``tokens``."""
    while text and approx_tokens(text) > tokens:
        text = text[: int(len(text) * 0.9)]
    return text


class Harness:
    def __init__(self, lm, train):
        self.lm = lm
        self.shots = [
            [
                {"role": "user", "content": item["input"][:SHOT_CHARS]},
                {"role": "assistant", "content": f"[罪名]{item['target']}<eoa>"},
            ]
            for item in train
        ]

    def predict(self, x):
        cap = int(self.lm.context_window * 0.9) - ANSWER_TOKENS - approx_tokens(SYSTEM)
        query = fit(x, cap // 2)
        budget = cap - approx_tokens(query)
        examples = []
        for turns in self.shots:
            budget -= sum(approx_tokens(turn["content"]) for turn in turns)
            if budget < 0:
                break
            examples.extend(turns)
        while True:
            messages = [{"role": "system", "content": SYSTEM}, *examples, {"role": "user", "content": query}]
            try:
                response = self.lm(messages, max_tokens=ANSWER_TOKENS, stop=["<eoa>"])
                break
            except self.lm.Error as error:  # the estimate was too generous: halve the examples and retry
                if not examples or "context" not in str(error).lower():
                    raise
                examples = examples[: len(examples) // 4 * 2]
        answer = response if "[罪名]" in response else f"[罪名]{response.strip()}"
        return answer if answer.rstrip().endswith("<eoa>") else answer.rstrip() + "<eoa>"  # one form, said or not
