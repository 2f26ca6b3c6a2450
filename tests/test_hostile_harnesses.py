"""A battery of hostile harnesses against the real sandbox: none may escape, and none needs a dataset.

Each harness tries one family of attacks on the first example of a task held in memory and returns what each
attempt gave (an exception's name and message, or ``ALLOWED``). The test owns every target: listeners on
127.0.0.1 and on Unix sockets that must receive nothing, files outside the scratch folder that must stay
untouched, secrets in the parent's environment and on disk that must not be read, and process names that must not
survive the evaluation. Others misuse the protocol pipe (a deadline must end each), take more than their share of
the machine (memory, processes, disk, CPU: the sandbox's limits as a whole must hold) or ask the parent for more
than it should give (the proxy must refuse before it pays); each must end in its example's error naming what it
did, never a hang. tests/test_hostile_runs.py does the same at the scale of a run. ``python
benchmarks/hostile_harnesses.py`` prints the outcomes of both as a table.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from fakes import ScriptedModel, ToyTask

from metaharness.errors import ConfigurationError
from metaharness.evaluation import SandboxLimits, evaluate, namespaces
from metaharness.evaluation import sandbox as sandbox_module
from metaharness.evaluation.bounds import MAX_EXAMPLE_TRACE_CHARS, MAX_MESSAGE_BYTES, MAX_PREDICTION_CHARS
from metaharness.evaluation.confine import GUARANTEES, SANDBOX_UIDS, Isolation, _missing
from metaharness.evaluation.sandbox import LOAD_FAILED
from metaharness.evaluation.task_evaluator import CHECK_TRACE, TaskEvaluator
from metaharness.models.client import Client
from metaharness.models.ledger import Ledger
from metaharness.models.protocol import ModelClient

SECRET = "sk-hostile-test-secret-0123456789"
# What each test's harness saw: {test name: {attempt: outcome}} (benchmarks/hostile_harnesses.py prints it).
OBSERVED: dict[str, dict[str, str]] = {}
HEADER = """
import ctypes, json, os, resource, signal, socket, sys, time


def attempt(action):
    try:
        return "ALLOWED " + repr(action())[:200]
    except BaseException as error:
        return f"{type(error).__name__}: {error}"


def name_this_process(name):
    ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME: shown in /proc/PID/comm


class Harness:
    def __init__(self, lm, train):
        self.lm = lm

    def predict(self, x):
"""


def harness_source(body: str, init: str = "") -> str:
    """A harness whose ``predict`` runs ``body`` and whose ``__init__`` runs ``init`` after keeping ``lm``."""
    source = HEADER + textwrap.indent(textwrap.dedent(body).strip(), " " * 8) + "\n"
    if init:
        kept = "        self.lm = lm\n"
        source = source.replace(kept, kept + textwrap.indent(textwrap.dedent(init).strip(), " " * 8) + "\n", 1)
    return source


def attack(
    tmp_path: Path,
    body: str,
    limits: SandboxLimits | None = None,
    *,
    init: str = "",
    model: ModelClient | None = None,
    examples: int = 1,
    workers: int | None = None,
):
    """Run a harness whose ``predict`` is ``body`` (and ``__init__`` also ``init``) on the first ``examples``
    examples; return the first record and the trace file's size. What it met is kept in ``OBSERVED``."""
    path = tmp_path / "harness.py"
    path.write_text(harness_source(body, init))
    trace = tmp_path / "records.jsonl"
    model = model or ScriptedModel("[DIAGNOSIS]x[/DIAGNOSIS]")
    report = evaluate(
        path, ToyTask(), "val", model=model, limit=examples, limits=limits, trace_path=trace, workers=workers
    )
    record = report.records[0]
    observe(record)
    return record, trace.stat().st_size


def current_test() -> str:
    """The running test's name with its parameters ("test_x[an id]"): pytest's variable ends in " (call)"."""
    return os.environ.get("PYTEST_CURRENT_TEST", "?").split("::")[-1].rsplit(" ", 1)[0]


def observe(record, test: str | None = None) -> None:
    """Keep what the harness of ``test`` (the test running) met: what it returned (its attempts, as JSON), or the
    error its example ended with."""
    test = test or current_test()
    try:
        OBSERVED[test] = json.loads(record.prediction or "")
    except ValueError:
        OBSERVED[test] = {"error": (record.error or "")[:300]}
        if record.prediction:
            OBSERVED[test]["prediction"] = record.prediction[-100:]


def outcomes(tmp_path: Path, body: str, limits: SandboxLimits | None = None, **options) -> dict[str, str]:
    record, _ = attack(tmp_path, body, limits, **options)
    assert record.error is None, record.error
    return json.loads(record.prediction)


def assert_refused(found: dict[str, str]) -> None:
    escaped = {name: outcome for name, outcome in found.items() if outcome.startswith("ALLOWED")}
    assert not escaped, escaped


def processes_named(name: str) -> list[int]:
    """Host pids whose command name is ``name`` (the sandbox's processes are visible from here)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/comm") as handle:
                if entry.isdigit() and handle.read().strip() == name:
                    found.append(int(entry))
        except OSError:
            continue
    return found


def assert_none_survive(name: str) -> None:
    """The kernel kills a namespace's processes as its init exits; give it a moment, then none may be left."""
    for _ in range(100):
        if not processes_named(name):
            return
        time.sleep(0.1)
    raise AssertionError(f"processes named {name} outlived their evaluation: {processes_named(name)}")


