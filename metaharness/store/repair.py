"""``python -m metaharness.store.repair RUN --accept-spend-loss``: go on with a run whose spend journal lost a call.

A damaged ``spend.jsonl`` line whose cost cannot be read stops the run (the caps could not hold, see
``metaharness.store.spend``). Restoring the line from a backup is the safe repair; this command is the explicit
other one: it records each such line as a call that cost nothing, keeping its text, and says so line by line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from metaharness.errors import MetaharnessError
from metaharness.store.run_dir import RunDirectory

USAGE = "usage: python -m metaharness.store.repair RUN_DIR --accept-spend-loss"


def accept_spend_loss(path: Path) -> list[str]:
    """Accept the loss of every unreadable spend line of the run at ``path`` (under the run lock); one note each."""
    run = RunDirectory.open(path)
    try:
        return run.spend.accept_loss() or [f"{run.spend.path} has no damaged line whose cost is unknown"]
    finally:
        run.close()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] != "--accept-spend-loss":
        print(USAGE, file=sys.stderr)
        return 2
    try:
        notes = accept_spend_loss(Path(argv[0]))
    except MetaharnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print("\n".join(notes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
