"""Start a coding-agent CLI confined to writing its workspace: ``python -m metaharness.proposers.agent_sandbox``.

Usage: ``python -m metaharness.proposers.agent_sandbox --write DIR [--write DIR ...] -- PROGRAM ARGS...``. The
process limits itself, then ``exec``s the program, which inherits every restriction:

- a Landlock ruleset (the kernel's, as the harness sandbox uses: ``metaharness.evaluation.confine``) that
  handles every kind of write (creating, writing, truncating, renaming, removing files and folders, making
  devices, pipes and sockets) and allows them only beneath the ``--write`` folders (the proposal workspace, the
  agent's scratch folder and its own state folder) and on ``/dev/null``; reads, program execution and the network
  stay open, since an agent CLI must read its own installation and reach its provider's API;
- ``no_new_privs`` (set by Landlock) and no core dumps.

Without Landlock (Linux < 5.13, or disabled) it exits with code 3 and a one-line message instead of running the
agent unconfined. Its environment is the caller's business: ``.engines`` passes only what the CLI needs.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys

# The harness sandbox's Landlock primitives: the same syscalls and structures, another ruleset.
from metaharness.evaluation.confine import (
    _FS,
    _FS_ALL,
    _FS_BY_ABI,
    _READ,
    _enforce_ruleset,
    _RulesetAttr,
    landlock_abi,
)

UNAVAILABLE = 3


def write_access(abi: int) -> int:
    """The write-type access rights of Landlock ABI ``abi``: all it handles but reading, executing and device
    ioctls (terminals need those)."""
    return _FS_BY_ABI.get(abi, _FS_ALL) & ~_READ & ~_FS["ioctl_dev"]


def restrict_writes(writable: list[str]) -> None:
    """Allow this process (and what it executes) to write only beneath ``writable`` and on /dev/null."""
    abi = landlock_abi()
    handled = write_access(abi)
    _enforce_ruleset(abi, _RulesetAttr(handled, 0, 0), [(path, handled) for path in [*writable, "/dev/null"]])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m metaharness.proposers.agent_sandbox")
    parser.add_argument("--write", action="append", default=[], help="a folder the program may write beneath")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name the program to run after --")
    if not landlock_abi():
        print(
            "agent sandbox: this kernel has no Landlock (Linux >= 5.13 with landlock enabled), so the coding agent "
            "cannot be confined to its workspace; run on such a kernel.",
            file=sys.stderr,
        )
        sys.exit(UNAVAILABLE)
    for folder in args.write:
        os.makedirs(folder, exist_ok=True)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    restrict_writes([os.path.realpath(folder) for folder in args.write])
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"agent sandbox: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        sys.exit(127)


if __name__ == "__main__":
    main()
