"""Confinement a sandbox process applies to itself before it loads untrusted harness code (stdlib, and libseccomp
when installed).

The parent decides once per process which layers this machine offers (``isolation``); the worker applies
them with ``confine``, in this order:

1. **namespaces** (``.namespaces``; as root, or where unprivileged user namespaces are allowed): network, PID,
   mount, IPC and UTS namespaces, and a new root holding only the Python installation, the system libraries, a
   few /dev nodes, the namespace's /proc and the scratch folder;
2. **an unprivileged uid of its own**: as root, the capability bounding set is emptied and the process becomes
   ``SANDBOX_UIDS`` plus the pid of the sandbox's first process, a uid no other sandbox and no user has, so the
   process limit of one sandbox is never shared with another's. With namespaces this works wherever Python is
   installed (the view makes it readable to any uid); without them, only where Landlock is missing (today's
   fallback, which needs a world-readable Python);
3. **limits that cannot be raised** (``setrlimit`` with hard == soft): address space, CPU seconds for the whole
   life of the worker (the parent enforces the per-example CPU limit from outside), processes and threads (which
   bind because the uid is not root), file size, no core dumps;
4. **seccomp** (``.syscall_filter``): no socket of any family, no keyring, no new namespace, no userfaultfd,
   perf events, BPF or kernel log, nothing that mounts or loads into the kernel;
5. **Landlock** (Linux >= 5.13, syscalls through ctypes): writes only beneath the scratch folder (and to
   /dev/null), reads only beneath the Python installation, the system library folders, /dev, /proc and the
   scratch folder; on ABI >= 4 no TCP bind or connect; on ABI >= 6 no signals and no abstract Unix sockets
   outside the sandbox. Landlock also stops the process from ptrace-reading other processes;
6. **no capabilities** left (effective, permitted, inheritable, ambient) and ``no_new_privs``.

``GUARANTEES`` lists what a sandbox must hold; ``Isolation`` says which layers a machine has and which
guarantees they leave ``missing``. When a kernel lacks Landlock and the evaluator is neither root nor allowed
namespaces, ``confine`` raises ``ConfinementUnavailable``.
"""

from __future__ import annotations

import ctypes
import functools
import os
import resource
import signal
import sys
from dataclasses import dataclass

from metaharness.evaluation import cgroups, namespaces, syscall_filter

# As root each sandbox runs as a uid of its own: this plus the pid of its first process (unique while it lives;
# pids stay below 2**22), far above the uids of real users and of the usual subordinate-uid ranges.
SANDBOX_UIDS = 2_000_000_000

# Syscall numbers are the same on every architecture that has Landlock (generic syscall table).
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_PDEATHSIG = 1
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
    """Limits of a sandbox: memory (MiB: each process's address space, and with the memory controller every kind of
    memory of the sandbox together), CPU seconds, how many processes and threads it may run, the size of any file
    it writes (MiB), and its scratch folder's size (``disk_mb``) and number of files and folders (``max_files``)."""

    memory_mb: int = 4096
    cpu_seconds: int = 300
    max_processes: int = 256
    file_mb: int = 256
    disk_mb: int = 512
    max_files: int = 10_000


GUARANTEES = {
    "network": "no network of any family (TCP, UDP, Unix, raw, netlink)",
    "files": "writes only in its own folder, reads only Python and the system libraries",
    "processes": "every process it starts ends with its evaluation",
    "privacy": "other processes, their command lines and the host's system-wide /proc files are invisible",
    "uid": "an unprivileged uid, with limits it cannot raise",
}
# Tasks of a sandbox before the harness starts: monitor, init, worker (charged to its user namespace's uid, and
# counted in its control group's task limit).
SANDBOX_TASKS = 3


@dataclass(frozen=True)
class Isolation:
    """The layers a sandbox gets on this machine (see the module docstring) and the guarantees they leave missing.

    ``uid``: where the uids of sandboxes start when a harness does not run as the evaluator's uid (root's sandboxes
    each run as a uid of their own, ``sandbox_uid``); ``why``: why namespaces are unavailable, when they are."""

    namespaces: bool
    seccomp: bool
    landlock_abi: int
    uid: int | None
    missing: tuple[str, ...]
    why: str = ""

    @property
    def layers(self) -> list[str]:
        found = [
            "namespaces" if self.namespaces else "",
            "a uid of its own" if self.uid is not None else ("no capabilities" if os.geteuid() == 0 else ""),
            "seccomp" if self.seccomp else "",
            f"landlock (ABI {self.landlock_abi})" if self.landlock_abi else "",
        ]
        return [layer for layer in found if layer]

    def sandbox_uid(self, pid: int) -> int | None:
        """The uid of the sandbox whose first process is ``pid`` (None: the evaluator's own)."""
        return None if self.uid is None else self.uid + pid

    def plan(self) -> dict[str, object]:
        """What the worker needs to know (the ``isolation`` of its init message; the sandbox adds its ``uid``)."""
        return {"namespaces": self.namespaces, "seccomp": self.seccomp}


def _missing(namespaces: bool, seccomp: bool, abi: int, root: bool) -> tuple[str, ...]:
    held = {
        "network": seccomp or namespaces,  # namespaces: no interface up, and no host Unix socket in the view
        "files": namespaces or bool(abi),
        "processes": namespaces,
        "privacy": namespaces,
        "uid": namespaces or not root,
    }
    return tuple(name for name in GUARANTEES if not held[name])