@pytest.fixture
def shared_folder():
    """A folder outside the sandbox that the file permissions alone would let anyone use."""
    folder = Path(tempfile.mkdtemp(prefix="metaharness-hostile-"))
    folder.chmod(0o777)
    yield folder
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()


# ---------------------------------------------------------------- the network


def test_tcp_reaches_no_listener(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    listener6 = socket.create_server(("::1", 0), family=socket.AF_INET6)
    port, port6 = listener.getsockname()[1], listener6.getsockname()[1]
    found = outcomes(
        tmp_path,
        f"""
        return json.dumps({{
            "tcp 127.0.0.1": attempt(lambda: socket.create_connection(("127.0.0.1", {port}), timeout=3)),
            "tcp ::1": attempt(lambda: socket.create_connection(("::1", {port6}), timeout=3)),
            "tcp listen": attempt(lambda: socket.create_server(("127.0.0.1", 0))),
        }})
        """,
    )
    assert_refused(found)
    for server in (listener, listener6):
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing connected
        server.close()


def test_udp_sends_nothing(tmp_path):
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    port = receiver.getsockname()[1]
    found = outcomes(
        tmp_path,
        f"""
        def send():
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            return s.sendto(b"escaped", ("127.0.0.1", {port}))
        return json.dumps({{"udp 127.0.0.1": attempt(send)}})
        """,
    )
    assert_refused(found)
    receiver.setblocking(False)
    with pytest.raises(BlockingIOError):
        receiver.recvfrom(100)  # no datagram arrived
    receiver.close()


def test_unix_sockets_outside_the_folder_accept_nothing(tmp_path, shared_folder):
    path = str(shared_folder / "service.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o777)
    listener.listen()
    abstract_name = f"metaharness-test-{uuid.uuid4().hex}"
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0" + abstract_name)
    abstract.listen()
    found = outcomes(
        tmp_path,
        f"""
        def connect(address):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(address)
            return s.send(b"escaped")
        return json.dumps({{
            "unix path": attempt(lambda: connect({path!r})),
            "unix abstract": attempt(lambda: connect("\\0{abstract_name}")),
            "unix datagram to the journal": attempt(
                lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"x", "/dev/log")
            ),
        }})
        """,
    )
    assert_refused(found)
    for server in (listener, abstract):
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
        server.close()


def test_raw_netlink_and_packet_sockets_are_refused(tmp_path):
    found = outcomes(
        tmp_path,
        """
        return json.dumps({
            "raw icmp": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
            "netlink route": attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)),
            "packet": attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)),
            "udp ipv6": attempt(lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)),
        })
        """,
    )
    assert_refused(found)


# ---------------------------------------------------------------- processes and limits


def test_a_fork_storm_stops_at_the_process_limit_and_leaves_nothing(tmp_path):
    name = f"mh{uuid.uuid4().hex[:12]}"
    found = outcomes(
        tmp_path,
        f"""
        forked = 0
        try:
            for _ in range(1000):
                if os.fork() == 0:
                    name_this_process({name!r})
                    time.sleep(600)
                    os._exit(0)
                forked += 1
            error = "none"
        except OSError as exc:
            error = str(exc)
        return json.dumps({{"forked": str(forked), "error": error}})
        """,
        SandboxLimits(max_processes=40),
    )
    assert int(found["forked"]) <= 40 and "Resource temporarily unavailable" in found["error"], found
    assert_none_survive(name)


def test_setsid_daemons_end_with_the_evaluation(tmp_path):
    name = f"mh{uuid.uuid4().hex[:12]}"
    found = outcomes(
        tmp_path,
        f"""
        started = 0
        for _ in range(5):
            first = os.fork()
            if first == 0:
                os.setsid()
                if os.fork() == 0:
                    name_this_process({name!r})
                    signal.signal(signal.SIGHUP, signal.SIG_IGN)
                    time.sleep(600)
                os._exit(0)
            os.waitpid(first, 0)
            started += 1
        time.sleep(0.2)
        return json.dumps({{"daemons": str(started)}})
        """,
    )
    assert found == {"daemons": "5"}
    assert_none_survive(name)


def test_limits_cannot_be_raised(tmp_path):
    found = outcomes(
        tmp_path,
        """
        kinds = {"cpu": resource.RLIMIT_CPU, "processes": resource.RLIMIT_NPROC, "file size": resource.RLIMIT_FSIZE,
                 "memory": resource.RLIMIT_AS}
        found = {}
        for name, kind in kinds.items():
            soft, hard = resource.getrlimit(kind)
            found[name + " soft == hard"] = str(soft == hard and hard != resource.RLIM_INFINITY)
            found["raise " + name] = attempt(lambda: resource.setrlimit(kind, (hard + 1, hard + 1)))
            found["lift " + name] = attempt(
                lambda: resource.setrlimit(kind, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            )
        found["uid"] = str(os.getuid())
        return json.dumps(found)
        """,
    )
    assert {k: v for k, v in found.items() if k.endswith("soft == hard")} == dict.fromkeys(
        ("cpu soft == hard", "processes soft == hard", "file size soft == hard", "memory soft == hard"), "True"
    )
    assert_refused(found)
    assert found["uid"] != "0"


def test_a_file_past_the_size_limit_cannot_be_written(tmp_path):
    found = outcomes(
        tmp_path,
        """
        def write():
            with open("big.bin", "wb") as handle:
                handle.write(b"x" * (16 << 20))
        return json.dumps({"16 MiB file with an 8 MiB limit": attempt(write)})
        """,
        SandboxLimits(file_mb=8),
    )
    assert_refused(found)
    assert "File too large" in found["16 MiB file with an 8 MiB limit"]


def test_the_cpu_limit_holds_although_the_harness_tries_to_lift_it(tmp_path):
    record, _ = attack(
        tmp_path,
        """
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
        except (ValueError, OSError):
            pass
        while True:
            pass
        """,
        SandboxLimits(cpu_seconds=2),
    )
    assert "CPU-time limit of 2s" in record.error


# ---------------------------------------------------------------- output


def test_a_100_mb_answer_is_cut_with_a_marker(tmp_path):
    record, trace_bytes = attack(tmp_path, 'return "x" * 100_000_000')
    assert record.error is None
    assert len(record.prediction) < MAX_PREDICTION_CHARS + 200
    assert record.prediction.endswith(
        f"[cut by metaharness: 100,000,000 characters, the first {MAX_PREDICTION_CHARS:,} kept]"
    )
    assert trace_bytes < 4 * MAX_PREDICTION_CHARS


def test_a_100_mb_message_written_to_the_pipe_kills_the_sandbox(tmp_path):
    record, trace_bytes = attack(
        tmp_path,
        """
        pipe = self.lm._call_model.__self__._writer  # the worker's protocol pipe, reached around the worker
        pipe.write(b'{"type": "result", "prediction": "' + b"x" * 100_000_000 + b'"}\\n')
        pipe.flush()
        return "unreachable"
        """,
    )
    assert record.prediction is None and f"more than {MAX_MESSAGE_BYTES >> 20} MiB" in record.error
    assert trace_bytes < 100_000


def test_huge_model_calls_are_cut_in_the_trace(tmp_path):
    record, trace_bytes = attack(tmp_path, 'return self.lm("y" * 1_500_000, max_tokens=4)')
    assert record.error is None and len(record.calls) == 1
    assert "[cut by metaharness: 1,500,000 characters" in record.calls[0]["messages"][-1]["content"]
    assert trace_bytes < 1_000_000


# ---------------------------------------------------------------- files and secrets


def test_writes_outside_the_folder_fail(tmp_path, shared_folder):
    targets = [str(shared_folder / "escape.txt"), "/tmp/metaharness-escape.txt", "/dev/shm/metaharness-escape"]
    targets.append(str(Path(__file__).resolve().parent / "sandbox-escape.txt"))
    found = outcomes(
        tmp_path,
        f"""
        found = {{}}
        for target in {targets!r}:
            found["write " + target] = attempt(lambda: open(target, "w").write("escaped"))
        found["write scratch"] = str(open("notes.txt", "w").write("mine"))
        found["mkdir /etc/escape"] = attempt(lambda: os.mkdir("/etc/escape"))
        return json.dumps(found)
        """,
    )
    assert found.pop("write scratch") == "4"
    assert_refused(found)
    assert not any(os.path.exists(target) for target in targets)


def test_secrets_stay_out_of_reach(tmp_path, shared_folder, monkeypatch):
    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "METAHARNESS_TEST_TOKEN"):
        monkeypatch.setenv(variable, SECRET)
    secret_file = shared_folder / "credentials"
    secret_file.write_text(SECRET)
    secret_file.chmod(0o644)
    found = outcomes(
        tmp_path,
        f"""
        seen = {{"environment": " ".join(f"{{k}}={{v}}" for k, v in os.environ.items())}}
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                for part in ("environ", "cmdline"):
                    seen[f"/proc/{{pid}}/{{part}}"] = attempt(lambda: open(f"/proc/{{pid}}/{{part}}", "rb").read())
        seen["visible pids"] = " ".join(sorted(p for p in os.listdir("/proc") if p.isdigit()))
        for path in ({str(secret_file)!r}, "/etc/shadow", "/root/.bash_history", "/proc/{os.getpid()}/environ"):
            seen["read " + path] = attempt(lambda: open(path).read())
        seen["signal the test process"] = attempt(lambda: os.kill({os.getpid()}, signal.SIGTERM))
        return json.dumps(seen)
        """,
    )
    assert SECRET not in json.dumps(found)
    assert found["visible pids"] == "1 2"  # the sandbox's init and worker: nothing of the host
    assert "pytest" not in json.dumps(found)
    assert_refused({k: v for k, v in found.items() if k.startswith(("read", "signal"))})


# ---------------------------------------------------------------- the kernel: nothing kept, nothing of the host shown

# Raw system calls from the harness (ctypes), by this machine's numbers: ``call("add_key", ...)`` raises OSError.
SYSCALLS = ["add_key", "request_key", "keyctl", "unshare", "setns", "clone", "clone3", "userfaultfd"]
SYSCALLS += ["perf_event_open", "bpf", "syslog", "name_to_handle_at", "mount", "fsopen", "open_tree", "kexec_load"]
SYSCALLS += ["init_module"]
RAW_CALLS = """
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NUMBERS = {numbers!r}


def call(name, *args):
    result = libc.syscall(NUMBERS[name], *args)
    if result == -1:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    return result
"""


def raw_calls(body: str) -> str:
    """``body`` after the definition of ``call`` (raw system calls by this machine's numbers, as the filter resolves
    them)."""
    import pyseccomp  # type: ignore[import-untyped]

    numbers = {name: pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name) for name in SYSCALLS}
    return RAW_CALLS.format(numbers=numbers) + textwrap.dedent(body)


