"""The runnable examples in the library's docstrings run and give what they show (doctest over every module)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import metaharness

# The sandbox worker runs as a process of its own (it confines the interpreter it runs in); nothing to import here.
NOT_IMPORTED = {"metaharness.evaluation.worker", "metaharness.__main__"}


# The top-level folders installed under the namespace sit on paths of their own (the package-dir mapping).
MAPPED = ("metaharness.proposers", "metaharness.tasks", "metaharness.candidates")


def _modules() -> list[str]:
    names = set(MAPPED)
    for package in (metaharness, *map(importlib.import_module, MAPPED)):
        names.update(m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + "."))
    return sorted(names - NOT_IMPORTED)


def test_every_module_is_found():
    names = _modules()
    for expected in ("metaharness.proposers.operators", "metaharness.tasks.environments.sokoban", "metaharness.cli"):
        assert expected in names


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"


@pytest.mark.parametrize(
    "name",
    [
        "metaharness.frontier",
        "metaharness.planner.graph",
        "metaharness.planner.solve",
        "metaharness.models.spec",
        "metaharness.tasks.environments.sokoban",
        "metaharness.tasks.environments.toolworld",
    ],
)
def test_modules_that_promise_an_example_have_one_that_runs(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
