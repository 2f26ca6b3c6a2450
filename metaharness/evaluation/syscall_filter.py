"""A seccomp filter that takes the network away from a sandbox process: no socket of any family can be created.

Built with libseccomp through ``pyseccomp`` (a ctypes binding with the API of libseccomp's own Python module,
which is used instead when it is installed). The filter allows every system call but these, which fail with
EPERM (Python raises PermissionError):

- ``socket``: every address family (IPv4, IPv6, Unix, netlink, packet, ...), so no connection, datagram or
  listener can be made; ``socketpair`` stays allowed (a connected pair reaches nothing outside the process tree);
- ``io_uring_setup``/``io_uring_enter``/``io_uring_register``: io_uring can open sockets without the ``socket``
  system call.

System calls of another architecture (i386 or x32 from an x86-64 process) kill the process (libseccomp's
default), so the 32-bit ``socketcall`` cannot bypass the rule. The filter holds for every thread and child that
the process creates afterwards, and no process can remove it.
"""

from __future__ import annotations

import errno
import functools
import importlib
from types import ModuleType

DENIED = ("socket", "io_uring_setup", "io_uring_enter", "io_uring_register")


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


def deny_network() -> None:
    """Install the filter in the calling process (see the module docstring); raises OSError if the kernel refuses
    and RuntimeError if ``available`` is False."""
    seccomp = _binding()
    if seccomp is None:
        raise RuntimeError("libseccomp is not available: pip install pyseccomp, and install libseccomp2")
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in DENIED:
        rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
    rules.load()
