"""Running ``metaharness`` as a user would: ``python -m metaharness`` in a child process, output captured as text.

The child gets this environment without API keys (so the defaults are the embedded model and the offline
proposer) and a wide terminal (so rich does not wrap lines the tests look for).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

KEYS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "OPENAI_BASE_URL", "METAHARNESS_CRASH_AT")


def flags(**options: object) -> list[str]:
    """``--name value`` per option (``data_dir`` -> ``--data-dir``): a list repeats the flag, True gives a bare
    flag, None and False are left out."""
    argv: list[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif isinstance(value, list):
            argv += [item for v in value for item in (flag, str(v))]
        elif value is not None and value is not False:
            argv += [flag, str(value)]
    return argv


def run_metaharness(
    *args: str | Path,
    cwd: Path | None = None,
    env: Mapping[str, str | None] | None = None,
    timeout: float = 600,
    **options: object,
) -> subprocess.CompletedProcess:
    """``python -m metaharness ARGS --OPTIONS``; ``env`` adds to the child's environment (None removes a name)."""
    child_env = {k: v for k, v in os.environ.items() if k not in KEYS} | {"COLUMNS": "200"}
    for name, value in (env or {}).items():
        if value is None:
            child_env.pop(name, None)
        else:
            child_env[name] = value
    argv = [sys.executable, "-m", "metaharness", *map(str, args), *flags(**options)]
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=child_env, timeout=timeout)


def error_lines(run: subprocess.CompletedProcess) -> list[str]:
    """The non-empty lines a command wrote to stderr."""
    return [line for line in run.stderr.splitlines() if line.strip()]


def assert_fails_cleanly(run: subprocess.CompletedProcess, message: str) -> None:
    """Exit code 2 and one line on stderr, ``error: ...`` holding ``message``: no traceback, no noise."""
    assert run.returncode == 2, (run.returncode, run.stdout[-2000:], run.stderr[-2000:])
    lines = error_lines(run)
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], run.stderr


def assert_usage_error(run: subprocess.CompletedProcess, message: str) -> None:
    """typer's usage error: exit code 2, the usage line and ``message`` (which names the option), no traceback."""
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert run.stderr.startswith("Usage: metaharness") and message in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def optimize(
    run_dir: Path, iters: int, *, env: Mapping[str, str | None] | None = None, timeout: float = 1500, **options: Any
):
    """``metaharness optimize`` on symptom2disease into ``run_dir``, one candidate evaluation per iteration (the
    size of a CI run); ``options`` add flags."""
    return run_metaharness(
        "optimize",
        env=env,
        timeout=timeout,
        dataset="symptom2disease",
        iters=iters,
        evals_per_iter=1,
        run_dir=run_dir,
        **options,
    )
