"""Run mypy over the sources laid out as they install (``proposers/``, ``tasks/`` and ``candidates/`` appear as
``metaharness.proposers``, ``metaharness.tasks`` and ``metaharness.candidates``), and over the tests.

mypy cannot see through setuptools' editable-install finder (pypa/setuptools#3518), so it checks a temporary tree
of symlinks to the repository's folders; paths in its report are mapped back to the repository. The tests sit
beside the package in that tree and import their helpers (``fakes``, ``command_line``) as top-level modules, as
under pytest. Settings are in pyproject.toml ([tool.mypy]). Exit code: mypy's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPED = ("proposers", "tasks", "candidates")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="metaharness-mypy-") as tmp:
        tree = Path(tmp) / "metaharness"
        tree.mkdir()
        for entry in (ROOT / "metaharness").iterdir():
            if entry.name != "__pycache__":
                (tree / entry.name).symlink_to(entry)
        for name in MAPPED:
            (tree / name).symlink_to(ROOT / name)
        (Path(tmp) / "tests").symlink_to(ROOT / "tests")
        command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *sys.argv[1:]]
        done = subprocess.run(command, cwd=tmp, capture_output=True, text=True, env={**os.environ, "MYPYPATH": tmp})
    report = done.stdout + done.stderr
    for name in MAPPED:
        report = report.replace(f"metaharness/{name}/", f"{name}/")
    print(report, end="")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