def key_users() -> set[int]:
    """The uids that hold keys on the host (/proc/key-users)."""
    with open("/proc/key-users") as handle:
        return {int(line.split(":")[0]) for line in handle if line.strip()}


def test_the_keyring_is_out_of_reach_and_keeps_nothing(tmp_path):
    before = key_users()
    found = outcomes(
        tmp_path,
        raw_calls(
            """
        user_keyring, session_keyring = -4, -3
        return json.dumps({
            "add_key to the user keyring": attempt(
                lambda: call("add_key", b"user", b"metaharness-test", b"x" * 4000, 4000, user_keyring)
            ),
            "add_key to the session keyring": attempt(
                lambda: call("add_key", b"keyring", b"metaharness-ring", None, 0, session_keyring)
            ),
            "keyctl: the user keyring's id": attempt(lambda: call("keyctl", 0, user_keyring, 1)),
            "keyctl: join a session keyring": attempt(lambda: call("keyctl", 1, b"metaharness-session")),
            "request_key": attempt(lambda: call("request_key", b"user", b"metaharness-test", None, 0)),
        })
        """
        ),
    )
    assert_refused(found)
    assert all("Operation not permitted" in outcome for outcome in found.values()), found
    assert not {uid for uid in key_users() - before if uid >= SANDBOX_UIDS}  # no sandbox uid holds a key now


