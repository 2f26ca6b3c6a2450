"""The parent's handle on one sandbox process: start it, load the harness, run examples, kill it when needed.

A ``Sandbox`` owns a child running ``metaharness.evaluation.worker`` with a scratch folder (its only writable place,
see ``metaharness.evaluation.confine``) and an environment that holds no secrets: only ``PATH``, ``LANG``,
``HOME``/``TMPDIR`` (the scratch folder) and ``PYTHONDONTWRITEBYTECODE``/``PYTHONHASHSEED``. While the harness
works on an example, every model call it makes arrives here and is answered by ``on_call`` (the proxy that owns
the real client). The wall-time limit counts only the harness's own time: time spent inside model calls is
excluded, so a slow or busy model never makes a harness time out. The per-example CPU limit is enforced from here
too, from the CPU time of the sandbox's control group (every process of it) or, without one, of the worker process
as /proc shows it, so the harness cannot raise it.

Every exchange has a deadline, in both directions: a message to the worker must be taken within
``SEND_SECONDS`` (a harness that stops reading its input is killed), a reply must come within the wall-time limit,
and a worker that closes its end of the protocol must exit within ``EXIT_SECONDS``. A line the worker never writes
(a type it does not send, a result while loading, a model call past twice the call limit) is a harness writing
to the pipe itself: the sandbox is killed and the example fails with an error naming what it did.

The sandbox as a whole: a control group of its own (``metaharness.evaluation.cgroups``: memory, processes and
threads, CPU time, where this machine lets the parent make one), a uid of its own (as root:
``confine.SANDBOX_UIDS`` plus the pid of its first process, so no sandbox shares a process limit with another) and,
with namespaces, a scratch folder on a tmpfs limited in bytes and files. Its standard error (where a harness's
``print`` goes) comes to the parent through a pipe, and only its last ``STDERR_KEPT`` bytes are kept. The process
is started by one long-lived thread of the parent, so that its parent-death signal (armed by the worker) fires
when the parent process dies, not when the thread that asked for it ends: killed in any way, the parent takes its
sandboxes with it.

A sandbox starts only where every guarantee of ``GUARANTEES`` holds, or when ``METAHARNESS_WEAK_SANDBOX=1``
accepts the ones missing; otherwise ``ConfigurationError`` says which are missing and why. Output is bounded
(``.bounds``): the reply pipe is read with a bounded buffer and a message over the cap kills the sandbox.

Failures become ``SandboxFailure`` with a message meant for the trace: the harness's traceback, "exceeded the
wall-time limit", "exceeded the CPU-time limit", "exceeded the memory limit", the misuse of the protocol, the tail
of its stderr.
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
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NoReturn

from metaharness.candidates.protocol import TrainItem
from metaharness.errors import ConfigurationError
from metaharness.evaluation.bounds import MARKER_CHARS, MAX_ERROR_CHARS, MAX_MESSAGE_BYTES, MAX_PREDICTION_CHARS, cut
from metaharness.evaluation.cgroups import SandboxGroup
from metaharness.evaluation.confine import GUARANTEES, SANDBOX_TASKS, Isolation, Limits, isolation
from metaharness.evaluation.records import CallHandler, LMReply
from metaharness.json_types import JSONObject

# Set to 1 to run harnesses on a machine where some guarantee of the sandbox cannot hold (see require_isolation).
WEAK_SANDBOX_ENV = "METAHARNESS_WEAK_SANDBOX"
# A worker takes each message at once (it waits for it); one whose input stays full this long is not reading.
SEND_SECONDS = 30.0
# A worker that closed its end of the protocol has this long to exit before it is killed.
EXIT_SECONDS = 2.0
# The tail of the sandbox's stderr kept for error messages (the rest is read and dropped).
STDERR_KEPT = 64 << 10
# Model calls past max_calls get an error; past this many times max_calls the harness is flooding: killed.
CALL_FLOOD = 2
# The harness's own time an evaluation allows per example on average (SandboxLimits.average_seconds; a run's
# --harness-seconds): room for a harness that computes (retrieval, parsing) on every example, far below the 120 s
# one example may take.
AVERAGE_SECONDS = 10.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class _Spawner:
    """Starts every sandbox process from one thread that lives as long as this process, so the worker's parent-death
    signal (tied to the thread that forked it) fires only when the evaluating process itself ends. A child made by
    ``fork`` gets a thread of its own (the parent's is not copied)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.lock = threading.Lock()
        self.pool: ThreadPoolExecutor | None = None

    def start(self, begin: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        with self.lock:
            if self.pool is None:
                self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metaharness-sandbox-spawner")
            pool = self.pool
        return pool.submit(begin).result()


_SPAWNER = _Spawner()
os.register_at_fork(after_in_child=_SPAWNER.reset)


@dataclass(frozen=True)
class SandboxLimits(Limits):
    """Limits of one harness (see ``Limits`` for memory, CPU, processes, files and disk): ``wall_seconds`` per
    example, ``load_seconds`` to start the process and construct the harness, ``max_calls`` model calls per
    example. Wall time excludes the time the harness waits for its model calls.

    ``average_seconds`` bounds a whole evaluation: on n examples the harness may use ``time_bound(n)`` seconds of its
    own time in ``predict`` (model time excluded, loading not counted), ``average_seconds`` per example on average
    and at least one example's ``wall_seconds``; past it no example starts, those running are stopped, and every
    example left scores 0 with the reason in its record (``metaharness.evaluation.evaluator``)."""

    wall_seconds: float = 120.0
    load_seconds: float = 120.0
    max_calls: int = 32
    average_seconds: float = AVERAGE_SECONDS

    def time_bound(self, examples: int) -> float:
        """Seconds of harness time an evaluation of ``examples`` examples may use (see the class docstring)."""
        return max(self.wall_seconds, self.average_seconds * examples)

    def process_limits(self) -> dict[str, int]:
        return {
            "memory_mb": self.memory_mb,
            "cpu_seconds": self.cpu_seconds,
            "max_processes": self.max_processes,
            "file_mb": self.file_mb,
            "disk_mb": self.disk_mb,
            "max_files": self.max_files,
        }


class SandboxFailure(Exception):
    """The harness failed on this example (or to load); ``fatal`` means the process is gone or unusable."""

    def __init__(self, message: str, *, fatal: bool):
        super().__init__(message)
        self.fatal = fatal


# Every failure to start the process or construct the harness starts with this (the candidate cannot run at all).
LOAD_FAILED = "the harness failed to load: "
# What an example stopped with the evaluation (a second Ctrl-C, a systemic failure elsewhere) records.
STOPPED = "the evaluation was stopped before this example finished"
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


def _group(limits: Limits) -> SandboxGroup:
    try:
        return SandboxGroup.create(limits.memory_mb, limits.max_processes + SANDBOX_TASKS)
    except OSError as exc:
        raise ConfigurationError(
            f"The kernel refused the sandbox's control group ({exc}); check the cgroup mounts under /sys/fs/cgroup."
        ) from None


class Sandbox:
    """One confined worker process holding one harness instance; examples run one at a time. ``kill`` may be
    called from any thread (it stops the sandbox at once); everything else belongs to the thread using it."""

    def __init__(
        self,
        source: str,
        train: list[TrainItem],
        limits: SandboxLimits,
        *,
        context_window: int,
        on_call: CallHandler,
        on_start: Callable[[Sandbox], None] | None = None,
    ):
        """Start the process and load the harness in it. ``on_start(self)`` is called as soon as the process runs,
        before the harness loads (the evaluator registers the sandbox there, to kill it if the evaluation stops)."""
        self.limits = limits
        self.on_call = on_call
        self.examples_run = 0
        self.isolation = require_isolation()
        self.layers: list[str] = []
        self.stopped = False  # set by kill(): the evaluation no longer wants this sandbox's answers
        self._closed = False
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no end of line
        self._stderr = bytearray()
        self._worker_pid: int | None = None
        self._cpu_start: float | None = None
        self._model_seconds = 0.0  # inside model calls, during the example under way
        self.harness_seconds = 0.0  # of the last example (``predict``)
        self._lock = threading.Lock()
        self.scratch = tempfile.mkdtemp(prefix="metaharness-sandbox-")
        self.group = SandboxGroup()
        try:
            self.group = _group(limits)
            self.process = _SPAWNER.start(self._start)
        except BaseException:
            self.group.remove()
            os.rmdir(self.scratch)
            raise
        # All three pipes exist: Popen was asked for them.
        assert self.process.stdin is not None and self.process.stdout is not None and self.process.stderr is not None
        self._requests, self._replies, self._errors = self.process.stdin, self.process.stdout, self.process.stderr
        for stream in (self._requests, self._replies, self._errors):
            os.set_blocking(stream.fileno(), False)
        try:
            if on_start is not None:
                on_start(self)
            # The worker waits for its first message: nothing of the harness runs before it is in its group.
            self.group.join(self.process.pid)
            self.uid = self.isolation.sandbox_uid(self.process.pid)
            if self.uid is not None:
                os.chown(self.scratch, self.uid, self.uid)
            self._send(
                {
                    "type": "init",
                    "scratch": self.scratch,
                    "limits": limits.process_limits(),
                    "isolation": {**self.isolation.plan(), "uid": self.uid},
                    "source": source,
                    "train": train,
                    "context_window": context_window,
                },
                phase="loading the harness",
                seconds=max(limits.load_seconds, SEND_SECONDS),  # the harness's train examples may be large
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
            raise SandboxFailure(f"{LOAD_FAILED}{reply.get('error')}", fatal=True)
        layers = reply.get("layers")
        self.layers = [str(layer) for layer in layers] if isinstance(layers, list) else []
        if self.isolation.namespaces:
            # The worker runs in its own root now: the host's folder was only where that root was built, and it is
            # empty. Removed here, it is not left in /tmp when the parent dies without closing (SIGKILL, OOM killer).
            with contextlib.suppress(OSError):
                os.rmdir(self.scratch)

    def _start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, *_PYTHON_FLAGS, "-m", "metaharness.evaluation.worker", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=self.scratch,
            env=clean_environment(self.scratch),
            start_new_session=True,
        )

    def predict(self, text: str) -> str:
        """Run ``Harness.predict(text)``; raises ``SandboxFailure`` (its ``fatal`` says if we must restart). Either
        way ``harness_seconds`` is then the time it took, less the time its model calls took."""
        self.examples_run += 1
        self._cpu_start = None  # taken at the first look at the sandbox, below
        self._model_seconds = 0.0
        started = time.monotonic()
        try:
            return self._predict(text)
        finally:
            self.harness_seconds = time.monotonic() - started - self._model_seconds

    def _predict(self, text: str) -> str:
        self._send({"type": "predict", "input": text}, phase="predicting")
        reply = self._wait_reply(("result",), phase="predicting", seconds=self.limits.wall_seconds)
        if "error" in reply:
            raise SandboxFailure(cut(str(reply["error"]), MAX_ERROR_CHARS + MARKER_CHARS), fatal=False)
        prediction = reply.get("prediction")
        if not isinstance(prediction, str):  # only a harness writing to the pipe itself gets here
            self._fail("the harness wrote a result without a prediction to the sandbox protocol while predicting")
        return cut(prediction, MAX_PREDICTION_CHARS + MARKER_CHARS)

    @property
    def alive(self) -> bool:
        return not self.stopped and self.process.poll() is None

    def kill(self) -> None:
        """Stop the sandbox at once, from any thread: every process of it is killed; the thread using it sees its
        example fail with ``STOPPED``."""
        self.stopped = True
        with self._lock:
            if self._closed:
                return
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            for pid in self.group.pids():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        """Kill what is left of the sandbox and free everything it held (its group, pipes and scratch folder)."""
        self.kill()
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.process.wait()
        for stream in (self._requests, self._replies, self._errors):
            with contextlib.suppress(OSError):
                stream.close()
        self.group.remove()
        shutil.rmtree(self.scratch, ignore_errors=True)

    # -- protocol -----------------------------------------------------------------------------------------

    def _fail(self, what: str) -> NoReturn:
        """Kill the sandbox for ``what`` it did; raises the example's ``SandboxFailure`` (``STOPPED`` when ``kill``
        stopped it)."""
        stopped = self.stopped
        self.close()
        raise SandboxFailure(STOPPED if stopped else f"{what} (killed)", fatal=True)

    def _send(self, message: Mapping[str, object], *, phase: str, seconds: float | None = None) -> None:
        """Write one line to the worker within ``seconds`` (default ``SEND_SECONDS``: it reads each message at
        once)."""
        seconds = SEND_SECONDS if seconds is None else seconds
        data = memoryview(json.dumps(message).encode() + b"\n")
        fd = self._requests.fileno()
        deadline = time.monotonic() + seconds
        while data:
            if self.stopped:
                self._fail("stopped")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._fail(
                    f"the harness stopped reading the sandbox protocol (its input stayed full for {seconds:g}s) "
                    f"while {phase}"
                )
            _, writable, _ = select.select([], [fd], [], min(remaining, 0.5))
            self._drain_stderr()
            if not writable:
                continue
            try:
                written = os.write(fd, data)
            except BlockingIOError:
                continue
            except OSError:  # the worker's input is closed: it exited, or the harness closed it
                self._ended(f"while {phase}", closed="the pipe it reads the parent's messages from")
            data = data[written:]

    def _wait_reply(self, wanted: tuple[str, ...], *, phase: str, seconds: float) -> JSONObject:
        """Serve model calls until a message of a ``wanted`` type arrives, within ``seconds`` of harness time."""
        calls = 0
        deadline = time.monotonic() + seconds
        while True:
            message = self._read_message(deadline, phase, seconds)
            kind = message.get("type")
            if kind in wanted:
                return message
            if kind != "call":
                shown = cut(str(kind), 40)
                self._fail(f"the harness wrote its own message (type {shown}) to the sandbox protocol while {phase}")
            calls += 1
            if calls > self.limits.max_calls * CALL_FLOOD:
                self._fail(
                    f"the harness made more than {self.limits.max_calls * CALL_FLOOD} model calls while {phase} "
                    f"(the limit is {self.limits.max_calls})"
                )
            started = time.monotonic()
            request = message.get("request") or {}
            reply: LMReply
            if calls > self.limits.max_calls:
                reply = {"error": f"call limit reached: at most {self.limits.max_calls} model calls per example"}
            else:
                reply = self.on_call(request if isinstance(request, dict) else {})
            waited = time.monotonic() - started
            deadline += waited  # model time does not count against the harness
            self._model_seconds += waited
            self._send({"type": "response", **reply}, phase=phase)

    def _read_message(self, deadline: float, phase: str, seconds: float) -> JSONObject:
        """The next JSON line from the worker. The buffer grows by chunks and only new bytes are searched for the
        end of line, so a long line costs linear time; a line over MAX_MESSAGE_BYTES kills the sandbox."""
        fd, errors = self._replies.fileno(), self._errors.fileno()
        while (end := self._buffer.find(b"\n", self._scanned)) < 0:
            self._scanned = len(self._buffer)
            if self.stopped:
                self._fail("stopped")
            if self._scanned > MAX_MESSAGE_BYTES:
                self._fail(f"the harness sent a message of more than {MAX_MESSAGE_BYTES >> 20} MiB while {phase}")
            if time.monotonic() >= deadline:
                self._fail(f"exceeded the wall-time limit of {seconds:g}s while {phase}")
            self._check_cpu(phase)
            ready, _, _ = select.select([fd, errors], [], [], min(max(deadline - time.monotonic(), 0), 0.5))
            if errors in ready:
                self._drain_stderr()
            if fd not in ready:
                continue
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                self._ended(f"while {phase}", closed="the pipe it answers the parent on")
            self._buffer += chunk
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        self._scanned = 0
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, a number past Python's digit limit, nested too deep
            value = None
        if not isinstance(value, dict):  # the worker writes objects only: a harness wrote to the pipe itself
            self._fail(f"the harness wrote a line that is no protocol message to the sandbox protocol while {phase}")
        return value

    def _drain_stderr(self) -> None:
        """Read what the sandbox wrote to its stderr, keeping only the last ``STDERR_KEPT`` bytes."""
        while True:
            try:
                chunk = os.read(self._errors.fileno(), 1 << 16)
            except (BlockingIOError, OSError, ValueError):
                return
            if not chunk:
                return
            self._stderr += chunk
            if len(self._stderr) > STDERR_KEPT:
                del self._stderr[: len(self._stderr) - STDERR_KEPT]

    def _ended(self, when: str, *, closed: str) -> NoReturn:
        """The worker closed ``closed`` (it is exiting, or the harness closed the pipe): say why it ended, killing it
        when it is still running after ``EXIT_SECONDS``."""
        try:
            self.process.wait(timeout=EXIT_SECONDS)
        except subprocess.TimeoutExpired:
            self._fail(f"the harness closed {closed} {when} and kept running")
        stopped, message = self.stopped, self._death_message(when)
        self.close()
        raise SandboxFailure(STOPPED if stopped else message, fatal=True)

    def _check_cpu(self, phase: str) -> None:
        """Kill the sandbox once it has used more than ``cpu_seconds`` of CPU since the example (or loading) began:
        every process of its control group, or without one the worker process."""
        used = self.group.cpu_seconds()
        if used is None:
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
            self._fail(f"exceeded the CPU-time limit of {self.limits.cpu_seconds}s per example while {phase}")

    def _death_message(self, when: str) -> str:
        code = self.process.wait()
        if self.group.oom_kills():
            reason = (
                f"passed the memory limit of {self.limits.memory_mb} MiB of the sandbox as a whole (the kernel "
                f"killed a process of it; its process exited with code {code})"
            )
        elif code < 0:
            reason = f"was killed by signal {signal.Signals(-code).name}"
            if -code in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT):
                reason += f" (out of memory? the limit is {self.limits.memory_mb} MiB)"
        else:
            reason = f"exited with code {code}"
        return f"the harness process {reason} {when}. stderr tail:\n{self.stderr_tail()}"

    def stderr_tail(self, size: int = 2000) -> str:
        self._drain_stderr()
        return bytes(self._stderr[-size:]).decode("utf-8", "replace")
