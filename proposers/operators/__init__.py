"""A library of program transformations of harness source: the revisions the offline proposer plans over.

Every operator is a real edit of a harness file (the contract of :mod:`metaharness.harness`: ``class Harness`` with
``__init__(self, lm, train)`` and ``predict(self, x)``). Operators locate what they change with :mod:`ast` and
splice text into the original source, so comments and layout survive and ``git diff`` between a candidate and its
parent shows exactly the revision. Each operator says whether it applies (:meth:`Operator.applies`) and returns the
new source with a one-line summary (:meth:`Operator.apply`).

The edits use three hooks every harness has, plus the seeds' module constants where they exist:

- wrapping ``predict``: the old method is renamed and a new ``predict`` post-processes its answer (snapping the
  answer to a known label, voting with retrieved neighbours);
- the start of ``__init__``: ``lm`` or ``train`` are wrapped or reordered before the harness uses them (an
  instruction added to every system prompt, label-balanced few-shot order);
- keyword arguments of ``lm(...)`` calls (``max_tokens``) and upper-case module constants (``INSTRUCTION``,
  ``SYSTEM``, ``TOP_K``, ...), which the seed harnesses expose as their tunable parts.

Helpers that several operators share (label snapping, the neighbour index) are appended to the module once.

>>> src = open("candidates/symptom2disease/zero_shot.py").read()  # doctest: +SKIP
>>> revision = get_operator("snap_to_labels").apply(src)  # doctest: +SKIP
>>> revision.summary  # doctest: +SKIP
'snap the answer to the closest training label (normalised, then fuzzy match)'
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

from metaharness.errors import InputError

# Parsed statements and expressions: the nodes that carry source positions.
Located = ast.stmt | ast.expr


@dataclass(frozen=True)
class Revision:
    """A transformed harness: the complete new source and what changed, in one line."""

    source: str
    summary: str
    operator: str


class SourceEditor:
    """Splices edits into source text at positions found by :mod:`ast` (1-based lines as ast reports them)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.tree = ast.parse(source)
        self.lines = re.findall(r"[^\n]*\n|[^\n]+$", source)  # ast counts lines by "\n" only

    def harness(self) -> ast.ClassDef | None:
        return next((n for n in self.tree.body if isinstance(n, ast.ClassDef) and n.name == "Harness"), None)

    def method(self, name: str) -> ast.FunctionDef | None:
        cls = self.harness()
        if cls is None:
            return None
        return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)

    def defines(self, name: str) -> bool:
        return any(
            isinstance(n, (ast.FunctionDef, ast.ClassDef))
            and n.name == name
            or isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
            for n in self.tree.body
        )

    def _offset(self, line: int, col: int) -> int:
        return sum(len(text) for text in self.lines[: line - 1]) + _char_col(self.lines[line - 1], col)

    def replace(self, node: Located, text: str) -> str:
        start = self._offset(node.lineno, node.col_offset)
        end = self._offset(_end_line(node), node.end_col_offset or 0)
        return self.source[:start] + text + self.source[end:]

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.source, node) or ""

    def insert_lines(self, after_line: int, text: str) -> str:
        """Insert ``text`` (whole lines) after 1-based line ``after_line`` (0 = at the top)."""
        head = "".join(self.lines[:after_line])
        if head and not head.endswith("\n"):
            head += "\n"
        return head + text + "".join(self.lines[after_line:])


def _char_col(line: str, byte_col: int) -> int:
    """ast column offsets count UTF-8 bytes; convert to a character index in ``line``."""
    return len(line.encode()[:byte_col].decode(errors="ignore"))


def module_constants(editor: SourceEditor) -> list[tuple[str, ast.expr]]:
    """Module-level assignments of one name (``NAME = value``), in order: the seeds' tunable settings."""
    return [
        (node.targets[0].id, node.value)
        for node in editor.tree.body
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
    ]


def _end_line(node: Located) -> int:
    """The last line of a parsed node (ast always sets it for parsed source; the type allows None)."""
    assert node.end_lineno is not None
    return node.end_lineno


def _indent_of(editor: SourceEditor, node: Located) -> str:
    line = editor.lines[node.lineno - 1]
    return line[: len(line) - len(line.lstrip())]


def _indent(block: str, prefix: str) -> str:
    return "".join(prefix + line if line.strip() else line for line in block.splitlines(keepends=True))


