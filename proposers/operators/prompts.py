"""Operators on what the task model is asked: the answer-format sentence, answer length, shots shown.

They edit the seeds' module constants (``INSTRUCTION``/``SYSTEM``, ``ANSWER_TOKENS``, ``K``, ``SHOT_CHARS``) and
``max_tokens=`` arguments, so they fit every task. Each setting has a family of operators, one per value of a
grid (``retrieve_k1``, ``retrieve_k2``, ...), besides the relative steps (``more_retrieved``: twice as many).
Retrieval sizes never push a prompt past the model's context window: the seeds that retrieve drop their least
similar shots until the prompt fits ``lm.context_window``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from metaharness.proposers.operators.base import Operator
from metaharness.proposers.operators.editing import (
    SourceEditor,
    add_constants,
    append_to_init,
    constant,
    module_constants,
    replace_all,
    set_constant,
)

PROMPT_CONSTANT = re.compile(r"^[A-Z_]*(INSTRUCTION|SYSTEM|PROMPT)[A-Z_]*$")
FORMAT_SENTENCE = (
    " Reply with the final answer only, in exactly the required format, with no explanation before or after it."
)
# The answer-format sentences, one operator each (a program carries at most one of them).
FORMAT_SENTENCES = {
    "answer_format": (FORMAT_SENTENCE, "answer only, exact format"),
    "answer_format_short": (" Give only the answer.", "only the answer"),
    "answer_format_examples": (
        " Write the answer exactly as the answers in the examples are written.",
        "the answer written like the examples' answers",
    ),
}


def _prompt_constants(editor: SourceEditor) -> list[tuple[str, ast.expr]]:
    """Module-level prompt text constants (``INSTRUCTION = "..."``): their names and value expressions."""
    return [
        (name, value)
        for name, value in module_constants(editor)
        if PROMPT_CONSTANT.match(name) and not isinstance(value, (ast.List, ast.Dict, ast.Tuple))
    ]


def _format_applies(editor: SourceEditor) -> bool:
    return bool(_prompt_constants(editor)) and not any(s.strip() in editor.source for s, _ in FORMAT_SENTENCES.values())


def _format_instruction(name: str) -> Callable[[str], tuple[str, str]]:
    sentence, what = FORMAT_SENTENCES[name]

    def apply(source: str) -> tuple[str, str]:
        editor = SourceEditor(source)
        constant_name, value = _prompt_constants(editor)[0]
        new = editor.replace(value, f"(\n    ({editor.segment(value)})\n    + {sentence!r}\n)")
        return new, f"append an answer-format instruction to {constant_name}: {what}"

    return apply


ANSWER_CAP = 48
ANSWER_TOKENS_GRID = (16, 32, 64, 96, 128, 256)
TOKENS_CONSTANT = re.compile(r"^(ANSWER_TOKENS|MAX_TOKENS|MAX_NEW_TOKENS)$")


def _answer_settings(editor: SourceEditor) -> list[tuple[ast.Constant, int]]:
    """Integer answer-length settings, with their values: ``max_tokens=N`` in the harness's calls and
    ``ANSWER_TOKENS = N``."""
    found: list[ast.expr] = []
    for node in ast.walk(editor.harness() or editor.tree):
        if isinstance(node, ast.Call):
            found += [kw.value for kw in node.keywords if kw.arg == "max_tokens"]
    found += [value for name, value in module_constants(editor) if TOKENS_CONSTANT.match(name)]
    return [(v, v.value) for v in found if isinstance(v, ast.Constant) and type(v.value) is int]


def _long_answer_settings(editor: SourceEditor) -> list[ast.Constant]:
    return [node for node, value in _answer_settings(editor) if value > ANSWER_CAP]


def _shorter_answers(source: str) -> tuple[str, str]:
    new = replace_all(source, list(_long_answer_settings(SourceEditor(source))), str(ANSWER_CAP))
    return new, f"cap the task model's answers at {ANSWER_CAP} tokens (direct answers, less rambling)"


def _answer_tokens(n: int) -> Operator:
    def applies(editor: SourceEditor) -> bool:
        return any(value != n for _, value in _answer_settings(editor))

    def apply(source: str) -> tuple[str, str]:
        settings = _answer_settings(SourceEditor(source))
        old = "/".join(str(v) for v in dict.fromkeys(value for _, value in settings))
        return replace_all(source, [node for node, _ in settings], str(n)), f"answer length {old} -> {n} tokens"

    return Operator(f"answer_tokens_{n}", f"answers of at most {n} tokens", applies, apply, family="answer_tokens")


K_CONSTANT = re.compile(
    r"^(TOP_K|K|N_SHOTS|NUM_SHOTS|N_EXAMPLES|NUM_EXAMPLES|N_NEIGHBOURS|N_NEIGHBORS|SHOTS|RETRIEVE_K)$"
)
RETRIEVE_K_GRID = (1, 2, 3, 4, 6, 12, 24)


def _k_constant(editor: SourceEditor) -> tuple[str, ast.Constant, int] | None:
    """The module's retrieval-size constant (``TOP_K = 8``): its name, value node and value."""
    for name, value in module_constants(editor):
        if K_CONSTANT.match(name) and isinstance(value, ast.Constant):
            k = value.value
            if isinstance(k, int) and not isinstance(k, bool):
                return name, value, k
    return None