@functools.cache
def isolation() -> Isolation:
    """What a sandbox gets on this machine (namespaces are tried once in a child process)."""
    abi = landlock_abi()
    root = os.geteuid() == 0
    usable, why = namespaces.available()
    seccomp = syscall_filter.available()
    uid = SANDBOX_UIDS if root and (usable or not abi) else None
    return Isolation(usable, seccomp, abi, uid, _missing(usable, seccomp, abi, root), why)


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
    """What confinement this machine offers: its layers (also joined by "+" as ``write_barrier``, the name an
    evaluation report's sandbox entry reads), the controllers that limit a sandbox as a whole (``whole_sandbox``,
    see ``.cgroups``), the guarantees missing, Landlock ABI and uid."""
    found = isolation()
    return {
        "write_barrier": "+".join(found.layers),
        "layers": found.layers,
        "whole_sandbox": cgroups.held(),
        "missing": [GUARANTEES[name] for name in found.missing],
        "landlock_abi": found.landlock_abi,
        "uid": os.geteuid(),
    }


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


def _set_limits(limits: Limits, charged: int) -> None:
    """Hard == soft for every limit; ``charged``: the tasks already counted against the uid the harness runs as."""

    def fix(kind: int, value: int) -> None:
        resource.setrlimit(kind, (value, value))

    fix(resource.RLIMIT_AS, limits.memory_mb << 20)
    fix(resource.RLIMIT_CPU, limits.cpu_seconds)
    fix(resource.RLIMIT_CORE, 0)
    fix(resource.RLIMIT_FSIZE, limits.file_mb << 20)
    fix(resource.RLIMIT_NPROC, charged + limits.max_processes)


def arm_parent_death() -> None:
    """Have the kernel kill this process (SIGKILL) when its parent dies. The kernel disarms it when the process
    changes uid, so ``confine`` arms it again after the change."""
    _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _become(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # every uid leaves 0: permitted and effective capabilities are cleared


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _last_capability() -> int:
    """The highest capability number this kernel knows (read before the sandbox's /proc, which holds no /proc/sys)."""
    with open("/proc/sys/kernel/cap_last_cap") as handle:
        return int(handle.read())


def _drop_bounding_set(last: int) -> None:
    """Empty the bounding set (capabilities 0 to ``last``), so no later exec can gain a capability (needs
    CAP_SETPCAP)."""
    libc = _libc()
    for cap in range(last + 1):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap})")


def _clear_capabilities() -> None:
    """Clear the ambient set, then effective/permitted/inheritable (capset, version 3)."""
    libc = _libc()
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
    handled = _FS_BY_ABI.get(abi, _FS_ALL)
    attr = _RulesetAttr(handled, _NET_TCP if abi >= 4 else 0, _SCOPE_ALL if abi >= 6 else 0)
    reads = [*namespaces.read_roots(), *(p for p in ("/proc", "/dev") if os.path.exists(p))]
    rules = [(root, _READ & handled) for root in reads]
    rules += [("/dev/null", (_READ | _FS["write_file"]) & handled), (writable, handled)]
    _enforce_ruleset(abi, attr, rules)


def _enforce_ruleset(abi: int, attr: _RulesetAttr, rules: list[tuple[str, int]]) -> None:
    """Create a Landlock ruleset that handles ``attr``, allow each ``(path, access)`` of ``rules`` beneath its path,
    set ``no_new_privs`` (Landlock requires it) and enforce the ruleset on this process and what it executes."""
    libc = _libc()
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        for path, access in rules:
            _add_rule(libc, ruleset, path, access)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def confine(scratch: str, limits: Limits, plan: dict[str, object]) -> list[str]:
    """Confine the calling process to ``scratch`` with the layers of ``plan`` (``Isolation.plan``); returns
    the layers applied. With namespaces it returns in a new process (see ``.namespaces``)."""
    abi = landlock_abi()
    root = os.geteuid() == 0
    uid = plan.get("uid")
    if not (plan.get("namespaces") or abi or root):
        raise ConfinementUnavailable(
            "This kernel has neither Landlock (Linux >= 5.13 with landlock in the LSM list) nor unprivileged user "
            "namespaces, so a harness could write anywhere this user can. Enable either, or run as root."
        )
    charged = _tasks_of_uid(uid if isinstance(uid, int) else os.getuid())  # read before /proc is the sandbox's
    last_capability = _last_capability()
    if plan.get("seccomp"):
        syscall_filter.available()  # loads libseccomp while the host's library paths and ldconfig are in view
    layers = []
    if plan.get("namespaces"):
        owner = uid if isinstance(uid, int) else None
        namespaces.enter(
            scratch, namespaces.read_roots(), namespaces.Scratch(limits.disk_mb << 20, limits.max_files, owner)
        )
        layers.append("namespaces")
        charged = charged if root else SANDBOX_TASKS  # its own user namespace counts only the sandbox's tasks
    if root or plan.get("namespaces"):
        _drop_bounding_set(last_capability)
    _set_limits(limits, charged + (1 if isinstance(uid, int) else 0))
    if isinstance(uid, int):
        _become(uid)
        layers.append("a uid of its own")
        arm_parent_death()  # a change of uid disarms it
    if plan.get("seccomp"):
        syscall_filter.install()
        layers.append("seccomp")
    if abi:
        _apply_landlock(abi, scratch)
        layers.append(f"landlock (ABI {abi})")
    _clear_capabilities()
    _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    return layers
