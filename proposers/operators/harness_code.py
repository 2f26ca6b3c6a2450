"""The code operators copy into the harnesses they write, taken from real modules of this package.

The ``harness_*`` modules beside this one are ordinary Python (linted, type-checked and unit-tested like the rest)
written to the rules of a harness: the standard library only, imported inside each function, no module state.
``definitions(*names)`` gives the source of top-level definitions by name, each with every definition of those
modules it uses, so an operator asks for what its generated code calls and gets a self-contained set to append
(``editing.append_helpers`` skips the names a harness already defines).

>>> sorted(definitions("_snap_labels"))
['_label_atoms', '_snap_label', '_snap_labels']
"""

from __future__ import annotations

import ast
import inspect
from functools import cache
from types import ModuleType

from metaharness.proposers.operators import (
    harness_answers,
    harness_constrained,
    harness_label_models,
    harness_pairing,
    harness_text_index,
)

MODULES: tuple[ModuleType, ...] = (
    harness_answers,
    harness_text_index,
    harness_label_models,
    harness_constrained,
    harness_pairing,
)


@cache
def _library() -> dict[str, tuple[str, frozenset[str]]]:
    """Every top-level definition of ``MODULES``: name -> (source, names it references)."""
    found: dict[str, tuple[str, frozenset[str]]] = {}
    for module in MODULES:
        source = inspect.getsource(module)
        for node in ast.parse(source).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                name = node.name
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
            else:
                continue  # the module docstring
            if name in found:
                raise AssertionError(f"harness code defines {name} twice")
            uses = frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name)) - {name}
            found[name] = (ast.get_source_segment(source, node) or "", uses)
    return found


def names() -> list[str]:
    """Every definition the ``harness_*`` modules hold, in module order."""
    return list(_library())


def definitions(*names: str) -> dict[str, str]:
    """The source of each named definition and of every definition it uses (transitively), the ones used first."""
    library = _library()
    ordered: dict[str, str] = {}

    def add(name: str) -> None:
        if name in ordered:
            return
        code, uses = library[name]
        ordered[name] = ""  # placed before its dependencies are, so a cycle ends here
        for used in sorted(uses & library.keys()):
            add(used)
        del ordered[name]
        ordered[name] = code

    for name in names:
        if name not in library:
            raise KeyError(f"no harness code named {name}")
        add(name)
    return ordered
