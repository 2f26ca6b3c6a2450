"""A run whose run directory sits on a 30 MiB tmpfs, at every fill level: it stops cleanly and resumes with nothing
lost.

For each level (the free space the run starts with), on a fresh tmpfs filled to leave that much
(tests/disk_driver.py, ``stop_and_resume``): the loop driver's run (tests/loop_driver.py: 2 seeds, 2 iterations,
the test split, 38 priced model calls) runs until it finishes or stops; the filler is removed; the run is resumed.
Each level is checked as tests/test_hostile_runs.py checks its few: the first session finished or stopped with one
``error:`` line and exit code 6 (never a traceback), the second finished, ``git fsck --full`` is clean, what the
first session committed is unchanged, the candidates scored the examples an undisturbed run scores, and every call
the models answered is in ``spend.jsonl``. Two sweeps: with the 1 MiB a run keeps free (``MIN_FREE_BYTES``), and
with none (every write meets the full disk itself). Needs root (mount).

    python benchmarks/low_disk.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
# Free space at the start, KiB: the run writes about 1.2 MiB, so the levels are dense where it stops part-way
# (every 16 KiB without the floor: each level stops it at another write, git's and the journal's included).
KEEPING_1_MIB = [0, 256, 512, 900, 1000, 1100, 1200, 1300, 1400, 1500, 1600, 1700, 1800, 1900, 2000, 2200, 2600, 4000]
KEEPING_NONE = [0, 64, 128, *range(192, 1104, 16), 1200, 1400, 2000]


def main() -> int:
    sys.path.insert(0, str(TESTS))
    from disk_driver import DISK_MB, stop_and_resume

    base = Path(tempfile.mkdtemp(prefix="metaharness-low-disk-"))
    reference = stop_and_resume(base, 1 << 40).scores()
    print(f"a {DISK_MB} MiB tmpfs; the run undisturbed: {len(reference)} candidates")
    print(f"{'floor':>6} {'free KiB':>8}  first session{'':63} resumed  fsck  kept/final  answered/journaled  ok")
    levels = [(kib, None) for kib in KEEPING_1_MIB] + [(kib, 0) for kib in KEEPING_NONE]
    clean, started = 0, time.monotonic()
    for kib, floor in levels:
        result = stop_and_resume(base, kib << 10, floor)
        code, stderr = result.first
        where = stderr.removeprefix("error: ").replace(f"{base / 'disk'}/", "")  # the file, not the temporary path
        said = "finished" if code == 0 else f"exit {code}: " + where[:64]
        problems = result.problems(reference)
        clean += not problems
        print(
            f"{'1 MiB' if floor is None else floor:>6} {kib:>8}  {said:76} exit {result.second[0]:<3} "
            f"{'ok' if result.fsck[0] == 0 else 'BAD':4}  {len(result.kept)}/{len(result.final):<8} "
            f"{result.answered}/{result.journaled:<17} {'yes' if not problems else 'NO: ' + '; '.join(problems)}"
        )
    seconds = time.monotonic() - started
    print(json.dumps({"levels": len(levels), "clean": clean, "seconds": round(seconds, 1)}))
    return 0 if clean == len(levels) else 1


if __name__ == "__main__":
    sys.exit(main())
