"""Running ``metaharness`` as a user would: ``python -m metaharness`` in a child process, output captured as text.

The child gets this environment without API keys (so the defaults are the embedded model and the offline
proposer) and a wide terminal (so rich does not wrap lines the tests look for).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
    env: dict[str, str] | None = None,
    timeout: float = 600,
    **options: object,
) -> subprocess.CompletedProcess:
    """``python -m metaharness ARGS --OPTIONS``; ``env`` adds to (or overrides) the child's environment."""
    child_env = {k: v for k, v in os.environ.items() if k not in KEYS}
    child_env.update({"COLUMNS": "200", **(env or {})})
    argv = [sys.executable, "-m", "metaharness", *map(str, args), *flags(**options)]
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=child_env, timeout=timeout)


def error_lines(run: subprocess.CompletedProcess) -> list[str]:
    """The non-empty lines a command wrote to stderr."""
    return [line for line in run.stderr.splitlines() if line.strip()]