CLONE_FLAGS = {
    "user": 0x10000000,
    "mount": 0x00020000,
    "pid": 0x20000000,
    "network": 0x40000000,
    "ipc": 0x08000000,
    "uts": 0x04000000,
    "cgroup": 0x02000000,
}


def test_no_namespace_can_be_made_or_joined_and_threads_and_processes_still_start(tmp_path):
    found = outcomes(
        tmp_path,
        raw_calls(
            f"""
        import struct, subprocess, threading
        found = {{}}
        for kind, flag in {CLONE_FLAGS!r}.items():
            found[f"unshare {{kind}} namespace"] = attempt(lambda: call("unshare", flag))

        def clone(flags):
            pid = call("clone", flags | signal.SIGCHLD, 0, 0, 0, 0)
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            return pid

        def clone3(flags):
            args = struct.pack("11Q", flags, 0, 0, 0, signal.SIGCHLD, 0, 0, 0, 0, 0, 0)
            buffer = ctypes.create_string_buffer(args)
            pid = call("clone3", buffer, len(args))
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            return pid

        found["clone with a new user namespace"] = attempt(lambda: clone({CLONE_FLAGS["user"]}))
        found["clone with a new network namespace"] = attempt(lambda: clone({CLONE_FLAGS["network"]}))
        found["clone3 with a new user namespace"] = attempt(lambda: clone3({CLONE_FLAGS["user"]}))
        found["setns into its own user namespace"] = attempt(
            lambda: call("setns", os.open("/proc/self/ns/user", os.O_RDONLY), 0)
        )
        found["setns into init's network namespace"] = attempt(
            lambda: call("setns", os.open("/proc/1/ns/net", os.O_RDONLY), 0)
        )
        # What must keep working: threads, fork, a child interpreter.
        box = []
        thread = threading.Thread(target=box.append, args=("ran",))
        thread.start()
        thread.join()
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        _, status = os.waitpid(pid, 0)
        child = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True)
        found["still works: a thread, fork, a child interpreter"] = (
            f"works: {{box[0]}}, exit {{os.WEXITSTATUS(status)}}, printed {{child.stdout.strip()}}"
        )
        return json.dumps(found)
        """
        ),
    )
    assert found.pop("still works: a thread, fork, a child interpreter") == "works: ran, exit 7, printed 42"
    assert_refused(found)
    assert "Function not implemented" in found["clone3 with a new user namespace"]  # so glibc falls back to clone


def test_userfaultfd_perf_bpf_the_kernel_log_and_mounts_are_refused(tmp_path):
    found = outcomes(
        tmp_path,
        raw_calls(
            """
        buffer = ctypes.create_string_buffer(4096)
        return json.dumps({
            "userfaultfd": attempt(lambda: call("userfaultfd", 0)),
            "userfaultfd, user mode only": attempt(lambda: call("userfaultfd", 1)),
            "perf_event_open": attempt(lambda: call("perf_event_open", None, 0, -1, -1, 0)),
            "bpf": attempt(lambda: call("bpf", 5, None, 0)),
            "syslog: read the kernel log": attempt(lambda: call("syslog", 3, buffer, 4096)),
            "name_to_handle_at": attempt(lambda: call("name_to_handle_at", -100, b"/", None, None, 0)),
            "mount a tmpfs": attempt(lambda: call("mount", b"none", b"/tmp", b"tmpfs", 0, None)),
            "fsopen": attempt(lambda: call("fsopen", b"tmpfs", 0)),
            "open_tree": attempt(lambda: call("open_tree", -100, b"/", 1)),
            "kexec_load": attempt(lambda: call("kexec_load", 0, 0, None, 0)),
            "init_module": attempt(lambda: call("init_module", None, 0, b"")),
        })
        """
        ),
    )
    assert_refused(found)
    assert all("Operation not permitted" in outcome for outcome in found.values()), found


HOST_FILES = [
    "/proc/loadavg",
    "/proc/meminfo",
    "/proc/cmdline",
    "/proc/stat",
    "/proc/uptime",
    "/proc/key-users",
    "/proc/keys",
    "/proc/vmstat",
    "/proc/diskstats",
    "/proc/sys/kernel/hostname",
    "/proc/kmsg",
    "/proc/cpuinfo",
]


