"""Seed harness programs, one folder per task: the first nodes of every search (installed as
``metaharness.candidates``).

The files are harness programs (the contract: :mod:`metaharness.harness`) that run in the sandbox by path, never
imported here. Each task folder holds ``zero_shot.py``, ``few_shot.py`` (all training examples up to a context cap) and
``retrieval.py`` (the most similar training examples by BM25).
"""

from pathlib import Path

from metaharness.errors import InputError

ROOT = Path(__file__).resolve().parent


def seed_names(task: str) -> list[str]:
    """The seed harnesses shipped for ``task`` (file stems), e.g. ``["few_shot", "retrieval", "zero_shot"]``."""
    return sorted(path.stem for path in (ROOT / task).glob("*.py"))


def seed_path(task: str, name: str) -> Path:
    """The file of seed ``name`` (``zero_shot``, ``zero-shot`` or ``zero_shot.py``) for ``task``."""
    stem = name.removesuffix(".py").replace("-", "_")
    path = ROOT / task / f"{stem}.py"
    if not path.is_file():
        available = ", ".join(seed_names(task)) or "none"
        raise InputError(f"No seed harness '{name}' for task {task} (seeds: {available}); or pass a .py file path.")
    return path
