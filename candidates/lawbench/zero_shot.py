"""Zero-shot LawBench harness: the paper's instruction (Chinese), no examples.

Harness contract: ``Harness(lm, train)`` then ``predict(x) -> str``; ``x`` is the case facts ("事实:..."), the
answer must contain ``[罪名]charge;charge<eoa>``. ``lm(prompt, max_tokens=...) -> str`` is the task model.
Very long case facts are cut to fit the model's context window.
"""

INSTRUCTION = (
    "请你模拟法官依据下面事实给出罪名。请先进行推理分析，然后将最终答案写在[罪名]和<eoa>之间。\n\n"
    "格式示例：\n- 单个罪名: [罪名]盗窃<eoa>\n- 多个罪名: [罪名]盗窃;诈骗<eoa>\n\n\n## 案件事实\n"
)
ANSWER_TOKENS = 256


def approx_tokens(text):
    """A cautious token estimate without the tokenizer: ~3.3 ASCII characters per token, 2.2 tokens otherwise
    (SmolLM2's tokenizer spends 1.9-2.1 tokens per Chinese character)."""
    return int(sum(0.3 if ord(ch) < 128 else 2.2 for ch in text)) + 4


def fit(text, tokens):
    """The longest prefix of ``text`` whose estimate stays within ``tokens``."""
    while text and approx_tokens(text) > tokens:
        text = text[: int(len(text) * 0.9)]
    return text


class Harness:
    def __init__(self, lm, train):
        self.lm = lm

    def predict(self, x):
        room = int(self.lm.context_window * 0.9) - ANSWER_TOKENS - approx_tokens(INSTRUCTION)
        return self.lm(INSTRUCTION + fit(x, room), max_tokens=ANSWER_TOKENS)
