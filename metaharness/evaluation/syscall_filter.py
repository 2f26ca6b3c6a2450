"""The sandbox's seccomp filter: no network, and nothing that would outlive the sandbox or reach past its namespaces.

Built with libseccomp through ``pyseccomp`` (a ctypes binding with the API of libseccomp's own Python module,
which is used instead when it is installed). The filter is a deny list: it allows every system call but those below,
which fail with EPERM (Python raises PermissionError). Everything a harness legitimately does (Python, numpy, files
in its scratch folder, threads, ``fork``, ``subprocess``, pipes, ``memfd``, signals within the sandbox) stays
allowed; what is denied is what no harness needs and what would let it act beyond its evaluation:

- the network: ``socket`` of every address family (IPv4, IPv6, Unix, netlink, packet, ...), so no connection,
  datagram or listener can be made; ``socketpair`` stays allowed (a connected pair reaches nothing outside the
  process tree); ``io_uring_setup``/``io_uring_enter``/``io_uring_register`` (io_uring can open sockets without
  the ``socket`` system call);
- the kernel keyrings: ``add_key``, ``request_key``, ``keyctl``. A key belongs to the uid, not to the process: it
  would outlive the sandbox, uncounted by any memory limit, for a later sandbox with the same uid to read;
- new namespaces: ``unshare``, ``setns``, and ``clone`` with any ``CLONE_NEW*`` flag (user, mount, PID, network,
  IPC, UTS, cgroup). A new user namespace gives a full capability set inside it, a reach into kernel code that
  unprivileged processes otherwise never touch. ``clone3``, whose flags sit in memory where a filter cannot read
  them, fails with ENOSYS instead, so that the C library falls back to ``clone`` (threads and ``fork`` work);
- ``userfaultfd`` (holds kernel threads at a page fault: a classic step of kernel exploits), ``perf_event_open``
  and ``bpf`` (host-wide measurements, kernel programs), ``syslog`` (the kernel's log), ``name_to_handle_at`` and
  ``open_by_handle_at`` (open a file by handle, around the mount view);
- what needs a privilege the sandbox has dropped anyway, denied so that no future hole reaches it: mounting
  (``mount``, ``umount2``, ``pivot_root``, ``chroot``, ``fsopen``, ``fsconfig``, ``fsmount``, ``fspick``,
  ``move_mount``, ``open_tree``, ``mount_setattr``), kernel modules and kexec (``init_module``, ``finit_module``,
  ``delete_module``, ``kexec_load``, ``kexec_file_load``), ``swapon``, ``swapoff``, ``reboot``, ``acct``,
  ``quotactl``, ``lookup_dcookie``.

System calls of another architecture (i386 or x32 from an x86-64 process) kill the process (libseccomp's
default), so the 32-bit ``socketcall`` cannot bypass the rule. The filter holds for every thread and child that
the process creates afterwards, and no process can remove it. (``clone``'s flags are its first argument on x86-64
and arm64, the architectures this is run on; s390 orders them otherwise.)
"""

from __future__ import annotations

import errno
import functools
import importlib
from types import ModuleType

NETWORK = ("socket", "io_uring_setup", "io_uring_enter", "io_uring_register")
KEYRINGS = ("add_key", "request_key", "keyctl")
NAMESPACES = ("unshare", "setns")
KERNEL = ("userfaultfd", "perf_event_open", "bpf", "syslog", "name_to_handle_at", "open_by_handle_at")
PRIVILEGED = (
    *("mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount"),
    *("open_tree", "mount_setattr", "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load"),
    *("swapon", "swapoff", "reboot", "acct", "quotactl", "lookup_dcookie"),
)
DENIED = (*NETWORK, *KEYRINGS, *NAMESPACES, *KERNEL, *PRIVILEGED)
# clone's flags that make a new namespace (CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER,
# CLONE_NEWPID, CLONE_NEWNET); CLONE_NEWTIME shares its bit with clone's exit signal and is refused by unshare.
CLONE_NEW_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)


@functools.cache
def _binding() -> ModuleType | None:
    """libseccomp's Python module (``seccomp``, e.g. Debian's python3-seccomp) or ``pyseccomp``; None when
    neither loads (no module, or no libseccomp.so.2 on the machine)."""
    for name in ("seccomp", "pyseccomp"):
        try:
            return importlib.import_module(name)
        except (ImportError, OSError, AttributeError):  # pyseccomp raises OSError without libseccomp.so.2
            continue
    return None


def available() -> bool:
    """Whether the filter can be built here (libseccomp and a binding for it are installed)."""
    return _binding() is not None


def install() -> None:
    """Install the filter in the calling process (see the module docstring); raises OSError if the kernel refuses
    and RuntimeError if ``available`` is False. A system call this libseccomp does not know (an older version) is
    left out: the kernels of its time do not have it either."""
    seccomp = _binding()
    if seccomp is None:
        raise RuntimeError("libseccomp is not available: pip install pyseccomp, and install libseccomp2")
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    refused = seccomp.ERRNO(errno.EPERM)
    known = [name for name in (*DENIED, "clone3") if seccomp.resolve_syscall(seccomp.Arch.NATIVE, name) >= 0]
    for name in DENIED:
        if name in known:
            rules.add_rule(refused, name)
    for flag in CLONE_NEW_FLAGS:
        rules.add_rule(refused, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    if "clone3" in known:
        rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    rules.load()