def test_proc_shows_the_sandboxs_processes_and_nothing_of_the_host(tmp_path):
    with open("/proc/cmdline") as handle:
        host_cmdline = handle.read().strip()
    found = outcomes(
        tmp_path,
        f"""
        found = {{path: attempt(lambda: open(path).read()) for path in {HOST_FILES!r}}}
        found["listed in /proc"] = "shown: " + " ".join(sorted(os.listdir("/proc")))
        found["its own mount table"] = "shown: " + open("/proc/self/mountinfo").read()
        found["its own status"] = "shown: " + open("/proc/self/status").read().split("\\n")[0]
        return json.dumps(found)
        """,
    )
    shown = {name: found.pop(name) for name in list(found) if found[name].startswith("shown: ")}
    assert_refused(found)
    assert host_cmdline not in json.dumps(found) + json.dumps(shown)
    assert shown["listed in /proc"] == "shown: 1 2 self thread-self"
    # Its own mount table lists only its view: its root, the read-only folders, the devices, its scratch, /proc.
    roots = set(namespaces.read_roots()) | set(namespaces.DEVICES) | {"/", "/proc"}
    points = [line.split()[4] for line in shown["its own mount table"].removeprefix("shown: ").splitlines()]
    assert {p for p in points if not p.startswith("/tmp/metaharness-sandbox-")} <= roots, points


OLD_KERNEL_PROC = """
import errno, json, os, sys
from metaharness.evaluation import namespaces

mount = namespaces._mount


def refuse_subset(libc, source, target, kind, flags, data=""):
    if "subset=pid" in data:  # as a kernel before 5.8 does
        raise OSError(errno.EINVAL, "Invalid argument")
    return mount(libc, source, target, kind, flags, data)


namespaces._mount = refuse_subset
namespaces.enter(sys.argv[1], namespaces.read_roots(), namespaces.Scratch(1 << 20, 16))
print(json.dumps({name: open("/proc/" + name).read() for name in ("loadavg", "meminfo", "cmdline", "key-users")}))
sys.stdout.flush()
os._exit(0)
"""


def test_a_kernel_without_proc_subsets_shows_the_host_files_empty(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    child = subprocess.run(
        [sys.executable, "-c", OLD_KERNEL_PROC, str(scratch)], capture_output=True, text=True, timeout=60, check=False
    )
    assert child.returncode == 0, child.stderr
    shown = json.loads(child.stdout)
    OBSERVED[current_test()] = {f"{name} with /proc mounted whole": f"reads {text!r}" for name, text in shown.items()}
    assert shown == {"loadavg": "", "meminfo": "", "cmdline": "", "key-users": ""}


# ---------------------------------------------------------------- the protocol: a deadline in both directions

# The worker's end of the protocol, reached around the worker (its LM's model call is the channel's method).
CHANNEL = "ch = self.lm._call_model.__self__"
FORGED_CALL = '(json.dumps({"type": "call", "request": {"messages": [{"role": "user", "content": "x"}]}}) + "\\n")'
QUICK = SandboxLimits(wall_seconds=30, load_seconds=30)


def test_forged_calls_written_without_reading_a_reply_kill_the_sandbox(tmp_path):
    record, _ = attack(
        tmp_path,
        f"""
        {CHANNEL}
        line = {FORGED_CALL}.encode()
        for _ in range(100_000):
            ch._writer.write(line)
            ch._writer.flush()
        time.sleep(3600)
        """,
        QUICK,
    )
    assert "made more than 64 model calls while predicting (the limit is 32) (killed)" in record.error


def test_a_harness_that_stops_reading_its_input_is_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox_module, "SEND_SECONDS", 2.0)
    long_answers = ScriptedModel("y" * 300_000)  # one answer fills the pipe: the worker must read it to take it
    record, _ = attack(
        tmp_path,
        f"""
        {CHANNEL}
        ch._writer.write({FORGED_CALL}.encode())
        ch._writer.flush()
        time.sleep(3600)
        """,
        QUICK,
        model=long_answers,
    )
    assert "stopped reading the sandbox protocol (its input stayed full for 2s) while predicting" in record.error


@pytest.mark.parametrize(
    ("statement", "met"),
    [
        ("os.close(ch._writer.fileno())", "closed the pipe it answers the parent on while predicting and kept running"),
        (
            "os.close(0)\ntry:\n    self.lm('are you there?')\nexcept BaseException:\n    pass",
            "closed the pipe it reads the parent's messages from while predicting and kept running",
        ),
    ],
    ids=["closes its answers", "closes its input"],
)
def test_a_harness_that_closes_a_protocol_pipe_and_stays_alive_is_killed(tmp_path, statement, met):
    record, _ = attack(tmp_path, f"{CHANNEL}\n{statement}\ntime.sleep(3600)", QUICK)
    assert met in record.error and record.error.endswith("(killed)"), record.error


@pytest.mark.parametrize(
    ("line", "met"),
    [
        ('b\'{"type": "ready"}\\n\'', "wrote its own message (type ready) to the sandbox protocol while predicting"),
        ("b'not json\\n'", "wrote a line that is no protocol message"),
        ("b'[' * 100_000 + b']' * 100_000 + b'\\n'", "wrote a line that is no protocol message"),
    ],
    ids=["a message the worker never sends", "not JSON", "JSON nested 100,000 deep"],
)
def test_a_line_the_worker_never_writes_kills_the_sandbox(tmp_path, line, met):
    record, _ = attack(tmp_path, f"{CHANNEL}\nch._writer.write({line})\nch._writer.flush()\ntime.sleep(3600)", QUICK)
    assert met in record.error and record.error.endswith("(killed)"), record.error


