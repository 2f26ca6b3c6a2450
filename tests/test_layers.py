"""The package's layers, read from its source: which modules import which, imports inside functions included.

The graph is built with ``ast`` over the tree laid out as installed (``proposers/``, ``tasks/`` and ``candidates/``
as ``metaharness.proposers``, ...), so that ``grep "from proposers"`` finding nothing hides no dependency. An
import under ``if TYPE_CHECKING:`` runs only for the type checker and is left out; importing ``a.b.c`` runs
``a/__init__`` and ``a/b/__init__`` too, and counts as importing them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {
    "metaharness": ROOT / "metaharness",
    "metaharness.proposers": ROOT / "proposers",
    "metaharness.tasks": ROOT / "tasks",
    "metaharness.candidates": ROOT / "candidates",
}
# The layers, from the bottom: a module imports only from its own layer and the layers below it (the package's
# root, which every import of a submodule runs, aside).
LAYERS = (
    ("shared", ("errors", "json_types", "setting", "budget", "candidate", "frontier", "text")),
    ("models", ("models",)),
    ("planner core", ("planner",)),
    ("tasks and seed harnesses", ("tasks", "candidates")),
    ("store and evaluator", ("store", "evaluation")),
    ("search loop", ("search",)),
    ("proposers, report, agent benchmarks", ("proposers", "report", "agents")),
    ("runner", ("runner",)),
    ("experiment grid and command line", ("experiment", "cli", "__main__")),
)


@cache
def modules() -> dict[str, Path]:
    found = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if package == "metaharness" and parts[0] in ("proposers", "tasks", "candidates"):
                continue  # a symlinked layout (as .ci/typecheck.py makes) is the mapped folders themselves
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _module_of(name: str) -> str | None:
    known = modules()
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name: str, path: Path) -> Iterator[tuple[str, bool]]:
    """(imported module, whether the import is inside a function) for every import ``name`` runs."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def visit(node: ast.AST, in_function: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                yield from (found for branch in child.orelse for found in visit(branch, in_function))
                continue
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                yield from ((alias.name, inside) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package
                    for _ in range(child.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}".rstrip(".")
                submodules = [f"{base}.{alias.name}" for alias in child.names if f"{base}.{alias.name}" in modules()]
                yield from ((module, inside) for module in submodules)
                if len(submodules) < len(child.names):
                    yield base, inside
            yield from visit(child, inside)

    yield from visit(ast.parse(path.read_text(encoding="utf-8")), False)


@cache
def graph() -> dict[str, dict[str, bool]]:
    """module -> {imported module: only inside functions}, for the package's own modules."""
    edges: dict[str, dict[str, bool]] = {}
    for name, path in modules().items():
        out = edges.setdefault(name, {})
        for target, inside in _imports(name, path):
            if not target.startswith("metaharness"):
                continue
            module = _module_of(target)
            while module:  # the module and the packages above it, which importing it runs
                if module != name and not name.startswith(module + "."):
                    out[module] = out.get(module, True) and inside
                module = module.rpartition(".")[0] or None
    return edges


def _reaches(start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(graph().get(node, {}))
    return False


def _under(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_graph_sees_the_mapped_folders_and_imports_inside_functions() -> None:
    assert "metaharness.proposers.offline" in modules() and "metaharness.tasks.protocol" in graph()
    assert graph()["metaharness.runner.optimize"]["metaharness.proposers"] is False  # a top-level import
    inside = [(a, b) for a, targets in graph().items() for b, only_inside in targets.items() if only_inside]
    assert inside, "no import inside a function was found: the reader is broken"


def test_no_import_inside_a_function_closes_an_import_cycle() -> None:
    """A cycle that only works because one of its imports waits inside a function is a cycle all the same."""
    closing = {
        (module, target)
        for module, targets in graph().items()
        for target, only_inside in targets.items()
        if only_inside and _reaches(target, module)
    }
    assert closing == set()


def _layer(module: str) -> int:
    part = module.split(".")[1]
    return next(i for i, (_, parts) in enumerate(LAYERS) if part in parts)


def test_every_module_is_in_a_layer() -> None:
    for module in modules():
        if module != "metaharness":
            _layer(module)


def test_a_layer_imports_nothing_from_the_layers_above_it() -> None:
    upward = sorted(
        f"{module} ({LAYERS[_layer(module)][0]}) -> {target} ({LAYERS[_layer(target)][0]})"
        for module, targets in graph().items()
        if module != "metaharness"
        for target in targets
        if target != "metaharness" and _layer(target) > _layer(module)
    )
    assert upward == []
