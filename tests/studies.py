"""The study scripts under ``benchmarks/`` (not a package) loaded as modules, for their small-scale tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_study(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as the module ``name``, registered in ``sys.modules`` (dataclasses look their module
    up there)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
