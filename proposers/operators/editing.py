"""Source editing for operators: locate with ``ast``, splice text into the original source.

Edits never regenerate code from the tree, so comments and layout survive and ``git diff`` between a candidate and
its parent shows exactly the revision. Every function takes and returns the complete source of a harness file.
"""

from __future__ import annotations

import ast
import re
import textwrap
from functools import lru_cache

# Parsed statements and expressions: the nodes that carry source positions.
Located = ast.stmt | ast.expr


class SourceEditor:
    """Splices edits into source text at positions found by ``ast`` (1-based lines as ast reports them)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.tree = parse(source)
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
        end = self._offset(end_line(node), node.end_col_offset or 0)
        return self.source[:start] + text + self.source[end:]

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.source, node) or ""

    def insert_lines(self, after_line: int, text: str) -> str:
        """Insert ``text`` (whole lines) after 1-based line ``after_line`` (0 = at the top)."""
        head = "".join(self.lines[:after_line])
        if head and not head.endswith("\n"):
            head += "\n"
        return head + text + "".join(self.lines[after_line:])


@lru_cache(maxsize=64)
def parse(source: str) -> ast.Module:
    """Parsed source (raises SyntaxError), shared between editors: a search edits the same programs many times, and
    editors only read the tree. The last 64 are kept: a longer memory found hardly more hits, and its millions of
    tree nodes were what the cyclic garbage collector went over again and again."""
    return ast.parse(source)


def _char_col(line: str, byte_col: int) -> int:
    """ast column offsets count UTF-8 bytes; convert to a character index in ``line``."""
    return len(line.encode()[:byte_col].decode(errors="ignore"))


def end_line(node: Located) -> int:
    """The last line of a parsed node (ast always sets it for parsed source; the type allows None)."""
    assert node.end_lineno is not None
    return node.end_lineno


def module_constants(editor: SourceEditor) -> list[tuple[str, ast.expr]]:
    """Module-level assignments of one name (``NAME = value``), in order: the seeds' tunable settings."""
    return [
        (node.targets[0].id, node.value)
        for node in editor.tree.body
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
    ]


def constant(source: str | SourceEditor, name: str) -> object:
    """The literal value of the module constant ``name`` (``None`` when absent or not a literal)."""
    editor = source if isinstance(source, SourceEditor) else SourceEditor(source)
    for key, value in module_constants(editor):
        if key == name:
            try:
                return ast.literal_eval(value)
            except ValueError:
                return None
    return None


def set_constant(source: str, name: str, value: object) -> str:
    """``source`` with the module constant ``name`` set to the literal ``value`` (it must exist)."""
    editor = SourceEditor(source)
    node = next(v for key, v in module_constants(editor) if key == name)
    return editor.replace(node, repr(value))


def add_constants(source: str, constants: dict[str, object], comment: str) -> str:
    """Add module constants (with a ``# comment`` line) after the last top-level import or constant, so a
    revision's settings sit where a reader looks for the seed's own; existing names are left alone."""
    editor = SourceEditor(source)
    missing = {k: v for k, v in constants.items() if not editor.defines(k)}
    if not missing:
        return source
    anchors = [n for n in editor.tree.body if isinstance(n, (ast.Import, ast.ImportFrom, ast.Assign))]
    doc = editor.tree.body[0] if editor.tree.body and isinstance(editor.tree.body[0], ast.Expr) else None
    after = end_line(anchors[-1]) if anchors else (end_line(doc) if doc is not None else 0)
    block = "".join(f"# {line}\n" for line in textwrap.wrap(comment, 116)) + "".join(
        f"{k} = {v!r}\n" for k, v in missing.items()
    )
    return editor.insert_lines(after, ("\n" if after else "") + block)


def indent_of(editor: SourceEditor, node: Located) -> str:
    line = editor.lines[node.lineno - 1]
    return line[: len(line) - len(line.lstrip())]


def indent(block: str, prefix: str) -> str:
    return "".join(prefix + line if line.strip() else line for line in block.splitlines(keepends=True))


