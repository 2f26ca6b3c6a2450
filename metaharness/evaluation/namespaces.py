"""The sandbox's namespaces and file-system view (Linux, stdlib only): what bubblewrap builds, made in-process.

``enter`` turns the calling process (the worker as the parent started it) into three::
    monitor   the process the parent started: outside the new PID namespace; mirrors the worker's exit
      init    pid 1 of a new PID namespace: reaps orphans, reports the worker's exit; never runs harness code
        worker  pid 2: returns from enter() and goes on to confine itself and load the harness

- **Network namespace**: no interface but a loopback that is down, so no address of any family is reachable.
- **PID namespace**: the worker sees only its namespace's processes (``/proc`` is the namespace's, mounted with its
  processes only: no system-wide file such as ``loadavg``, ``meminfo``, ``cmdline`` or ``key-users``; a process
  still reads its own entries, ``/proc/self/mountinfo`` among them, which lists the view below). When init
  dies (its worker exited, or the monitor was killed: init's parent-death signal is SIGKILL) the kernel kills
  every process left in the namespace, so nothing a harness starts outlives its sandbox, ``setsid`` daemons
  included. A harness cannot kill init (pid 1 ignores signals from inside its namespace) nor leave the namespace.
- **Mount namespace and a new root**: a read-only tmpfs holding read-only bind mounts of the given read paths,
  a few ``/dev`` nodes, the namespace's ``/proc`` and, at the scratch folder's path, a tmpfs of its own (``Scratch``:
  limited in bytes and in files and folders, owned by the harness's uid) as the one writable place; the host's
  scratch folder stays empty, so nothing the harness writes reaches the host's disk. Nothing else of the host's
  file system exists there: no home folders, no ``/etc``, no ``/run`` or ``/tmp`` with their Unix sockets.
- **IPC, UTS and cgroup namespaces** (the sandbox's control groups look like the root of the hierarchy to it).
- **User namespace** when not root (unprivileged user namespaces must be allowed), mapping the caller's uid and
  gid to themselves; root needs none (the worker drops to an unprivileged uid afterwards, see ``confine``).

The monitor ends as its worker ended (the same exit code, or killed by the same signal), so the parent reads the
sandbox's fate from the process it started. ``available`` tries all of this once in a child process.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import platform
import resource
import select
import signal
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass

_CLONE_NEWNS, _CLONE_NEWCGROUP, _CLONE_NEWUTS, _CLONE_NEWIPC = 0x00020000, 0x02000000, 0x04000000, 0x08000000
_CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_MOVE, _MS_REC, _MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
# statvfs flags a bind remount must keep (the kernel refuses to clear them in a user namespace), as mount flags
_KEPT_FLAGS = {
    os.ST_NOSUID: _MS_NOSUID,
    os.ST_NODEV: _MS_NODEV,
    os.ST_NOEXEC: _MS_NOEXEC,
    os.ST_NOATIME: 1024,
    os.ST_NODIRATIME: 2048,
    os.ST_RELATIME: 1 << 21,
}
_MNT_DETACH = 2
_PR_SET_PDEATHSIG = 1
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
# What a whole /proc would show of the host (covered where the kernel cannot mount /proc with its processes only).
HOST_FILES = (
    *("loadavg", "meminfo", "cmdline", "stat", "uptime", "key-users", "keys", "vmstat", "zoneinfo", "buddyinfo"),
    *("diskstats", "partitions", "swaps", "interrupts", "softirqs", "schedstat", "cpuinfo", "version", "kmsg"),
    *("timer_list", "sched_debug", "locks", "modules", "cgroups", "devices", "filesystems", "misc"),
)
TRIAL_SECONDS = 30.0


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


@dataclass(frozen=True)
class Scratch:
    """The sandbox's writable folder: a tmpfs of at most ``bytes`` bytes and ``files`` files and folders, owned by
    ``owner`` (uid and gid; None: the caller's)."""

    bytes: int
    files: int
    owner: int | None = None

    def options(self) -> str:
        owner = f",uid={self.owner},gid={self.owner}" if self.owner is not None else ""
        return f"size={self.bytes},nr_inodes={self.files},mode=0700{owner}"


def enter(scratch: str, read_paths: list[str], space: Scratch) -> None:
    """Move into new namespaces with ``scratch`` (a fresh tmpfs as ``space`` says) and ``read_paths`` (read-only)
    as the only files; returns in the worker only (the monitor and init never return). Raises OSError when the
    kernel refuses."""
    libc = _libc()
    root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWNET | _CLONE_NEWPID | _CLONE_NEWIPC | _CLONE_NEWUTS | _CLONE_NEWCGROUP
    flags |= 0 if root else _CLONE_NEWUSER
    _check(libc.unshare(flags), "unshare")
    if not root:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    status_read, status_write = os.pipe()
    alive_read, alive_write = os.pipe()  # the monitor holds the write end open for as long as it lives
    init = os.fork()
    if init:
        os.close(status_write)
        os.close(alive_read)
        _be_monitor(init, status_read, alive_write)
    os.close(status_read)
    os.close(alive_write)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if select.select([alive_read], [], [], 0)[0]:  # end of file: the monitor died before the signal was armed
        os._exit(1)
    os.close(alive_read)
    _check(libc.unshare(_CLONE_NEWNS), "unshare(mount namespace)")
    _new_root(libc, scratch, read_paths, space)
    worker = os.fork()
    if worker:
        _be_init(worker, status_write)
    os.close(status_write)


def _keep_only(*fds: int) -> None:
    """Close standard input and every descriptor above stderr but ``fds`` (the protocol pipes stay the worker's)."""
    os.close(0)
    low = 3
    for fd in sorted(fds):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def _be_monitor(init: int, status_read: int, alive_write: int) -> None:
    _keep_only(status_read, alive_write)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    report = b""
    while chunk := os.read(status_read, 64):
        report += chunk
    _, status = os.waitpid(init, 0)
    if report:
        status = int(report)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP have no handler to reset
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _be_init(worker: int, status_write: int) -> None:
    _keep_only(status_write)
    while True:
        pid, status = os.wait()
        if pid == worker:
            os.write(status_write, str(status).encode())
            os._exit(0)  # the kernel now kills whatever the harness left running


def _mount(libc: ctypes.CDLL, source: str | None, target: str, kind: str | None, flags: int, data: str = "") -> None:
    encoded = [value.encode() if value is not None else None for value in (source, target, kind, data or None)]
    _check(libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]), f"mount {source} on {target}")


