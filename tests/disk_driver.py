"""A run on a small disk: tests/loop_driver.py's run on a tmpfs filled to a chosen level, stopped, then resumed.

As a script it runs the loop driver's run ending as the command line ends a run: a user-facing failure
(``MetaharnessError``) is one ``error: ...`` line on stderr and its exit code, never a traceback.

    python tests/disk_driver.py RUN_DIR CALLS_LOG [MIN_FREE_BYTES]

``CALLS_LOG``: where the models log each call they answer (kept off the small disk, so that what was really spent
can be compared with what the run journaled); ``MIN_FREE_BYTES`` replaces the free space a run keeps
(``metaharness.store.run_dir.MIN_FREE_BYTES``; 0 lets every write meet the full disk itself).

``stop_and_resume`` (for tests/test_hostile_runs.py and benchmarks/low_disk.py) mounts a tmpfs (root only), fills it
to leave a given number of bytes, runs there, frees the space, resumes, and reports what each session did.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import loop_driver

from metaharness.errors import MetaharnessError, StorageFailure
from metaharness.store import RunDirectory, run_dir
from metaharness.store.files import free_bytes

TESTS = Path(__file__).resolve().parent
DISK_MB = 30

CALLS: list[Path] = []


class OffDiskModel(loop_driver.CountedModel):
    """The loop driver's model, logging its calls in ``CALLS`` rather than beside the run directory."""

    def __init__(self, log: Path) -> None:
        super().__init__(CALLS[0])


def main(argv: list[str]) -> int:
    CALLS.append(Path(argv[1]))
    if len(argv) > 2:
        run_dir.MIN_FREE_BYTES = int(argv[2])
    loop_driver.CountedModel = OffDiskModel  # type: ignore[misc]  # main() builds its models from this name
    try:
        loop_driver.main([argv[0]])
    except MetaharnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


@contextlib.contextmanager
def small_disk(folder: Path, size_mb: int = DISK_MB) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` MiB mounted at ``folder`` for the block (needs root)."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(disk: Path, left: int) -> Path:
    """Take the space of ``disk`` but ``left`` bytes with a file of its own (removed to free the space)."""
    filler = disk / "filler"
    size = free_bytes(disk) - left
    if size > 0:
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)
    return filler


def session(run: Path, calls: Path, min_free: int | None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    env.pop("METAHARNESS_CRASH_AT", None)
    args = [sys.executable, str(TESTS / "disk_driver.py"), str(run), str(calls)]
    args += [] if min_free is None else [str(min_free)]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, check=False)


class Scored(NamedTuple):
    """A committed candidate: its commit, and the score of each example its evaluation holds."""

    commit: str
    scores: dict[str, float]


Evaluations = dict[str, Scored]


def evaluations(run: Path) -> Evaluations:
    """Every committed candidate's commit and what its evaluation scored, example by example."""
    found = {}
    for stored in RunDirectory.browse(run).store.candidates():
        evaluation = stored.candidate.evaluation
        pairs = zip(evaluation.example_ids, evaluation.example_scores, strict=True) if evaluation else ()
        found[stored.candidate.id] = Scored(stored.commit, dict(pairs))
    return found


@dataclass
class DiskRun:
    """What ``stop_and_resume`` saw: each session's exit code and stderr, ``git fsck``'s exit code and output, the
    candidates the first session left (``kept``) and the last (``final``), and the calls the models answered
    against the calls ``spend.jsonl`` holds."""

    left: int
    first: tuple[int, str]
    second: tuple[int, str]
    fsck: tuple[int, str]
    kept: Evaluations
    final: Evaluations
    answered: int
    journaled: int

    def scores(self) -> dict[str, dict[str, float]]:
        """``final`` without the commits (which differ from run to run by their times)."""
        return {cid: entry.scores for cid, entry in self.final.items()}

    def problems(self, reference: dict[str, dict[str, float]]) -> list[str]:
        """What went wrong, if anything: the first session neither finished nor stopped with one line (exit 6), the
        second did not finish, git is not sound, what the first committed changed, the run did not score what an
        undisturbed one (``reference``) does, or a call answered is missing from ``spend.jsonl``."""
        code, stderr = self.first
        found = []
        if code not in (0, StorageFailure.exit_code) or (code and not one_line(stderr)):
            found.append(f"the first session ended with exit {code}: {stderr[-500:]}")
        if self.second != (0, ""):
            found.append(f"the resumed session ended with exit {self.second[0]}: {self.second[1][-500:]}")
        if self.fsck[0] or any(word in self.fsck[1] for word in ("error", "missing", "broken", "corrupt")):
            found.append(f"git fsck: {self.fsck}")
        found += [f"{cid} lost a scored example or its commit on resume" for cid in self.kept if not self._kept(cid)]
        if self.scores() != reference:
            found.append("the resumed run scored other examples than an undisturbed run")
        if self.answered != self.journaled:
            found.append(f"{self.answered} calls answered, {self.journaled} in spend.jsonl")
        return found

    def _kept(self, cid: str) -> bool:
        """Whether candidate ``cid`` has the commit and every scored example the first session left it (a resumed
        run may score more of its examples)."""
        before, after = self.kept[cid], self.final.get(cid)
        return after is not None and after.commit == before.commit and before.scores.items() <= after.scores.items()


def one_line(stderr: str) -> bool:
    return len(stderr.splitlines()) == 1 and stderr.startswith("error: ")


def stop_and_resume(base: Path, left: int, min_free: int | None = None) -> DiskRun:
    """On a fresh tmpfs at ``base``/disk with ``left`` bytes free: run, free the space, resume."""
    calls = base / "calls.log"
    calls.unlink(missing_ok=True)
    with small_disk(base / "disk") as disk:
        run = disk / "run"
        filler = fill(disk, left)
        first = session(run, calls, min_free)
        kept = evaluations(run) if RunDirectory.exists(run) and RunDirectory.started(run) else {}
        filler.unlink(missing_ok=True)
        second = session(run, calls, min_free)
        fsck = subprocess.run(["git", "-C", str(run), "fsck", "--full"], capture_output=True, text=True, check=False)
        return DiskRun(
            left,
            (first.returncode, first.stderr.strip()),
            (second.returncode, second.stderr.strip()),
            (fsck.returncode, (fsck.stdout + fsck.stderr).strip()),
            kept,
            evaluations(run),
            len(calls.read_text().splitlines()) if calls.exists() else 0,
            int(RunDirectory.browse(run).spent()["calls"]),
        )
