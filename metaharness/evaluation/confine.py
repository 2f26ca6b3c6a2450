"""Confinement a sandbox process applies to itself before it loads untrusted harness code (stdlib only).

What holds, in this order (:func:`confine`):

1. resource limits (``setrlimit``): address space, CPU seconds, new processes/threads, no core dumps;
2. when running as root: every capability is dropped (effective, permitted, inheritable, ambient and the bounding
   set), so the process keeps uid 0 but can no longer raise its limits, load kernel modules, mount, trace or
   override file permissions;
3. ``no_new_privs`` and a Landlock ruleset (Linux >= 5.13, syscalls through ctypes): writes are allowed only
   beneath the scratch folder (and to ``/dev/null``), reads only beneath the Python installation, the system
   library folders and the scratch folder; on ABI >= 4 no TCP connection or bind is allowed at all (the task model
   is reachable only through the parent's proxy); on ABI >= 6 signals and abstract unix sockets outside the sandbox
   are refused. Landlock also stops the process from ptrace-reading other processes (``/proc/<pid>/environ``).

Landlock is enforced by the kernel whatever the uid, so the write barrier holds for root and for normal users
alike. When the kernel lacks Landlock, :func:`confine` raises :class:`ConfinementUnavailable` unless the process
runs as root; then it switches to the unprivileged user ``nobody`` (65534), which can write only where ``nobody``
may (this needs the Python installation to be readable by ``nobody``). :func:`probe`
reports what this machine offers.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
import sysconfig
from dataclasses import dataclass

NOBODY = 65534

# Syscall numbers are the same on every architecture that has Landlock (generic syscall table).
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# landlock_ruleset_attr.handled_access_fs bits
_FS = {
    "execute": 1 << 0,
    "write_file": 1 << 1,
    "read_file": 1 << 2,
    "read_dir": 1 << 3,
    "remove_dir": 1 << 4,
    "remove_file": 1 << 5,
    "make_char": 1 << 6,
    "make_dir": 1 << 7,
    "make_reg": 1 << 8,
    "make_sock": 1 << 9,
    "make_fifo": 1 << 10,
    "make_block": 1 << 11,
    "make_sym": 1 << 12,
    "refer": 1 << 13,
    "truncate": 1 << 14,
    "ioctl_dev": 1 << 15,
}
_FS_ABI1 = (1 << 13) - 1
_FS_ABI3 = _FS_ABI1 | _FS["refer"] | _FS["truncate"]
_FS_BY_ABI = {1: _FS_ABI1, 2: _FS_ABI1 | _FS["refer"], 3: _FS_ABI3, 4: _FS_ABI3}
_FS_ALL = _FS_ABI3 | _FS["ioctl_dev"]  # ABI >= 5
_READ = _FS["execute"] | _FS["read_file"] | _FS["read_dir"]
_FILE_ONLY = _FS["execute"] | _FS["write_file"] | _FS["read_file"] | _FS["truncate"] | _FS["ioctl_dev"]
_NET_TCP = (1 << 0) | (1 << 1)  # bind, connect
_SCOPE_ALL = (1 << 0) | (1 << 1)  # abstract unix sockets, signals


class ConfinementUnavailable(RuntimeError):
    """Neither Landlock nor a privilege drop can confine writes on this machine."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@dataclass(frozen=True)
class Limits:
    """Per-process limits of a sandbox: address space (MiB), CPU seconds, and how many processes/threads it may
    start (on top of those its uid already runs)."""

    memory_mb: int = 4096
    cpu_seconds: int = 300
    max_processes: int = 256


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is absent or disabled."""
    if not sys.platform.startswith("linux"):
        return 0
    version = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def probe() -> dict[str, object]:
    """What confinement this machine offers: Landlock ABI, uid, and the write barrier that would be used."""
    abi = landlock_abi()
    root = os.geteuid() == 0
    barrier = ("landlock+nocaps" if root else "landlock") if abi else ("nobody" if root else None)
    return {"landlock_abi": abi, "uid": os.geteuid(), "write_barrier": barrier}


def read_roots() -> list[str]:
    """Folders a harness may read: the Python installation and site-packages, system programs and libraries, /dev,
    /proc (other processes' entries stay closed: Landlock forbids tracing them)."""
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
            "/proc",
            "/dev",
        )
    )
    return sorted(p for p in paths if p and os.path.exists(p))


def _tasks_of_uid(uid: int) -> int:
    """Threads the user already runs (RLIMIT_NPROC counts every thread of the real uid, machine-wide)."""
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            count += int(fields.get("Threads", "1"))
    return count


def _set_limits(limits: Limits, uid: int) -> None:
    memory = limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    processes = _tasks_of_uid(uid) + limits.max_processes
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))


def _become_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)  # all uids become 65534: permitted and effective capabilities are cleared


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> None:
    """Empty the bounding and ambient sets, then clear effective/permitted/inheritable (capset, version 3)."""
    libc = _libc()
    with open("/proc/sys/kernel/cap_last_cap") as handle:
        last = int(handle.read())
    for cap in range(last + 1):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap})")
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: str, access: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if not os.path.isdir(path):
            access &= _FILE_ONLY
        attr = _PathBeneathAttr(access, fd)
        if (
            libc.syscall(
                _SYS_ADD_RULE,
                ctypes.c_int(ruleset),
                ctypes.c_int(_RULE_PATH_BENEATH),
                ctypes.byref(attr),
                ctypes.c_uint32(0),
            )
            != 0
        ):
            raise OSError(ctypes.get_errno(), f"landlock_add_rule({path})")
    finally:
        os.close(fd)


def _apply_landlock(abi: int, writable: str) -> None:
    libc = _libc()
    handled = _FS_BY_ABI.get(abi, _FS_ALL)
    attr = _RulesetAttr(handled, _NET_TCP if abi >= 4 else 0, _SCOPE_ALL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        for root in read_roots():
            _add_rule(libc, ruleset, root, _READ & handled)
        _add_rule(libc, ruleset, "/dev/null", (_READ | _FS["write_file"]) & handled)
        _add_rule(libc, ruleset, writable, handled)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def confine(scratch: str, limits: Limits) -> str:
    """Confine the calling process to ``scratch``; returns the barrier used (see the module docstring)."""
    abi = landlock_abi()
    root = os.geteuid() == 0
    if not abi and not root:
        raise ConfinementUnavailable(
            "This kernel has no Landlock (Linux >= 5.13 with landlock in the LSM list) and the evaluator is not "
            "root, so a harness could write anywhere this user can. Run on a kernel with Landlock enabled, or as "
            "root (the sandbox then drops to the unprivileged user nobody)."
        )
    barrier = str(probe()["write_barrier"])
    _set_limits(limits, os.getuid() if abi else NOBODY)
    if abi:
        _apply_landlock(abi, scratch)  # needs no privilege; sets no_new_privs first
        if root:
            _drop_capabilities()
    else:
        _become_nobody()
        _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    return barrier
