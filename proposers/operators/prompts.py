"""Operators on what the task model is asked: the prompt's answer-format sentence, answer length, shots retrieved.

They edit the seeds' module constants (``INSTRUCTION``/``SYSTEM``, ``ANSWER_TOKENS``, ``K``) and ``max_tokens=``
arguments, so they fit every task. Retrieval sizes never push a prompt past the model's context window: the seeds
that retrieve drop their least similar shots until the prompt fits ``lm.context_window``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from metaharness.proposers.operators.base import Operator
from metaharness.proposers.operators.editing import SourceEditor, module_constants

PROMPT_CONSTANT = re.compile(r"^[A-Z_]*(INSTRUCTION|SYSTEM|PROMPT)[A-Z_]*$")
FORMAT_SENTENCE = (
    " Reply with the final answer only, in exactly the required format, with no explanation before or after it."
)


def _prompt_constants(editor: SourceEditor) -> list[tuple[str, ast.expr]]:
    """Module-level prompt text constants (``INSTRUCTION = "..."``): their names and value expressions."""
    return [
        (name, value)
        for name, value in module_constants(editor)
        if PROMPT_CONSTANT.match(name) and not isinstance(value, (ast.List, ast.Dict, ast.Tuple))
    ]


def _format_applies(editor: SourceEditor) -> bool:
    return bool(_prompt_constants(editor)) and FORMAT_SENTENCE.strip() not in editor.source


def _format_instruction(source: str) -> tuple[str, str]:
    editor = SourceEditor(source)
    name, value = _prompt_constants(editor)[0]
    new = editor.replace(value, f"(\n    ({editor.segment(value)})\n    + {FORMAT_SENTENCE!r}\n)")
    return new, f"append an answer-format instruction to {name}: answer only, exact format"


ANSWER_CAP = 48
TOKENS_CONSTANT = re.compile(r"^(ANSWER_TOKENS|MAX_TOKENS|MAX_NEW_TOKENS)$")


def _long_answer_settings(editor: SourceEditor) -> list[ast.Constant]:
    """Integer answer-length settings above the cap: ``max_tokens=N`` in calls and ``ANSWER_TOKENS = N``."""
    found: list[ast.expr] = []
    for node in ast.walk(editor.tree):
        if isinstance(node, ast.Call):
            found += [kw.value for kw in node.keywords if kw.arg == "max_tokens"]
    found += [value for name, value in module_constants(editor) if TOKENS_CONSTANT.match(name)]
    return [v for v in found if isinstance(v, ast.Constant) and type(v.value) is int and v.value > ANSWER_CAP]


def _shorter_answers(source: str) -> tuple[str, str]:
    editor = SourceEditor(source)
    # Replace from the end so earlier offsets stay valid.
    for value in sorted(_long_answer_settings(editor), key=lambda v: (v.lineno, v.col_offset), reverse=True):
        editor = SourceEditor(editor.replace(value, str(ANSWER_CAP)))
    return editor.source, f"cap the task model's answers at {ANSWER_CAP} tokens (direct answers, less rambling)"


K_CONSTANT = re.compile(
    r"^(TOP_K|K|N_SHOTS|NUM_SHOTS|N_EXAMPLES|NUM_EXAMPLES|N_NEIGHBOURS|N_NEIGHBORS|SHOTS|RETRIEVE_K)$"
)


def _k_constant(editor: SourceEditor) -> tuple[str, ast.Constant, int] | None:
    """The module's retrieval-size constant (``TOP_K = 8``): its name, value node and value."""
    for name, value in module_constants(editor):
        if K_CONSTANT.match(name) and isinstance(value, ast.Constant):
            k = value.value
            if isinstance(k, int) and not isinstance(k, bool):
                return name, value, k
    return None


def _set_k(factor: float) -> Callable[[str], tuple[str, str]]:
    def apply(source: str) -> tuple[str, str]:
        editor = SourceEditor(source)
        found = _k_constant(editor)
        assert found is not None  # applies() checked it
        name, value, old = found
        new = max(1, round(old * factor)) if factor > 0 else 0
        if new == old:
            new = old + 1 if factor > 1 else max(0, old - 1)
        verb = "retrieve" if new else "turn retrieval off:"
        return editor.replace(value, str(new)), f"{verb} {name} {old} -> {new} examples"

    return apply


def _k_applies(factor: float) -> Callable[[SourceEditor], bool]:
    def applies(editor: SourceEditor) -> bool:
        found = _k_constant(editor)
        if found is None:
            return False
        k = found[2]
        return k > 0 if factor < 1 else k < 64

    return applies


PROMPT_OPERATORS: tuple[Operator, ...] = (
    Operator("answer_format", "an answer-format instruction in the prompt", _format_applies, _format_instruction),
    Operator(
        "shorter_answers",
        f"cap answer length at {ANSWER_CAP} tokens",
        lambda e: bool(_long_answer_settings(e)),
        _shorter_answers,
    ),
    Operator("more_retrieved", "retrieve twice as many examples", _k_applies(2.0), _set_k(2.0)),
    Operator("fewer_retrieved", "retrieve half as many examples", _k_applies(0.5), _set_k(0.5)),
    Operator("retrieval_off", "no retrieved examples (k = 0)", _k_applies(0.0), _set_k(0.0)),
)
