"""The hostile battery (the tests of ``FILES``) run once, with what each attempt met printed.

Runs the battery's tests with pytest in this process, then prints, per test, every attempt a harness or a run made
and what it met (the exception that stopped it inside the sandbox, the error an example or a run ended with, what a
reader was shown; ``ALLOWED`` would be an escape), each test's verdict, and a summary: attempts, escapes
(``ALLOWED``), hangs (tests stopped by the per-test deadline, ``DEADLINE`` seconds), tests that failed (a crash, a
traceback, a lost record or spend, a missing reason each fail their test's assertions), the longest test, the time
the battery took and the machine's sandbox layers. Needs the repository's tests folder; the disk tests need root.

    python benchmarks/hostile_harnesses.py
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1] / "tests"
FILES = (
    "test_hostile_harnesses.py",
    "test_hostile_runs.py",
    "test_hostile_text.py",
    "test_hostile_cache.py",
    "test_held_out.py",  # a lookup table of the search examples: not returned, its held-out score shown
)
# pytest-timeout's deadline for each test: a test still running then is a hang.
DEADLINE = 600


class Verdicts:
    """A pytest plugin keeping each test's outcome (its call phase, or the setup that failed), how long its call
    took, and which failures were the deadline's (hangs)."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}
        self.seconds: dict[str, float] = {}
        self.hangs: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        test = report.nodeid.split("::")[-1]
        if report.when == "call" or report.outcome != "passed":
            self.outcomes[test] = report.outcome
        if report.when == "call":
            self.seconds[test] = report.duration
        if report.failed and "Timeout" in str(report.longrepr):
            self.hangs.append(test)


def main() -> int:
    sys.path.insert(0, str(TESTS))
    # The modules pytest runs below (same names, imported first): their OBSERVED dicts fill as the tests run.
    modules = [importlib.import_module(Path(name).stem) for name in FILES]

    from metaharness.evaluation.confine import probe

    verdicts = Verdicts()
    started = time.monotonic()
    argv = ["-q", "-p", "no:cacheprovider", f"--timeout={DEADLINE}", *(str(TESTS / f) for f in FILES)]
    code = pytest.main(argv, plugins=[verdicts])
    seconds = time.monotonic() - started
    attempts = escapes = 0
    observed = {test: seen for module in modules for test, seen in getattr(module, "OBSERVED", {}).items()}
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
    longest = max(verdicts.seconds, key=verdicts.seconds.__getitem__, default="")
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
        "hangs": sorted(verdicts.hangs),
        "longest_test": {"test": longest, "seconds": round(verdicts.seconds.get(longest, 0.0), 1)},
        "seconds": round(seconds, 1),
        "pytest_exit_code": int(code),
        "missing_guarantees": machine["missing"],
    }
    print(json.dumps(summary))
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