def _append_helpers(source: str, helpers: dict[str, str]) -> str:
    """Append each helper (name -> code) the module does not define yet."""
    editor = SourceEditor(source)
    missing = [code for name, code in helpers.items() if not editor.defines(name)]
    if not missing:
        return source
    return source.rstrip("\n") + "\n\n\n" + "\n\n\n".join(code.strip("\n") + "\n" for code in missing)


def wrap_predict(source: str, tag: str, body: str) -> str:
    """Rename ``Harness.predict`` to ``_predict_before_<tag>`` and add a new ``predict`` whose ``body`` (method
    body lines, unindented) post-processes ``answer = self._predict_before_<tag>(x)``."""
    editor = SourceEditor(source)
    predict = editor.method("predict")
    cls = editor.harness()
    assert predict is not None and cls is not None
    inner = f"_predict_before_{tag}"
    line = editor.lines[predict.lineno - 1]
    renamed_line = line.replace("def predict(", f"def {inner}(", 1)
    editor.lines[predict.lineno - 1] = renamed_line
    indent = _indent_of(editor, predict)
    method = f"\ndef predict(self, x):\n    answer = self.{inner}(x)\n" + _indent(body, "    ")
    return SourceEditor("".join(editor.lines)).insert_lines(_end_line(cls), _indent(method, indent))


def prepend_to_init(source: str, code: str) -> str:
    """Insert ``code`` (unindented statements) as the first statements of ``Harness.__init__`` (after a docstring)."""
    editor = SourceEditor(source)
    init = editor.method("__init__")
    assert init is not None
    first = init.body[0]
    has_doc = (
        isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
    )
    anchor = init.body[1] if has_doc and len(init.body) > 1 else first
    indent = _indent_of(editor, anchor)
    if has_doc and len(init.body) == 1:
        return editor.insert_lines(_end_line(first), _indent(code, indent))
    return editor.insert_lines(anchor.lineno - 1, _indent(code, indent))


def _is_harness(source: str) -> SourceEditor | None:
    try:
        editor = SourceEditor(source)
    except SyntaxError:
        return None
    if editor.method("predict") is None or editor.method("__init__") is None:
        return None
    return editor


# ---------------------------------------------------------------- helper code appended to harnesses

LABEL_HELPERS = {
    "_known_labels": '''
def _known_labels(train, limit=100):
    """Distinct training answers when they form a small label set (a classification task), else []."""
    targets = [str(item["target"]).strip() for item in train]
    distinct = sorted(set(targets))
    return distinct if 1 < len(distinct) <= min(limit, max(2, len(targets) // 2)) else []
''',
    "_answer_span": '''
def _answer_span(text):
    """(start, end) of the answer inside the first [TAG]...[/TAG] pair, else of the whole text."""
    import re

    match = re.search(r"\\[([A-Za-z_]+)\\](.*?)\\[/\\1\\]", text, re.S)
    return (match.start(2), match.end(2)) if match else (0, len(text))
''',
    "_snap_label": '''
def _snap_label(text, labels):
    """The label the text names: exact after normalising, else the earliest label mentioned, else the closest
    spelling (difflib ratio >= 0.6), else None."""
    import difflib
    import re

    def norm(value):
        return re.sub(r"[\\s_]+", " ", re.sub(r"[.!?,;:'\\"]+$", "", value.strip().lower()))

    by_norm = {norm(label): label for label in labels}
    said = norm(text)
    if said in by_norm:
        return by_norm[said]
    mentioned = [(said.find(key), -len(key), label) for key, label in by_norm.items() if key and key in said]
    if mentioned:
        return min(mentioned)[2]
    close = difflib.get_close_matches(said, list(by_norm), n=1, cutoff=0.6)
    return by_norm[close[0]] if close else None
''',
    "_with_answer": '''
def _with_answer(text, label):
    """The response with its answer span replaced by ``label`` (tags kept)."""
    start, end = _answer_span(text)
    return text[:start] + label + text[end:] if (start, end) != (0, len(text)) else label
''',
}