def _kept_flags(path: str) -> int:
    flags = os.statvfs(path).f_flag
    return sum(mount_flag for statvfs_flag, mount_flag in _KEPT_FLAGS.items() if flags & statvfs_flag)


def _pruned(paths: list[str]) -> list[str]:
    """``paths`` without those inside another one (a bind mount brings its subfolders along)."""
    kept: list[str] = []
    for path in sorted({os.path.normpath(p) for p in paths}):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def _new_root(libc: ctypes.CDLL, scratch: str, read_paths: list[str], space: Scratch) -> None:
    """Build the view on a tmpfs mounted over ``scratch`` and pivot into it; the scratch folder in the view is a
    tmpfs of its own (``space``)."""
    _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE)
    links = {p: os.readlink(p) for p in read_paths if os.path.islink(p)}
    wanted = _pruned([os.path.realpath(p) for p in read_paths])
    sources: dict[str, int] = {}
    for path in [*wanted, *DEVICES]:
        try:
            sources[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:  # absent, or closed to this user: it was never readable from here
            continue
    new = scratch
    _mount(libc, "tmpfs", new, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
    for path, fd in sources.items():
        target = new + path
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "a").close()  # noqa: SIM115 - a mount point, nothing to write
        _mount(libc, f"/proc/self/fd/{fd}", target, None, _MS_BIND | _MS_REC)
        if path in wanted:
            _mount(libc, None, target, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _kept_flags(target))
        os.close(fd)
    os.makedirs(new + scratch, exist_ok=True)
    _mount(libc, "tmpfs", new + scratch, "tmpfs", _MS_NOSUID | _MS_NODEV, space.options())
    for link, destination in links.items():
        if not os.path.lexists(new + link):
            os.makedirs(os.path.dirname(new + link), exist_ok=True)
            os.symlink(destination, new + link)
    os.makedirs(new + "/proc")
    _mount_proc(libc, new + "/proc")
    _mount(libc, None, new, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    os.chdir(new)
    number = _PIVOT_ROOT.get(platform.machine())
    if number is not None and libc.syscall(number, b".", b".") == 0:
        _check(libc.umount2(b".", _MNT_DETACH), "detach the old root")
    else:  # no pivot_root here (or the host's root is the initial ramfs): move the view over / instead
        _mount(libc, new, "/", None, _MS_MOVE)
        os.chroot(".")
    os.chdir("/")


def _mount_proc(libc: ctypes.CDLL, target: str) -> None:
    """The namespace's /proc at ``target``: its processes only (``subset=pid``, Linux >= 5.8: no system-wide file,
    so nothing of the host's load, memory, uptime, kernel command line or keys). An older kernel refuses the
    option: there /proc is mounted whole and each file of ``HOST_FILES`` it holds is covered by /dev/null."""
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    try:
        _mount(libc, "proc", target, "proc", flags, "subset=pid")
        return
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    _mount(libc, "proc", target, "proc", flags)
    for name in HOST_FILES:
        if os.path.isfile(f"{target}/{name}"):
            _mount(libc, "/dev/null", f"{target}/{name}", None, _MS_BIND)
            _mount(libc, None, f"{target}/{name}", None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY)


def read_roots() -> list[str]:
    """Folders a harness may read: the Python installation and site-packages, system programs and libraries, time
    zones and certificates (plus, in Landlock's rules, /dev and /proc)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.update(sysconfig.get_paths().get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib"))
    paths.update(entry for entry in sys.path if entry and entry.endswith(("site-packages", "dist-packages")))
    paths.update(
        (
            "/usr/bin",
            "/bin",
            "/usr/lib",
            "/usr/lib64",
            "/lib",
            "/lib64",
            "/usr/share/zoneinfo",
            "/etc/ssl",
        )
    )
    return sorted(p for p in paths if p and os.path.exists(p))


def _trial(scratch: str) -> None:
    """Enter the namespaces with this interpreter's files readable; the worker exits 0 (the monitor mirrors it)."""
    enter(scratch, read_roots(), Scratch(1 << 20, 16))
    os._exit(0 if sorted(p for p in os.listdir("/proc") if p.isdigit()) == ["1", "2"] else 3)


@functools.cache
def available() -> tuple[bool, str]:
    """Whether ``enter`` works here (tried once per process, in a child), and the kernel's refusal if not."""
    if not sys.platform.startswith("linux"):
        return False, "not Linux"
    scratch = tempfile.mkdtemp(prefix="metaharness-namespace-trial-")
    code = f"from metaharness.evaluation.namespaces import _trial; _trial({scratch!r})"
    try:
        trial = subprocess.run(
            [sys.executable, "-s", "-B", "-c", code], capture_output=True, text=True, timeout=TRIAL_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    finally:
        os.rmdir(scratch)
    if trial.returncode == 0:
        return True, ""
    lines = trial.stderr.strip().splitlines()
    return False, lines[-1] if lines else f"exit code {trial.returncode}"
