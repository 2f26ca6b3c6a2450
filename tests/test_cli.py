"""The command line: version, help, and clean errors."""

from __future__ import annotations

import subprocess
import sys

import metaharness


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metaharness", *args], capture_output=True, text=True)


def test_version():
    out = _run("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"metaharness {metaharness.__version__}"
    assert metaharness.__version__ != "0+unknown"


def test_help_lists_usage():
    out = _run("--help")
    assert out.returncode == 0
    assert "Usage" in out.stdout


def test_unknown_command_is_a_usage_error():
    out = _run("no-such-command")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