NEIGHBOUR_HELPERS = {
    "_NeighbourIndex": '''
class _NeighbourIndex:
    """TF-IDF cosine over word tokens (and single CJK characters) of the training inputs; stdlib only."""

    def __init__(self, train):
        import math
        from collections import Counter

        self.targets = [str(item["target"]).strip() for item in train]
        docs = [Counter(self.tokens(item["input"])) for item in train]
        df = Counter(token for doc in docs for token in doc)
        self.idf = {token: math.log((1 + len(docs)) / (1 + count)) + 1 for token, count in df.items()}
        self.vectors = [self.weigh(doc) for doc in docs]

    @staticmethod
    def tokens(text):
        import re

        return re.findall(r"[a-z0-9]+|[^\\x00-\\x7f]", str(text).lower())

    def weigh(self, counts):
        import math

        vector = {t: c * self.idf.get(t, 1.0) for t, c in counts.items()}
        norm = math.sqrt(sum(v * v for v in vector.values())) or 1.0
        return {t: v / norm for t, v in vector.items()}

    def nearest(self, text, k):
        from collections import Counter

        query = self.weigh(Counter(self.tokens(text)))
        sims = [(sum(w * vec.get(t, 0.0) for t, w in query.items()), i) for i, vec in enumerate(self.vectors)]
        return [(sim, self.targets[i]) for sim, i in sorted(sims, reverse=True)[:k]]
''',
}


# ---------------------------------------------------------------- operators


@dataclass(frozen=True)
class Operator:
    """A named transformation: ``applies(source)`` says whether it can edit this harness, ``apply`` does it."""

    name: str
    description: str
    _applies: Callable[[SourceEditor], bool]
    _apply: Callable[[str], tuple[str, str]]
    # Only useful when the training answers form a small label set (classification); see :func:`label_set`.
    needs_labels: bool = False
    # Changes only what happens after the model answers: the model calls are the parent's (served from the cache).
    post_processing: bool = False

    def applies(self, source: str) -> bool:
        editor = _is_harness(source)
        return editor is not None and self._applies(editor)

    def apply(self, source: str) -> Revision:
        if not self.applies(source):
            raise InputError(f"Operator '{self.name}' does not apply to this harness source.")
        new_source, summary = self._apply(source)
        compile(new_source, "<harness>", "exec")  # an operator must never produce a syntax error
        return Revision(new_source, summary, self.name)


# Method-body prefix of the label post-processors: leave the answer alone when there are no labels to snap to;
# else find the span of the answer that names the label.
_LABELLED_ANSWER = (
    "labels = self._label_set\n"
    "if not labels or not isinstance(answer, str):\n"
    "    return answer\n"
    "start, end = _answer_span(answer)\n"
)


def _snap(source: str) -> tuple[str, str]:
    source = wrap_predict(
        source,
        "snap",
        _LABELLED_ANSWER + "label = _snap_label(answer[start:end], labels) or _snap_label(answer, labels)\n"
        "return _with_answer(answer, label) if label else answer\n",
    )
    source = prepend_to_init(source, "self._label_set = _known_labels(train)\n")
    return _append_helpers(
        source, LABEL_HELPERS
    ), "snap the answer to the closest training label (normalised, then fuzzy match)"


def _with_neighbours(source: str) -> str:
    """Build the training labels and the neighbour index in ``__init__``, with the helpers they need."""
    source = prepend_to_init(
        source, "self._neighbours = _NeighbourIndex(train)\nself._label_set = _known_labels(train)\n"
    )
    return _append_helpers(source, {**LABEL_HELPERS, **NEIGHBOUR_HELPERS})


def _vote(k: int, model_weight: float) -> Callable[[str], tuple[str, str]]:
    def apply(source: str) -> tuple[str, str]:
        tag = f"vote{k}"
        source = wrap_predict(
            source,
            tag,
            _LABELLED_ANSWER + "from collections import Counter\n"
            "\n"
            "votes = Counter()\n"
            f"for sim, target in self._neighbours.nearest(x, {k}):\n"
            "    votes[target] += sim\n"
            "said = _snap_label(answer[start:end], labels)\n"
            "if said:\n"
            f"    votes[said] += {model_weight} * max(votes.values(), default=1.0)\n"
            "if not votes:\n"
            "    return answer\n"
            "return _with_answer(answer, votes.most_common(1)[0][0])\n",
        )
        source = _with_neighbours(source)
        return source, (
            f"vote between the model's answer (weight {model_weight} x the top vote) and the labels of the {k} most "
            "similar training examples (TF-IDF)"
        )

    return apply


def _neighbour_fallback(source: str) -> tuple[str, str]:
    source = wrap_predict(
        source,
        "fallback",
        _LABELLED_ANSWER + "if _snap_label(answer[start:end], labels):\n"
        "    return answer\n"
        "nearest = self._neighbours.nearest(x, 1)\n"
        "return _with_answer(answer, nearest[0][1]) if nearest else answer\n",
    )
    source = _with_neighbours(source)
    return source, "when the answer names no known label, answer with the label of the most similar training example"


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