def _retrieve(new_k: Callable[[int], int]) -> Callable[[str], tuple[str, str]]:
    def apply(source: str) -> tuple[str, str]:
        editor = SourceEditor(source)
        found = _k_constant(editor)
        assert found is not None  # applies() checked it
        name, value, old = found
        new = new_k(old)
        verb = "retrieve" if new else "turn retrieval off:"
        return editor.replace(value, str(new)), f"{verb} {name} {old} -> {new} examples"

    return apply


def _by_factor(factor: float) -> Callable[[int], int]:
    def new_k(old: int) -> int:
        new = max(1, round(old * factor)) if factor > 0 else 0
        if new == old:
            new = old + 1 if factor > 1 else max(0, old - 1)
        return new

    return new_k


def _k_applies(factor: float) -> Callable[[SourceEditor], bool]:
    def applies(editor: SourceEditor) -> bool:
        found = _k_constant(editor)
        if found is None:
            return False
        k = found[2]
        return k > 0 if factor < 1 else k < 64

    return applies


def _retrieve_k(k: int) -> Operator:
    def applies(editor: SourceEditor) -> bool:
        found = _k_constant(editor)
        return found is not None and found[2] != k

    return Operator(f"retrieve_k{k}", f"retrieve {k} examples", applies, _retrieve(lambda old: k), family="retrieve_k")


# Few-shot harnesses that show a prefix of the training set (``self.shots``): how many shots they may show.
FEW_SHOT_GRID = (1, 2, 4, 8, 16, 32)


def _has_shots(editor: SourceEditor) -> bool:
    init = editor.method("__init__")
    return init is not None and any(
        isinstance(t, ast.Attribute) and t.attr == "shots" and isinstance(t.value, ast.Name) and t.value.id == "self"
        for node in ast.walk(init)
        if isinstance(node, ast.Assign)
        for t in node.targets
    )


def _few_shot_k(k: int) -> Operator:
    def applies(editor: SourceEditor) -> bool:
        return _has_shots(editor) and constant(editor, "MAX_SHOTS") != k

    def apply(source: str) -> tuple[str, str]:
        old = constant(source, "MAX_SHOTS")
        if old is None:
            source = add_constants(source, {"MAX_SHOTS": k}, "Few-shot examples shown at most (the first ones).")
            source = append_to_init(source, "self.shots = self.shots[:MAX_SHOTS]\n")
            return source, f"show at most the first {k} training examples as shots (as many as fit before)"
        return set_constant(source, "MAX_SHOTS", k), f"shots shown MAX_SHOTS {old} -> {k}"

    return Operator(
        f"few_shot_{k}", f"at most {k} few-shot examples in the prompt", applies, apply, family="few_shot_k"
    )


SHOT_CHARS_GRID = (150, 200, 300, 400, 600, 800)


def _shot_chars(n: int) -> Operator:
    def applies(editor: SourceEditor) -> bool:
        value = constant(editor, "SHOT_CHARS")
        return isinstance(value, int) and value != n

    def apply(source: str) -> tuple[str, str]:
        old = constant(source, "SHOT_CHARS")
        return set_constant(source, "SHOT_CHARS", n), f"each shot's text cut to {n} characters (SHOT_CHARS {old})"

    return Operator(f"shot_chars_{n}", f"shots cut to {n} characters", applies, apply, family="shot_chars")


PROMPT_OPERATORS: tuple[Operator, ...] = (
    *(
        Operator(
            name,
            "an answer-format instruction in the prompt",
            _format_applies,
            _format_instruction(name),
            family="answer_format",
        )
        for name in FORMAT_SENTENCES
    ),
    Operator(
        "shorter_answers",
        f"cap answer length at {ANSWER_CAP} tokens",
        lambda e: bool(_long_answer_settings(e)),
        _shorter_answers,
        family="answer_tokens",
    ),
    *(_answer_tokens(n) for n in ANSWER_TOKENS_GRID),
    Operator(
        "more_retrieved",
        "retrieve twice as many examples",
        _k_applies(2.0),
        _retrieve(_by_factor(2.0)),
        family="retrieve_k",
    ),
    Operator(
        "fewer_retrieved",
        "retrieve half as many examples",
        _k_applies(0.5),
        _retrieve(_by_factor(0.5)),
        family="retrieve_k",
    ),
    Operator(
        "retrieval_off",
        "no retrieved examples (k = 0)",
        _k_applies(0.0),
        _retrieve(_by_factor(0.0)),
        family="retrieve_k",
    ),
    *(_retrieve_k(k) for k in RETRIEVE_K_GRID),
    *(_few_shot_k(k) for k in FEW_SHOT_GRID),
    *(_shot_chars(n) for n in SHOT_CHARS_GRID),
)