@pytest.mark.parametrize(
    ("init", "met"),
    [
        (
            f"{CHANNEL}\nfor _ in range(100_000):\n    ch._writer.write({FORGED_CALL}.encode())\n"
            "    ch._writer.flush()",
            "made more than 64 model calls while loading the harness",
        ),
        (f"{CHANNEL}\nos.close(ch._writer.fileno())", "closed the pipe it answers the parent on while loading"),
    ],
    ids=["floods calls", "closes its answers"],
)
def test_the_same_misuse_in_init_fails_the_load_within_its_deadline(tmp_path, init, met):
    record, _ = attack(tmp_path, "return 'loaded'", QUICK, init=f"{init}\ntime.sleep(3600)")
    assert record.error.startswith(LOAD_FAILED) and met in record.error, record.error


def test_a_flood_of_stderr_is_read_and_only_its_tail_kept(tmp_path):
    record, trace_bytes = attack(
        tmp_path,
        """
        chunk = "e" * (1 << 20)
        for _ in range(200):
            sys.stderr.write(chunk)
        sys.stderr.write("THE END")
        sys.stderr.flush()
        os._exit(1)
        """,
        QUICK,
    )
    assert "exited with code 1 while predicting" in record.error and record.error.endswith("THE END")
    assert len(record.error) < 3000 and trace_bytes < 10_000


# ---------------------------------------------------------------- text and exceptions a harness makes


@pytest.mark.parametrize(
    ("error", "met"),
    [
        ("def __str__(self):\n    raise RuntimeError('no words')", "E: <its str() failed>"),
        ("def __str__(self):\n    return 42", "E: <its str() failed>"),
        ("def __str__(self):\n    return 'w' * 50_000_000", "[cut by metaharness: 50,000,000 characters"),
        ("def __str__(self):\n    time.sleep(3600)", "exceeded the wall-time limit of 5s while predicting"),
    ],
    ids=["str() raises", "str() is no text", "str() of 50 MB", "str() never returns"],
)
def test_an_exception_that_cannot_say_what_it_is_still_fails_only_its_example(tmp_path, error, met):
    exception = f"class E(Exception):\n{textwrap.indent(error, '    ')}\n\n\n"
    body = exception + "if 'shivering' in x:\n    raise E()\nreturn 'ok'"
    limits = SandboxLimits(wall_seconds=5, load_seconds=30)  # the evaluation's time bound: 30 s, for one 5 s example
    record, trace_bytes = attack(tmp_path, body, limits, examples=3, workers=1)
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    OBSERVED[current_test()] = {"the example that raised": (records[1]["error"] or "")[:200]}
    assert met in records[1]["error"] and trace_bytes < 100_000
    assert records[0]["prediction"] == records[2]["prediction"] == "ok"  # the other examples were scored


def test_a_prediction_of_lone_surrogates_and_nuls_is_kept_as_written(tmp_path):
    text = "\ud800\x00[/bogus]\x1b[2J\udfff" * 1000
    record, _ = attack(tmp_path, f"return {text!r}")
    stored = json.loads((tmp_path / "records.jsonl").read_text(encoding="utf-8").splitlines()[0])["prediction"]
    OBSERVED[current_test()] = {"6,000 characters of surrogates, NULs, markup and escapes": f"kept: {stored == text}"}
    assert record.error is None and record.prediction == text and stored == text


def test_the_sandboxs_own_init_is_out_of_reach(tmp_path):
    found = outcomes(
        tmp_path,
        """
        libc = ctypes.CDLL(None, use_errno=True)

        def ptrace_attach():
            if libc.ptrace(16, 1, None, None) != 0:  # PTRACE_ATTACH
                error = ctypes.get_errno()
                raise OSError(error, os.strerror(error))
            return "attached"

        return json.dumps({
            "kill the sandbox's init": attempt(lambda: os.kill(1, signal.SIGKILL)),
            "ptrace the sandbox's init": attempt(ptrace_attach),
            "read init's memory": attempt(lambda: open("/proc/1/mem", "rb").read(16)),
            "read init's environment": attempt(lambda: open("/proc/1/environ", "rb").read()),
            "init still there": "alive" if os.path.exists("/proc/1/status") else "gone",
        })
        """,
    )
    assert found.pop("init still there") == "alive"
    assert_refused(found)


# ---------------------------------------------------------------- a slow harness and the evaluation's time bound


def test_a_slow_harness_meets_the_evaluations_time_bound_and_the_rest_scores_0(tmp_path):
    """Each example stays under its own limit, yet the evaluation as a whole stops at its bound: the examples left
    score 0 with the reason in their records, and the evaluation returns."""
    limits = SandboxLimits(wall_seconds=3, average_seconds=0.5)  # a bound of max(3, 0.5 x 3) = 3 s
    started = time.monotonic()
    path = tmp_path / "harness.py"
    path.write_text(harness_source("time.sleep(2)\nreturn '[DIAGNOSIS]dengue[/DIAGNOSIS]'"))
    report = evaluate(path, ToyTask(), "val", model=ScriptedModel("x"), limits=limits, workers=1)
    seconds = time.monotonic() - started
    errors = [record.error for record in report.records]
    OBSERVED[current_test()] = {
        "2 s per example, a bound of 3 s": f"{seconds:.1f} s; scored {[r.id for r in report.records if not r.error]}",
        "the example left": (errors[2] or "")[:200],
    }
    assert errors[:2] == [None, None] and report.records[1].scores == {"primary": 1.0}
    assert "past this evaluation's time bound" in (errors[2] or "") and "--harness-seconds" in (errors[2] or "")
    assert report.records[2].scores == {"primary": 0.0} and report.errors == 1
    assert seconds < 15