def _label_hint(source: str) -> tuple[str, str]:
    source = prepend_to_init(source, "lm = _LabelHintLM(lm, _known_labels(train))\n")
    source = _append_helpers(
        source,
        {
            **LABEL_HELPERS,
            "_LabelHintLM": '''
class _LabelHintLM:
    """The task model with the list of possible answers added to every system prompt."""

    def __init__(self, lm, labels):
        self._lm = lm
        self._hint = "Possible answers: " + "; ".join(labels) + "." if labels else ""

    def __getattr__(self, name):
        return getattr(self._lm, name)

    def __call__(self, prompt_or_messages, *, system=None, **options):
        if self._hint:
            system = (system + "\\n\\n" if system else "") + self._hint
        return self._lm(prompt_or_messages, system=system, **options)
''',
        },
    )
    return source, "add the list of possible answers (distinct training labels) to every system prompt"


def _has_label_list(editor: SourceEditor) -> bool:
    return not any(editor.defines(name) for name in ("LABELS", "_LabelHintLM"))


def _balanced_order(source: str) -> tuple[str, str]:
    source = prepend_to_init(source, "train = _label_round_robin(train)\n")
    source = _append_helpers(
        source,
        {
            "_label_round_robin": '''
def _label_round_robin(train):
    """Training examples reordered round-robin over their answers, so any prefix covers the labels evenly."""
    from collections import defaultdict

    groups = defaultdict(list)
    for item in train:
        groups[str(item["target"]).strip()].append(item)
    queues = list(groups.values())
    ordered = []
    while any(queues):
        for queue in queues:
            if queue:
                ordered.append(queue.pop(0))
    return ordered
''',
        },
    )
    return source, "order the training examples round-robin over labels (few-shot prefixes cover every label)"


def _uses_train(editor: SourceEditor) -> bool:
    init = editor.method("__init__")
    names = {n.id for n in ast.walk(init) if isinstance(n, ast.Name)} if init else set()
    return "train" in names and not editor.defines("_label_round_robin")


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


def _no_wrap(tag: str) -> Callable[[SourceEditor], bool]:
    return lambda editor: f"_predict_before_{tag}" not in editor.source


def _label_post_processor(name: str, description: str, tag: str, apply: Callable[[str], tuple[str, str]]) -> Operator:
    """An operator that wraps ``predict`` (once, under ``tag``) to post-process answers with the training labels."""
    return Operator(name, description, _no_wrap(tag), apply, needs_labels=True, post_processing=True)


OPERATORS: tuple[Operator, ...] = (
    _label_post_processor(
        "snap_to_labels", "output normalisation and fuzzy matching of the answer to a known label", "snap", _snap
    ),
    _label_post_processor(
        "neighbour_vote_3", "vote with the labels of the 3 nearest training examples", "vote3", _vote(3, 1.0)
    ),
    _label_post_processor(
        "neighbour_vote_7", "vote with the labels of the 7 nearest training examples", "vote7", _vote(7, 0.5)
    ),
    _label_post_processor(
        "neighbour_fallback",
        "nearest training example's label when the answer names no label",
        "fallback",
        _neighbour_fallback,
    ),
    Operator("answer_format", "an answer-format instruction in the prompt", _format_applies, _format_instruction),
    Operator(
        "label_list",
        "the list of possible answers in the system prompt",
        _has_label_list,
        _label_hint,
        needs_labels=True,
    ),
    Operator(
        "balanced_shots", "few-shot ordering: round-robin over labels", _uses_train, _balanced_order, needs_labels=True
    ),
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

OPERATOR_NAMES = tuple(op.name for op in OPERATORS)


def get_operator(name: str) -> Operator:
    for op in OPERATORS:
        if op.name == name:
            return op
    raise InputError(f"Unknown operator '{name}': use one of {', '.join(OPERATOR_NAMES)}.")


def label_set(targets: list[str], limit: int = 100) -> list[str]:
    """The distinct training answers when they form a small label set (the rule the generated code applies)."""
    distinct = sorted({str(t).strip() for t in targets})
    return distinct if 1 < len(distinct) <= min(limit, max(2, len(targets) // 2)) else []


def applicable(source: str, *, labelled: bool = True) -> list[Operator]:
    """The operators that can edit this harness source; ``labelled=False`` drops those that need a label set."""
    editor = _is_harness(source)
    if editor is None:
        return []
    return [op for op in OPERATORS if op._applies(editor) and (labelled or not op.needs_labels)]
