"""The parent's handle on one sandbox process: start it, load the harness, run examples, kill it when needed.

A ``Sandbox`` owns a child running ``metaharness.evaluation.worker`` in a fresh scratch folder (its only
writable place, see ``metaharness.evaluation.confine``) with an environment that holds no secrets: only
``PATH``, ``LANG``, ``HOME``/``TMPDIR`` (the scratch folder) and ``PYTHONDONTWRITEBYTECODE``/``PYTHONHASHSEED``.
While the harness works on an example, every model call it makes arrives here and is answered by ``on_call`` (the
proxy that owns the real client). The wall-time limit counts only the harness's own time: time spent inside model
calls is excluded, so a slow or busy model never makes a harness time out. The per-example CPU limit is enforced
from here too (the worker's CPU time is read from /proc), so the harness cannot raise it.

A sandbox starts only where every guarantee of ``GUARANTEES`` holds, or when
``METAHARNESS_WEAK_SANDBOX=1`` accepts the ones missing; otherwise ``ConfigurationError`` says which are
missing and why. Output is bounded (``.bounds``): the reply pipe is read with a bounded buffer and a message
over the cap kills the sandbox.

Failures become ``SandboxFailure`` with a message meant for the trace: the harness's traceback, "exceeded
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
from collections.abc import Mapping
from dataclasses import dataclass

from metaharness.candidates.protocol import TrainItem
from metaharness.errors import ConfigurationError
from metaharness.evaluation.bounds import MARKER_CHARS, MAX_ERROR_CHARS, MAX_MESSAGE_BYTES, MAX_PREDICTION_CHARS, cut
from metaharness.evaluation.confine import GUARANTEES, Isolation, Limits, isolation
from metaharness.evaluation.records import CallHandler, LMReply
from metaharness.json_types import JSONObject

# Set to 1 to run harnesses on a machine where some guarantee of the sandbox cannot hold (see require_isolation).
WEAK_SANDBOX_ENV = "METAHARNESS_WEAK_SANDBOX"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class SandboxLimits(Limits):
    """Limits of one harness: ``memory_mb`` address space, ``cpu_seconds`` and ``wall_seconds`` per example,
    ``load_seconds`` to start the process and construct the harness, ``max_calls`` model calls per example.
    Wall time excludes the time the harness waits for its model calls."""

    wall_seconds: float = 120.0
    load_seconds: float = 120.0
    max_calls: int = 32

    def process_limits(self) -> dict[str, int]:
        return {
            "memory_mb": self.memory_mb,
            "cpu_seconds": self.cpu_seconds,
            "max_processes": self.max_processes,
            "file_mb": self.file_mb,
        }


class SandboxFailure(Exception):
    """The harness failed on this example (or to load); ``fatal`` means the process is gone or unusable."""

    def __init__(self, message: str, *, fatal: bool):
        super().__init__(message)
        self.fatal = fatal


# Every failure to start the process or construct the harness starts with this (the candidate cannot run at all).
LOAD_FAILED = "the harness failed to load: "
# No user site-packages, no bytecode files, and (3.11+) no working folder on sys.path. Not -I/-E: the environment
# is built here from scratch, and PYTHONHASHSEED in it keeps set and dict-of-set orders identical across runs.
_PYTHON_FLAGS = ("-s", "-B", "-P") if sys.version_info >= (3, 11) else ("-s", "-B")
_SAFE_ENV = ("PATH", "LANG", "LC_ALL", "TZ")


def require_isolation() -> Isolation:
    """This machine's ``Isolation``; raises ConfigurationError (one line) when
    a guarantee is missing, unless ``METAHARNESS_WEAK_SANDBOX=1``."""
    found = isolation()
    if found.missing and os.environ.get(WEAK_SANDBOX_ENV) != "1":
        missing = "; ".join(GUARANTEES[name] for name in found.missing)
        why = f" (namespaces: {found.why})" if found.why else ""
        raise ConfigurationError(
            f"This machine cannot sandbox untrusted harness code: missing {missing}{why}. Allow unprivileged user "
            f"namespaces (or run as root) and install libseccomp2, or set {WEAK_SANDBOX_ENV}=1 to run without them."
        )
    return found


def _first_child(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            children = handle.read().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process ``pid`` (all its threads), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


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
        self.isolation = require_isolation()
        self.layers: list[str] = []
        self.scratch = tempfile.mkdtemp(prefix="metaharness-sandbox-")
        if self.isolation.uid is not None:
            os.chown(self.scratch, self.isolation.uid, self.isolation.uid)
        self._log = tempfile.TemporaryFile(prefix="metaharness-sandbox-log-")  # noqa: SIM115 - close() closes it
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no end of line
        self._worker_pid: int | None = None
        self._cpu_start: float | None = None
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
                    "isolation": self.isolation.plan(),
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
        layers = reply.get("layers")
        self.layers = [str(layer) for layer in layers] if isinstance(layers, list) else []

    def predict(self, text: str) -> str:
        """Run ``Harness.predict(text)``; raises ``SandboxFailure`` (its ``fatal`` says if we must restart)."""
        self.examples_run += 1
        self._cpu_start = None  # taken at the first look at the worker, below
        self._send({"type": "predict", "input": text})
        reply = self._wait_reply(("result",), phase="predicting", seconds=self.limits.wall_seconds)
        if "error" in reply:
            raise SandboxFailure(cut(str(reply["error"]), MAX_ERROR_CHARS + MARKER_CHARS), fatal=False)
        prediction = reply.get("prediction")
        if not isinstance(prediction, str):  # only a harness writing to the pipe itself gets here
            raise SandboxFailure("the sandbox protocol was corrupted while predicting", fatal=False)
        return cut(prediction, MAX_PREDICTION_CHARS + MARKER_CHARS)

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

    def _send(self, message: Mapping[str, object]) -> None:
        try:
            self._requests.write(json.dumps(message).encode() + b"\n")
            self._requests.flush()
        except (BrokenPipeError, OSError):
            raise SandboxFailure(self._death_message("before it could read its input"), fatal=True) from None

    def _wait_reply(self, wanted: tuple[str, ...], *, phase: str, seconds: float) -> JSONObject:
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
            request = message.get("request") or {}
            reply: LMReply
            if calls > self.limits.max_calls:
                reply = {"error": f"call limit reached: at most {self.limits.max_calls} model calls per example"}
            else:
                reply = self.on_call(request if isinstance(request, dict) else {})
            deadline += time.monotonic() - started  # model time does not count against the harness
            self._send({"type": "response", **reply})

    def _read_message(self, deadline: float, phase: str, seconds: float) -> JSONObject:
        """The next JSON line from the worker. The buffer grows by chunks and only new bytes are searched for the
        end of line, so a long line costs linear time; a line over MAX_MESSAGE_BYTES kills the sandbox."""
        fd = self._replies.fileno()
        while (end := self._buffer.find(b"\n", self._scanned)) < 0:
            self._scanned = len(self._buffer)
            if self._scanned > MAX_MESSAGE_BYTES:
                self.close()
                cap = MAX_MESSAGE_BYTES >> 20
                raise SandboxFailure(
                    f"the harness sent a message of more than {cap} MiB while {phase} (killed)", fatal=True
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise SandboxFailure(f"exceeded the wall-time limit of {seconds:g}s while {phase} (killed)", fatal=True)
            self._check_cpu(phase)
            ready, _, _ = select.select([fd], [], [], min(remaining, 0.5))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                self.process.wait()
                message = self._death_message(f"while {phase}")
                self.close()
                raise SandboxFailure(message, fatal=True)
            self._buffer += chunk
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        self._scanned = 0
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):  # the worker writes objects only: a harness wrote to the pipe itself
            self.close()
            raise SandboxFailure(f"the sandbox protocol was corrupted while {phase}", fatal=True)
        return value

    def _check_cpu(self, phase: str) -> None:
        """Kill the worker once it has used more than ``cpu_seconds`` of CPU since the example (or loading) began."""
        if self._worker_pid is None:
            # The worker is the process started, or with namespaces the first child of its first child (init).
            init = _first_child(self.process.pid) if self.isolation.namespaces else self.process.pid
            self._worker_pid = _first_child(init) if init is not None and self.isolation.namespaces else init
        used = _cpu_seconds(self._worker_pid) if self._worker_pid is not None else None
        if used is None:
            return
        if self._cpu_start is None:
            self._cpu_start = used
        elif used - self._cpu_start > self.limits.cpu_seconds:
            self.close()
            raise SandboxFailure(
                f"exceeded the CPU-time limit of {self.limits.cpu_seconds}s per example while {phase} (killed)",
                fatal=True,
            )

    def _death_message(self, when: str) -> str:
        code = self.process.wait()
        if code < 0:
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
