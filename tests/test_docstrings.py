"""The runnable examples in the library's docstrings run and give what they show: one test case per module that has
an example to run (found in its source), and one test that every module imports. A module without an example is
no test case of its own."""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import pkgutil
from pathlib import Path

import pytest

import metaharness

# The sandbox worker runs as a process of its own (it confines the interpreter it runs in); nothing to import here.
NOT_IMPORTED = {"metaharness.evaluation.worker", "metaharness.__main__"}


# The top-level folders installed under the namespace sit on paths of their own (the package-dir mapping).
MAPPED = ("metaharness.proposers", "metaharness.tasks", "metaharness.candidates")

# Modules whose docstrings a reader is pointed to for an example: they must keep one.
PROMISED = (
    "metaharness.frontier",
    "metaharness.planner.graph",
    "metaharness.planner.solve",
    "metaharness.models.spec",
    "metaharness.agents.environments.sokoban",
    "metaharness.agents.environments.toolworld",
)


def _modules() -> list[str]:
    names = set(MAPPED)
    for package in (metaharness, *map(importlib.import_module, MAPPED)):
        names.update(m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + "."))
    return sorted(names - NOT_IMPORTED)


def _source(name: str) -> str:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, name
    return Path(spec.origin).read_text(encoding="utf-8")


def _runs_an_example(source: str) -> bool:
    """Whether a docstring of the module, its classes or functions shows an example doctest runs (not ``+SKIP``)."""
    if ">>>" not in source:
        return False
    parser = doctest.DocTestParser()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            if docstring and any(not e.options.get(doctest.SKIP) for e in parser.get_examples(docstring)):
                return True
    return False


def _with_examples() -> list[str]:
    """The modules with an example to run, found in their source (nothing is imported to collect the tests)."""
    return [name for name in _modules() if _runs_an_example(_source(name))]


def test_every_module_is_found_and_imports():
    names = _modules()
    for expected in ("metaharness.proposers.operators", "metaharness.agents.environments.sokoban", "metaharness.cli"):
        assert expected in names
    for name in names:
        importlib.import_module(name)


def test_the_modules_that_promise_an_example_have_one():
    assert set(PROMISED) <= set(_with_examples())


@pytest.mark.parametrize("name", _with_examples())
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"doctest finds no example in {name}, whose source shows one"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"
