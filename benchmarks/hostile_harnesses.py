"""The hostile-harness battery (tests/test_hostile_harnesses.py) run once, with what each attempt met printed.

Runs the battery's tests with pytest in this process, then prints, per test, every attempt a harness made and
what it met inside the sandbox (the exception that stopped it; ``ALLOWED`` would be an escape), followed by the
machine's sandbox layers and pytest's verdict. Needs the repository's tests folder.

    python benchmarks/hostile_harnesses.py
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1] / "tests"


def main() -> int:
    sys.path.insert(0, str(TESTS))
    import test_hostile_harnesses as battery  # the module pytest runs below (same name, already imported)

    from metaharness.evaluation.confine import probe

    code = pytest.main(["-q", "-p", "no:cacheprovider", str(TESTS / "test_hostile_harnesses.py")])
    for test, seen in battery.OBSERVED.items():
        print(f"\n{test}")
        for attempt, outcome in seen.items():
            if attempt.startswith(("/proc/", "environment")):
                continue  # the secrets test's raw reads: summarised by its assertions
            print(f"    {attempt:40} {' '.join(str(outcome).split())[:110]}")
    machine = probe()
    print(f"\nmachine: Linux {platform.release()}, uid {machine['uid']}, layers {', '.join(machine['layers'])}")
    print(json.dumps({"pytest_exit_code": int(code), "missing_guarantees": machine["missing"]}))
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
