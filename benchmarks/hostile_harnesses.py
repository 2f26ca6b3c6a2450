"""The hostile battery (tests/test_hostile_harnesses.py and tests/test_hostile_runs.py) run once, with what each
attempt met printed.

Runs the battery's tests with pytest in this process, then prints, per test, every attempt a harness or a run made
and what it met (the exception that stopped it inside the sandbox, the error an example or a run ended with;
``ALLOWED`` would be an escape), each test's verdict, and a summary: attempts, escapes (``ALLOWED``), tests that
failed (a hang ends as a failed deadline, lost spend and a traceback as failed assertions), the time the battery
took and the machine's sandbox layers. Needs the repository's tests folder; the disk tests need root.

    python benchmarks/hostile_harnesses.py
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1] / "tests"
FILES = ("test_hostile_harnesses.py", "test_hostile_runs.py")


class Verdicts:
    """A pytest plugin keeping each test's outcome (its call phase, or the setup that failed)."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.outcome != "passed":
            self.outcomes[report.nodeid.split("::")[-1]] = report.outcome


def main() -> int:
    sys.path.insert(0, str(TESTS))
    # The modules pytest runs below (same names, already imported): their OBSERVED dicts fill as the tests run.
    import test_hostile_harnesses as harnesses
    import test_hostile_runs as runs

    from metaharness.evaluation.confine import probe

    verdicts = Verdicts()
    started = time.monotonic()
    code = pytest.main(["-q", "-p", "no:cacheprovider", *(str(TESTS / f) for f in FILES)], plugins=[verdicts])
    seconds = time.monotonic() - started
    attempts = escapes = 0
    observed = {**harnesses.OBSERVED, **runs.OBSERVED}
    for test, seen in observed.items():
        print(f"\n{test} ({verdicts.outcomes.get(test, '?')})")
        for attempt, outcome in seen.items():
            if attempt.startswith(("/proc/", "environment")):
                continue  # the secrets test's raw reads: summarised by its assertions
            attempts += 1
            escapes += str(outcome).startswith("ALLOWED")
            print(f"    {attempt:44} {' '.join(str(outcome).split())[:150]}")
    silent = sorted(t for t in verdicts.outcomes if t not in observed)
    failed = sorted(t for t, outcome in verdicts.outcomes.items() if outcome == "failed")
    machine = probe()
    print(f"\ntests without a recorded attempt (their assertions are the record): {', '.join(silent) or 'none'}")
    print(f"machine: Linux {platform.release()}, uid {machine['uid']}, layers {', '.join(machine['layers'])}, ")
    print(f"    whole-sandbox limits (cgroups): {', '.join(machine['whole_sandbox']) or 'none'}; cpus {os.cpu_count()}")
    summary = {
        "tests": len(verdicts.outcomes),
        "passed": sum(outcome == "passed" for outcome in verdicts.outcomes.values()),
        "failed": failed,
        "skipped": sorted(t for t, outcome in verdicts.outcomes.items() if outcome == "skipped"),
        "attempts": attempts,
        "escapes": escapes,
        "seconds": round(seconds, 1),
        "pytest_exit_code": int(code),
        "missing_guarantees": machine["missing"],
    }
    print(json.dumps(summary))
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
