"""The kernel-level confinement itself, checked from a forked process as the current user and as a normal user.

As root the sandbox becomes a uid of its own inside its namespaces; as a normal user it gets a user namespace.
Either way writes that the file permissions would allow (a world-writable folder) must be refused, so both cases
are run (the second needs root, to become the normal user).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

import pytest

from metaharness.evaluation import syscall_filter
from metaharness.evaluation.confine import SANDBOX_UIDS, Limits, confine, isolation
from metaharness.evaluation.namespaces import read_roots

NOBODY = 65534


def _attempts(scratch: str, outside_dir: str, secret_file: str) -> dict[str, str]:
    results = {}

    def attempt(name, action):
        try:
            action()
            results[name] = "allowed"
        except (OSError, ValueError) as error:
            results[name] = type(error).__name__

    attempt("write_scratch", lambda: Path(scratch, "ok.txt").write_text("x"))
    attempt("write_outside", lambda: Path(outside_dir, "escape.txt").write_text("x"))
    attempt("mkdir_outside", lambda: os.mkdir(os.path.join(outside_dir, "escape-dir")))
    attempt("read_outside", lambda: Path(secret_file).read_text())
    attempt("tcp_connect", lambda: socket.create_connection(("127.0.0.1", 9), timeout=2))
    attempt("raise_memory_limit", lambda: __import__("resource").setrlimit(__import__("resource").RLIMIT_AS, (-1, -1)))
    results["uid"] = str(os.getuid())
    return results


@pytest.fixture
def base():
    """A folder every user can reach (pytest's tmp_path sits below a folder only its owner may enter)."""
    folder = Path(tempfile.mkdtemp(prefix="metaharness-confine-test-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _run_confined(tmp_path: Path, *, as_user: int | None) -> dict[str, Any]:
    scratch, outside = tmp_path / "scratch", tmp_path / "outside"
    scratch.mkdir()
    outside.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(outside, 0o777)  # the file permissions alone would let anyone write here
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    os.chmod(secret, 0o644)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: confine, try things, report, exit without running pytest's teardown
        os.close(read_fd)
        try:
            uid = isolation().sandbox_uid(os.getpid())  # as the evaluator does: root's sandboxes get a uid of their own
            plan = {**isolation().plan(), "uid": uid}
            owner = as_user if as_user is not None else uid
            if owner is not None:
                os.chown(scratch, owner, owner)
            if as_user is not None:
                # Load lazily imported modules now: this Python may live where the other user cannot read.
                read_roots()
                syscall_filter.available()
                "localhost".encode("idna")
                os.setgroups([])
                os.setgid(as_user)
                os.setuid(as_user)
                ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE, cleared by setuid, as a user's process has it
                plan = {**plan, "uid": None}  # a normal user stays itself
            layers = confine(str(scratch), Limits(memory_mb=1024, cpu_seconds=20, max_processes=16), plan)
            report = {"layers": layers, **_attempts(str(scratch), str(outside), str(secret))}
        except BaseException as error:  # noqa: BLE001
            report = {"crash": repr(error)}
        os.write(write_fd, json.dumps(report).encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    assert not (outside / "escape.txt").exists() and not (outside / "escape-dir").exists()
    return json.loads(data)


REFUSED = {"PermissionError", "FileNotFoundError"}  # the file system of a sandbox with namespaces has no such path


def _assert_confined(report: dict[str, str]) -> None:
    assert "crash" not in report, report
    assert report["write_scratch"] == "allowed"
    assert report["write_outside"] in REFUSED
    assert report["mkdir_outside"] in REFUSED
    assert report["read_outside"] in REFUSED
    assert report["tcp_connect"] == "PermissionError"
    assert report["raise_memory_limit"] != "allowed"


def test_confinement_as_the_current_user(base):
    report = _run_confined(base, as_user=None)
    _assert_confined(report)
    assert report["layers"] == isolation().layers
    if os.geteuid() == 0:
        assert int(report["uid"]) > SANDBOX_UIDS  # SANDBOX_UIDS plus the pid of the process


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become a normal user")
def test_confinement_as_a_normal_user(base):
    report = _run_confined(base, as_user=NOBODY)
    assert report.get("uid") == str(NOBODY), report
    assert "namespaces" in report["layers"] and "a uid of its own" not in report["layers"]
    _assert_confined(report)