def test_the_time_bound_counts_the_harness_not_its_model(tmp_path):
    slow_model = ScriptedModel("[DIAGNOSIS]dengue[/DIAGNOSIS]", latency=1.5)
    record, _ = attack(
        tmp_path,
        "return self.lm(x)",
        SandboxLimits(wall_seconds=1, average_seconds=0.1),  # a bound of 1 s, for 4.5 s of model time
        model=slow_model,
        examples=3,
        workers=1,
    )
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert [r["error"] for r in records] == [None, None, None] and len(slow_model.requests) == 3


def test_a_slow_init_counts_against_its_own_limit_not_the_bound(tmp_path):
    record, _ = attack(
        tmp_path,
        "return '[DIAGNOSIS]dengue[/DIAGNOSIS]'",
        SandboxLimits(wall_seconds=1, load_seconds=10, average_seconds=0.1),
        init="time.sleep(2)",
        examples=3,
        workers=1,
    )
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert [r["error"] for r in records] == [None, None, None]


# ---------------------------------------------------------------- limits of the sandbox as a whole


def test_processes_of_one_harness_share_one_memory_limit(tmp_path):
    record, _ = attack(
        tmp_path,
        """
        children = []
        for _ in range(4):
            pid = os.fork()
            if pid == 0:
                hoard = b"h" * (250 << 20)  # written, so resident: 4 x 250 MiB against 600 MiB for the sandbox
                time.sleep(2)
                os._exit(0)
            children.append(pid)
        ends = []
        for pid in children:
            _, status = os.waitpid(pid, 0)
            ends.append(f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else "exited")
        return json.dumps({"4 children of 250 MiB": ", ".join(ends)})
        """,
        SandboxLimits(memory_mb=600, wall_seconds=60),
    )
    if record.error is None:
        assert (
            "killed by signal 9"
            in OBSERVED["test_processes_of_one_harness_share_one_memory_limit"]["4 children of 250 MiB"]
        )
    else:  # the kernel chose the worker itself
        assert "passed the memory limit of 600 MiB of the sandbox as a whole" in record.error


def test_memory_outside_the_address_space_counts_against_the_sandbox(tmp_path):
    record, _ = attack(
        tmp_path,
        """
        fd = os.memfd_create("hoard")  # a file in memory: none of it is in the address space
        chunk = b"m" * (1 << 20)
        for _ in range(800):
            os.write(fd, chunk)
        return "wrote 800 MiB"
        """,
        SandboxLimits(memory_mb=400, file_mb=2048, wall_seconds=60),
    )
    assert record.prediction is None
    assert "passed the memory limit of 400 MiB of the sandbox as a whole" in record.error


def test_one_harness_cannot_starve_another_sandbox_of_processes(tmp_path):
    record, _ = attack(
        tmp_path,
        """
        if "back" in x:  # the first example: take every process its sandbox may have, and hold them
            forked = 0
            try:
                while True:
                    if os.fork() == 0:
                        time.sleep(8)
                        os._exit(0)
                    forked += 1
            except OSError as exc:
                refused = str(exc)
            time.sleep(6)
            return json.dumps({"forked": str(forked), "then": refused})
        time.sleep(2)  # the other example, in another sandbox: start threads while the first holds its limit
        import threading
        started = 0
        for _ in range(30):
            threading.Thread(target=time.sleep, args=(1,)).start()
            started += 1
        return json.dumps({"threads started": str(started)})
        """,
        SandboxLimits(max_processes=40, wall_seconds=60),
        examples=2,
        workers=2,
    )
    report = json.loads((tmp_path / "records.jsonl").read_text().splitlines()[1])
    other = json.loads(report["prediction"])
    OBSERVED["test_one_harness_cannot_starve_another_sandbox_of_processes"] = {
        **OBSERVED["test_one_harness_cannot_starve_another_sandbox_of_processes"],
        **other,
    }
    assert record.error is None and "Resource temporarily unavailable" in json.loads(record.prediction)["then"]
    assert other == {"threads started": "30"}


def test_the_scratch_folder_holds_limited_bytes_and_files(tmp_path):
    found = outcomes(
        tmp_path,
        """
        made = 0
        try:
            for made in range(200_000):
                open(f"f{made}", "w").close()
            files = "ALLOWED 200,000 files"
        except OSError as exc:
            files = f"{made:,} files, then {exc}"
        for name in os.listdir("."):
            if name.startswith("f"):
                os.unlink(name)
        written = 0
        try:
            with open("big", "wb") as handle:
                for written in range(1024):
                    handle.write(b"d" * (1 << 20))
                    handle.flush()
            size = "ALLOWED 1 GiB"
        except OSError as exc:
            size = f"{written} MiB, then {exc}"
        return json.dumps({"200,000 files": files, "a file of 1 GiB": size})
        """,
        SandboxLimits(disk_mb=64, max_files=2000, file_mb=2048),
    )
    assert_refused(found)
    assert all("No space left on device" in outcome for outcome in found.values()), found


