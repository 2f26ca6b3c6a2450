"""Limits for a sandbox as a whole: a control group of its own in each controller this process may write (stdlib).

Process limits (``setrlimit``) bind each process alone: eight processes of one harness may each use the whole
address-space limit, and memory outside any address space (a file on a tmpfs, a pipe's buffer) counts against
none. A control group counts every process of the sandbox together, whatever kind of memory it uses. The parent
makes one group per sandbox, beneath the groups it runs in itself (so every limit set on the parent still holds),
puts the sandbox's first process in it before that process reads its first message (every process the harness
starts inherits it), and removes it when the sandbox ends. Three controllers are used:

- **memory** (v1 ``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes``, v2 ``memory.max`` and
  ``memory.swap.max``): the sandbox's memory of every kind; past it the kernel kills a process of the group, and
  ``oom_kills`` says so;
- **pids** (``pids.max``): processes and threads of the sandbox together; ``refused_tasks`` counts the forks
  refused;
- **cpu** (v1 ``cpuacct.usage``, v2 ``cpu.stat``): the CPU time of every process of the sandbox, which the parent
  reads to enforce the per-example CPU limit;
- **cpu share** (v1 ``cpu``, v2 ``cpu``): each sandbox's group has the default weight, so sandboxes busy at once
  share the CPU equally, however many processes each runs.

Each controller is looked up in ``/proc/self/mountinfo`` (v1 hierarchies, and the v2 one) and
``/proc/self/cgroup`` (this process's group in each), and used when this process may create a group beneath its
own there: as root, or where the group was delegated. On v2 the memory and pids controllers must also be enabled
for the children of this process's group (its ``cgroup.subtree_control``); CPU time is counted in every v2 group.
``held`` says which controllers this machine gives a sandbox; where one is missing the process limits alone hold
(see the table of docs/sandbox.md).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import signal
import time
from dataclasses import dataclass, field

CONTROLLERS = ("memory", "pids", "cpu", "cpu share")
_V1_NAMES = {"memory": "memory", "pids": "pids", "cpu": "cpuacct", "cpu share": "cpu"}
_V2_NAMES = {"memory": "memory", "pids": "pids", "cpu": "cpu", "cpu share": "cpu"}
_PREFIX = "metaharness-sandbox-"
_numbers = itertools.count(1)


@dataclass(frozen=True)
class _Hierarchy:
    """Where this process's own group of one controller is (``folder``), and whether it is cgroup v2."""

    folder: str
    v2: bool


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file-system type, super options) of every cgroup mount this process sees."""
    found = []
    try:
        with open("/proc/self/mountinfo") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    for line in lines:
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((fields[4], tail[0], set(tail[2].split(","))))
    return found


def _own_groups() -> dict[str, str]:
    """This process's group path in each v1 controller (by controller name) and in v2 (key ``""``)."""
    groups = {}
    try:
        with open("/proc/self/cgroup") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            groups[name] = path
    return groups


def _writable(folder: str) -> bool:
    """Whether a group can be made (and removed) beneath ``folder``."""
    trial = os.path.join(folder, f"{_PREFIX}trial-{os.getpid()}")
    try:
        os.mkdir(trial)
    except OSError:
        return False
    with contextlib.suppress(OSError):
        os.rmdir(trial)
    return True


def _v2_enabled(folder: str) -> set[str]:
    try:
        with open(os.path.join(folder, "cgroup.subtree_control")) as handle:
            return set(handle.read().split())
    except OSError:
        return set()


@functools.cache
def hierarchies() -> dict[str, _Hierarchy]:
    """The controllers of ``CONTROLLERS`` a sandbox's group can use here, each with where its groups go (v1 first:
    a controller bound to a v1 hierarchy is absent from v2)."""
    own = _own_groups()
    found: dict[str, _Hierarchy] = {}
    for point, kind, options in _mounts():
        if kind == "cgroup":
            for controller, name in _V1_NAMES.items():
                if name in options and controller not in found and name in own:
                    folder = os.path.normpath(point + own[name])
                    if _writable(folder):
                        found[controller] = _Hierarchy(folder, v2=False)
    for point, kind, _ in _mounts():
        if kind == "cgroup2" and "" in own:
            folder = os.path.normpath(point + own[""])
            if not _writable(folder):
                continue
            enabled = _v2_enabled(folder)
            for controller in CONTROLLERS:
                # cpu.stat's usage is counted in every v2 group; the rest needs its controller enabled for children
                if (controller == "cpu" or _V2_NAMES[controller] in enabled) and controller not in found:
                    found[controller] = _Hierarchy(folder, v2=True)
    return found


