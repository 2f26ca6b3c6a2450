"""Compare two run directories of the same command: every summary.jsonl line once timing fields are dropped, and
every tag's harness.py.

    python reports/codebase-round-three/compare.py BEFORE_RUN AFTER_RUN

Dropped before comparing: the fields ``time``, ``seconds``, ``created`` and any ``*_seconds`` (at any depth), and
the two run directories' absolute paths inside strings. Prints what differs and a closing line; exit code 1 when
anything does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TIMING = {"time", "seconds", "created"}


def plain(value: object, paths: tuple[str, str]) -> object:
    if isinstance(value, dict):
        return {k: plain(v, paths) for k, v in value.items() if k not in TIMING and not k.endswith("_seconds")}
    if isinstance(value, list):
        return [plain(v, paths) for v in value]
    if isinstance(value, str):
        for path in paths:
            value = value.replace(path, "RUN")
        return value
    return value


def lines(run: Path, paths: tuple[str, str]) -> list[object]:
    text = (run / "summary.jsonl").read_text(encoding="utf-8")
    return [plain(json.loads(line), paths) for line in text.splitlines() if line.strip()]


def git(run: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(run), *args], capture_output=True, text=True, check=True).stdout


def main(before: Path, after: Path) -> int:
    paths = (str(before.resolve()), str(after.resolve()))
    old, new = lines(before, paths), lines(after, paths)
    differing = [i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b]
    print(f"summary.jsonl: {len(old)} lines before, {len(new)} after; {len(differing)} differ")
    for i in differing:
        print(f"  line {i + 1}:\n    before {json.dumps(old[i], sort_keys=True)[:600]}\n    after  {json.dumps(new[i], sort_keys=True)[:600]}")
    tags_before, tags_after = git(before, "tag").split(), git(after, "tag").split()
    print(f"tags: {len(tags_before)} before, {len(tags_after)} after ({'the same' if tags_before == tags_after else 'DIFFERENT'})")
    files = {t: git(before, "ls-tree", "--name-only", t).split() for t in tags_before}
    programs = [t for t in tags_before if "harness.py" in files[t] and t in tags_after]
    unlike = [t for t in programs if git(before, "show", f"{t}:harness.py") != git(after, "show", f"{t}:harness.py")]
    print(f"harness.py byte-identical in {len(programs) - len(unlike)} of {len(programs)} candidate tags"
          + (f"; differs in {', '.join(unlike)}" if unlike else ""))
    if "root" in tags_before and "root" in tags_after:  # the run's first settings (run.json), timing dropped
        roots = [plain(json.loads(git(run, "show", "root:run.json")), paths) for run in (before, after)]
        print(f"root run.json: {'the same' if roots[0] == roots[1] else 'DIFFERENT'} once timing fields are dropped")
        unlike += [] if roots[0] == roots[1] else ["root"]
    ok = not differing and len(old) == len(new) and tags_before == tags_after and not unlike
    print("IDENTICAL" if ok else "DIFFERENT")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