def test_cpu_used_by_child_processes_counts_against_the_example(tmp_path):
    record, _ = attack(
        tmp_path,
        """
        for _ in range(2):
            if os.fork() == 0:
                while True:
                    pass
        time.sleep(3600)
        """,
        SandboxLimits(cpu_seconds=2, wall_seconds=120),
    )
    assert "exceeded the CPU-time limit of 2s per example while predicting" in record.error


# ---------------------------------------------------------------- the parent's resources


def test_a_29_mb_prompt_costs_the_parent_no_model_call(tmp_path):
    model = ScriptedModel("x")
    record, _ = attack(tmp_path, 'return self.lm("p" * 29_000_000)', model=model)
    assert f"more than {MAX_MESSAGE_BYTES >> 20} MiB" in record.error and model.requests == []


class SmallContext(ScriptedModel):
    """A model whose context holds 4,096 tokens: at most 16 characters a token, 65,536 characters."""

    context_window = 4096


def test_a_prompt_the_context_cannot_hold_is_refused_untokenised_and_not_charged(tmp_path):
    backend = SmallContext("x")
    ledger = Ledger()
    client = Client("openai:scripted-test", backend, cache=None, ledger=ledger)
    found = outcomes(
        tmp_path,
        """
        first = attempt(lambda: self.lm("p" * 3_000_000))
        return json.dumps({"3,000,000 characters": first, "the same again": attempt(lambda: self.lm("p" * 3_000_000))})
        """,
        model=client,
    )
    assert_refused(found)
    assert "the prompt holds 3,000,000 characters, more than the 65,536" in found["3,000,000 characters"]
    assert backend.requests == [] and ledger.tokens == 0  # it cost no model time: nothing is charged


def test_requests_past_the_size_limits_are_refused(tmp_path):
    found = outcomes(
        tmp_path,
        """
        deep = level = {}
        for _ in range(40):
            level["a"] = level = {}
        return json.dumps({
            "300 messages": attempt(lambda: self.lm([{"role": "user", "content": "x"}] * 300)),
            "a stop list of 1,000": attempt(lambda: self.lm("x", stop=["s"] * 1000)),
            "a schema nested 40 deep": attempt(lambda: self.lm.json("x", {"type": "object", "properties": deep})),
            "a schema of 100,000 characters": attempt(
                lambda: self.lm.json("x", {"type": "object", "description": "d" * 100_000})
            ),
        })
        """,
    )
    assert_refused(found)
    assert all("bad lm() call" in outcome for outcome in found.values()), found


def test_the_trace_of_one_example_stays_small_whatever_its_calls_hold(tmp_path):
    record, trace_bytes = attack(
        tmp_path,
        """
        for _ in range(32):
            self.lm("q" * 150_000, max_tokens=4)
        return "done"
        """,
    )
    OBSERVED["test_the_trace_of_one_example_stays_small_whatever_its_calls_hold"] = {
        "32 calls of 150,000 characters": f"{len(record.calls)} calls traced in {trace_bytes:,} bytes"
    }
    assert record.error is None and len(record.calls) == 32
    assert trace_bytes < MAX_EXAMPLE_TRACE_CHARS * 1.3


def test_calls_made_while_the_check_loads_a_harness_are_traced(tmp_path):
    path = tmp_path / "harness.py"
    path.write_text(harness_source("return 'x'", init="self.first = self.lm('hello from __init__')"))
    model = ScriptedModel("hi")
    assert TaskEvaluator(ToyTask(), model).check(path) is None
    calls = json.loads((tmp_path / CHECK_TRACE).read_text())["calls"]
    OBSERVED["test_calls_made_while_the_check_loads_a_harness_are_traced"] = {
        "a call in __init__ during the check": f"traced in {CHECK_TRACE}: {calls[0]['messages'][-1]['content']!r}"
    }
    assert [c["messages"][-1]["content"] for c in calls] == ["hello from __init__"] and len(model.requests) == 1


# ---------------------------------------------------------------- machines without every guarantee


def test_what_each_machine_holds():
    everything = _missing(namespaces=True, seccomp=True, abi=7, root=True)
    assert everything == ()
    assert _missing(namespaces=True, seccomp=False, abi=0, root=False) == ()  # a view without host sockets
    assert _missing(namespaces=False, seccomp=True, abi=4, root=False) == ("processes", "privacy")
    assert _missing(namespaces=False, seccomp=False, abi=4, root=True) == ("network", "processes", "privacy", "uid")
    assert _missing(namespaces=False, seccomp=False, abi=0, root=False) == ("network", "files", "processes", "privacy")


def test_a_machine_missing_a_guarantee_refuses_untrusted_code_unless_told(tmp_path, monkeypatch):
    weak = Isolation(False, True, 4, None, ("processes", "privacy"), why="unshare: Operation not permitted")
    monkeypatch.setattr(sandbox_module, "isolation", lambda: weak)
    monkeypatch.delenv(sandbox_module.WEAK_SANDBOX_ENV, raising=False)
    path = tmp_path / "harness.py"
    path.write_text(HEADER + "        return 'ran'\n")
    with pytest.raises(ConfigurationError) as refused:
        evaluate(path, ToyTask(), "val", model=ScriptedModel("x"), limit=1)
    message = str(refused.value)
    assert "\n" not in message and GUARANTEES["processes"] in message and "METAHARNESS_WEAK_SANDBOX=1" in message
    assert "Operation not permitted" in message