def append_helpers(source: str, helpers: dict[str, str]) -> str:
    """Append each helper (name -> code) the module does not define yet."""
    editor = SourceEditor(source)
    missing = [code for name, code in helpers.items() if not editor.defines(name)]
    if not missing:
        return source
    return source.rstrip("\n") + "\n\n\n" + "\n\n\n".join(code.strip("\n") + "\n" for code in missing)


def wrap_predict(source: str, tag: str, body: str) -> str:
    """Rename ``Harness.predict`` to ``_predict_before_<tag>`` and add a new ``predict`` whose ``body`` (method
    body lines, unindented) post-processes ``answer = self._predict_before_<tag>(x)``."""
    return wrap_predict_around(source, tag, f"answer = self._predict_before_{tag}(x)\n" + body)


def wrap_predict_around(source: str, tag: str, body: str) -> str:
    """Rename ``Harness.predict`` to ``_predict_before_<tag>`` and add a new ``predict`` with ``body`` (method body
    lines, unindented), which calls ``self._predict_before_<tag>(x)`` itself (after preparing what it needs)."""
    editor = SourceEditor(source)
    predict = editor.method("predict")
    cls = editor.harness()
    assert predict is not None and cls is not None
    inner = f"_predict_before_{tag}"
    line = editor.lines[predict.lineno - 1]
    editor.lines[predict.lineno - 1] = line.replace("def predict(", f"def {inner}(", 1)
    method = "\ndef predict(self, x):\n" + indent(body, "    ")
    return SourceEditor("".join(editor.lines)).insert_lines(end_line(cls), indent(method, indent_of(editor, predict)))


def model_call_method(editor: SourceEditor) -> ast.FunctionDef | None:
    """The method that does what ``predict`` did before any wrapper: follow ``predict`` through the
    ``self._predict_before_<tag>(...)`` calls of wrappers to the innermost method."""
    method = editor.method("predict")
    while method is not None:
        inner = [
            node.func.attr
            for node in ast.walk(method)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr.startswith("_predict_before_")
        ]
        if not inner:
            return method
        method = editor.method(inner[0])
    return None


def replace_model_call(source: str, body: str) -> str:
    """``source`` with the body of the innermost predict method (``model_call_method``) replaced by ``body``
    (method body lines, unindented; the method's parameters are ``self`` and ``x``): what the harness asks the
    model changes, every wrapper around it (snapping, votes) stays."""
    editor = SourceEditor(source)
    method = model_call_method(editor)
    assert method is not None
    first, last = method.body[0], method.body[-1]
    prefix = indent_of(editor, first)
    head = "".join(editor.lines[: first.lineno - 1])
    tail = "".join(editor.lines[end_line(last) :])
    argument = method.args.args[1].arg if len(method.args.args) > 1 else "x"
    code = body if argument == "x" else f"x = {argument}\n" + body
    return head + indent(code, prefix) + tail


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
    prefix = indent_of(editor, anchor)
    if has_doc and len(init.body) == 1:
        return editor.insert_lines(end_line(first), indent(code, prefix))
    return editor.insert_lines(anchor.lineno - 1, indent(code, prefix))


def append_to_init(source: str, code: str) -> str:
    """Insert ``code`` (unindented statements) after the last statement of ``Harness.__init__``."""
    editor = SourceEditor(source)
    init = editor.method("__init__")
    assert init is not None
    last = init.body[-1]
    return editor.insert_lines(end_line(last), indent(code, indent_of(editor, last)))


def replace_all(source: str, nodes: list[Located], text: str) -> str:
    """``source`` with every node in ``nodes`` replaced by ``text`` (from the last, so earlier offsets hold)."""
    editor = SourceEditor(source)
    for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        editor = SourceEditor(editor.replace(node, text))
    return editor.source


def harness_editor(source: str) -> SourceEditor | None:
    """An editor for ``source`` when it parses and has ``Harness.__init__`` and ``Harness.predict``, else None."""
    try:
        editor = SourceEditor(source)
    except SyntaxError:
        return None
    if editor.method("predict") is None or editor.method("__init__") is None:
        return None
    return editor
