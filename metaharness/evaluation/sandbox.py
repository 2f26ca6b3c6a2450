"""The parent's handle on one sandbox process: start it, load the harness, run examples, kill it when needed.

A :class:`Sandbox` owns a child running :mod:`metaharness.evaluation.worker` in a fresh scratch folder (its only
writable place, see :mod:`metaharness.evaluation.confine`) with an environment that holds no secrets: only
``PATH``, ``LANG``, ``HOME``/``TMPDIR`` (the scratch folder) and ``PYTHONDONTWRITEBYTECODE``/``PYTHONHASHSEED``.
While the harness works on an example, every model call it makes arrives here and is answered by ``on_call`` (the
proxy that owns the real client). The wall-time limit counts only the harness's own time: time spent inside model
calls is excluded, so a slow or busy model never makes a harness time out.

Failures become :class:`SandboxFailure` with a message meant for the trace: the harness's traceback, "exceeded
the wall-time limit", "exceeded the CPU-time limit", "killed (out of memory?)", the tail of its stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from metaharness.evaluation.confine import NOBODY, Limits, landlock_abi
from metaharness.harness import TrainItem


@dataclass(frozen=True)
class SandboxLimits(Limits):
    """Limits of one harness: ``memory_mb`` address space, ``cpu_seconds`` and ``wall_seconds`` per example,
    ``load_seconds`` to start the process and construct the harness, ``max_calls`` model calls per example.
    Wall time excludes the time the harness waits for its model calls."""

    wall_seconds: float = 120.0
    load_seconds: float = 120.0
    max_calls: int = 32

    def process_limits(self) -> dict[str, int]:
        return {"memory_mb": self.memory_mb, "cpu_seconds": self.cpu_seconds, "max_processes": self.max_processes}


class SandboxFailure(Exception):
    """The harness failed on this example (or to load); ``fatal`` means the process is gone or unusable."""

    def __init__(self, message: str, *, fatal: bool):
        super().__init__(message)
        self.fatal = fatal


# Every failure to start the process or construct the harness starts with this (the candidate cannot run at all).
LOAD_FAILED = "the harness failed to load: "
CallHandler = Callable[[dict[str, Any]], dict[str, Any]]
# No user site-packages, no bytecode files, and (3.11+) no working folder on sys.path. Not -I/-E: the environment
# is built here from scratch, and PYTHONHASHSEED in it keeps set and dict-of-set orders identical across runs.
_PYTHON_FLAGS = ("-s", "-B", "-P") if sys.version_info >= (3, 11) else ("-s", "-B")
_SAFE_ENV = ("PATH", "LANG", "LC_ALL", "TZ")


def clean_environment(scratch: str) -> dict[str, str]:
    """The child's whole environment: nothing from the parent but locale and PATH (no keys, no tokens)."""
    env = {name: os.environ[name] for name in _SAFE_ENV if name in os.environ}
    env.update(HOME=scratch, TMPDIR=scratch, PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0", PYTHONIOENCODING="utf-8")
    return env


class Sandbox:
    """One confined worker process holding one harness instance; examples run one at a time."""

    def __init__(
        self,
        source: str,
        train: list[TrainItem],
        limits: SandboxLimits,
        *,
        context_window: int,
        on_call: CallHandler,
    ):
        self.limits = limits
        self.on_call = on_call
        self.examples_run = 0
        self.barrier: str | None = None
        self.scratch = tempfile.mkdtemp(prefix="metaharness-sandbox-")
        if os.geteuid() == 0 and not landlock_abi():
            os.chown(self.scratch, NOBODY, NOBODY)  # the fallback barrier runs the harness as nobody
        self._log = tempfile.TemporaryFile(prefix="metaharness-sandbox-log-")  # noqa: SIM115 - close() closes it
        self._buffer = b""
        self.process = subprocess.Popen(
            [sys.executable, *_PYTHON_FLAGS, "-m", "metaharness.evaluation.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=self.scratch,
            env=clean_environment(self.scratch),
            start_new_session=True,
        )
        # Both pipes exist: Popen was asked for them.
        assert self.process.stdin is not None and self.process.stdout is not None
        self._requests, self._replies = self.process.stdin, self.process.stdout
        try:
            self._send(
                {
                    "type": "init",
                    "scratch": self.scratch,
                    "limits": limits.process_limits(),
                    "source": source,
                    "train": train,
                    "context_window": context_window,
                }
            )
            reply = self._wait_reply(("ready", "failed"), phase="loading the harness", seconds=limits.load_seconds)
        except SandboxFailure as failure:
            self.close()
            raise SandboxFailure(f"{LOAD_FAILED}{failure}", fatal=True) from None
        except BaseException:  # a systemic failure of a model call made while loading: no process is left behind
            self.close()
            raise
        if reply["type"] == "failed":
            self.close()
            raise SandboxFailure(f"{LOAD_FAILED}{reply['error']}", fatal=True)
        self.barrier = reply.get("barrier")

    def predict(self, text: str) -> str:
        """Run ``Harness.predict(text)``; raises :class:`SandboxFailure` (its ``fatal`` says if we must restart)."""
        self.examples_run += 1
        self._send({"type": "predict", "input": text})
        reply = self._wait_reply(("result",), phase="predicting", seconds=self.limits.wall_seconds)
        if "error" in reply:
            raise SandboxFailure(reply["error"], fatal=False)
        return reply["prediction"]

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._requests.close()
        self._replies.close()
        self._log.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    # -- protocol -----------------------------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        try:
            self._requests.write(json.dumps(message).encode() + b"\n")
            self._requests.flush()
        except (BrokenPipeError, OSError):
            raise SandboxFailure(self._death_message("before it could read its input"), fatal=True) from None

    def _wait_reply(self, wanted: tuple[str, ...], *, phase: str, seconds: float) -> dict[str, Any]:
        """Serve model calls until a message of a ``wanted`` type arrives, within ``seconds`` of harness time."""
        calls = 0
        deadline = time.monotonic() + seconds
        while True:
            message = self._read_message(deadline, phase, seconds)
            if message.get("type") in wanted:
                return message
            if message.get("type") != "call":
                continue
            calls += 1
            started = time.monotonic()
            if calls > self.limits.max_calls:
                reply = {"error": f"call limit reached: at most {self.limits.max_calls} model calls per example"}
            else:
                reply = self.on_call(message.get("request") or {})
            deadline += time.monotonic() - started  # model time does not count against the harness
            self._send({"type": "response", **reply})

    def _read_message(self, deadline: float, phase: str, seconds: float) -> dict[str, Any]:
        fd = self._replies.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise SandboxFailure(f"exceeded the wall-time limit of {seconds:g}s while {phase} (killed)", fatal=True)
            ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                self.process.wait()
                message = self._death_message(f"while {phase}")
                self.close()
                raise SandboxFailure(message, fatal=True)
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            self.close()
            raise SandboxFailure(f"the sandbox protocol was corrupted while {phase}", fatal=True) from None

    def _death_message(self, when: str) -> str:
        code = self.process.wait()
        if code == -signal.SIGXCPU:
            reason = f"exceeded the CPU-time limit of {self.limits.cpu_seconds}s per example"
        elif code < 0:
            reason = f"was killed by signal {signal.Signals(-code).name}"
            if -code in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT):
                reason += f" (out of memory? the limit is {self.limits.memory_mb} MiB)"
        else:
            reason = f"exited with code {code}"
        return f"the harness process {reason} {when}. stderr tail:\n{self.stderr_tail()}"

    def stderr_tail(self, size: int = 2000) -> str:
        try:
            self._log.seek(0, os.SEEK_END)
            length = self._log.tell()
            self._log.seek(max(length - size, 0))
            return self._log.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