def held() -> list[str]:
    """The controllers a sandbox gets a group of its own in on this machine."""
    return [c for c in CONTROLLERS if c in hierarchies()]


def _write(path: str, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(folder: str) -> None:
    """Remove the empty groups that sandboxes of a process now dead left in ``folder`` (killed with SIGKILL, it
    could not remove them itself)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            owner = name.removeprefix(_PREFIX).split("-")[0]
            if name.startswith(_PREFIX) and owner.isdigit() and not _alive(int(owner)):
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(folder, name))


@functools.cache
def _cleaned(folder: str) -> bool:
    _remove_stale(folder)
    return True


@dataclass
class SandboxGroup:
    """The groups of one sandbox (``folders``: controller -> its group's folder; none where no controller is held).
    ``create`` makes them with the sandbox's limits; ``join`` puts its first process in; ``remove`` kills whatever
    is left in them and removes them."""

    folders: dict[str, str] = field(default_factory=dict)
    v2: dict[str, bool] = field(default_factory=dict)

    @classmethod
    def create(cls, memory_mb: int, max_tasks: int) -> SandboxGroup:
        """A group per held controller: memory limited to ``memory_mb`` MiB (swap included), at most ``max_tasks``
        processes and threads. Raises ``OSError`` when the kernel refuses a limit."""
        group = cls()
        name = f"{_PREFIX}{os.getpid()}-{next(_numbers)}"
        try:
            for controller, where in hierarchies().items():
                _cleaned(where.folder)
                folder = os.path.join(where.folder, name)
                if folder not in group.folders.values():
                    os.mkdir(folder)
                group.folders[controller], group.v2[controller] = folder, where.v2
            group._limit(memory_mb << 20, max_tasks)
        except BaseException:
            group.remove()
            raise
        return group

    def _limit(self, memory: int, tasks: int) -> None:
        if (folder := self.folders.get("memory")) is not None:
            if self.v2["memory"]:
                _write(f"{folder}/memory.max", str(memory))
                with contextlib.suppress(OSError):  # absent without swap accounting
                    _write(f"{folder}/memory.swap.max", "0")
            else:
                _write(f"{folder}/memory.limit_in_bytes", str(memory))
                with contextlib.suppress(OSError):  # absent without swap accounting (memsw must be >= the limit)
                    _write(f"{folder}/memory.memsw.limit_in_bytes", str(memory))
        if (folder := self.folders.get("pids")) is not None:
            _write(f"{folder}/pids.max", str(tasks))

    @property
    def controllers(self) -> list[str]:
        return [c for c in CONTROLLERS if c in self.folders]

    def join(self, pid: int) -> None:
        """Put process ``pid`` (and so every process it starts) in every group."""
        for folder in sorted(set(self.folders.values())):
            _write(f"{folder}/cgroup.procs", str(pid))

    def cpu_seconds(self) -> float | None:
        """CPU time used by every process of the group so far (None without the cpu controller)."""
        folder = self.folders.get("cpu")
        if folder is None:
            return None
        if self.v2["cpu"]:
            text = _read(f"{folder}/cpu.stat") or ""
            usage = dict(line.split() for line in text.splitlines() if len(line.split()) == 2).get("usage_usec")
            return int(usage) / 1e6 if usage is not None else None
        usage = _read(f"{folder}/cpuacct.usage")
        return int(usage) / 1e9 if usage else None

    def _event(self, controller: str, file: str, key: str) -> int:
        folder = self.folders.get(controller)
        text = _read(f"{folder}/{file}") if folder is not None else None
        for line in (text or "").splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
        return 0

    def oom_kills(self) -> int:
        """Processes of the group the kernel killed for passing its memory limit."""
        v2 = self.v2.get("memory", False)
        return self._event("memory", "memory.events" if v2 else "memory.oom_control", "oom_kill")

    def refused_tasks(self) -> int:
        """Forks and thread starts refused for passing the group's task limit."""
        return self._event("pids", "pids.events", "max")

    def pids(self) -> list[int]:
        found: set[int] = set()
        for folder in set(self.folders.values()):
            found.update(int(p) for p in (_read(f"{folder}/cgroup.procs") or "").split() if p.isdigit())
        return sorted(found)

    def remove(self, seconds: float = 2.0) -> None:
        """Kill every process left in the groups and remove them (a group cannot be removed while a process is in
        it, and the kernel takes a moment to reap a killed one)."""
        deadline = time.monotonic() + seconds
        for folder in sorted(set(self.folders.values())):
            while True:
                for pid in self.pids():
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break  # left for the next process's clean-up once this one is gone (_remove_stale)
                    time.sleep(0.01)
        self.folders.clear()
