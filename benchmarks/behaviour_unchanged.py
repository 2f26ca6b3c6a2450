"""Is a refactoring's behaviour unchanged? Two checks, each run at two commits and compared.

    python benchmarks/behaviour_unchanged.py runs BEFORE_RUN AFTER_RUN
    python benchmarks/behaviour_unchanged.py allocation > OUT.json

``runs``: two run directories of the same ``metaharness optimize`` command on one response cache. Every
summary.jsonl line must be identical once the timing fields (``time``, ``seconds``, ``created``, any ``*_seconds``,
at any depth) are dropped, the two run directories' absolute paths are replaced and the settings keys renamed in
round four read by their new names (``RENAMED_KEYS``: the keys ``Setting.old_keys`` still loads); every candidate
tag's ``harness.py`` byte-identical; the root tag's ``run.json`` the same but for its timing. Prints what differs and a
closing line (IDENTICAL or DIFFERENT); exit code 1 when anything differs.

``allocation``: the staged-evaluation solver on 300 seeded random problems, with the ``auto`` solver, ``auto`` with
a 50-node limit and ``exact`` (900 allocations): prints each one's targets, value, status, nodes, net value, bound
and whether it was cut short, as one JSON line; run it in each checkout and compare the outputs byte for byte. It
finds the solver where it is (``metaharness.search.staging``) or where it was (``metaharness.planner.allocation``,
before round four), so one script serves both commits.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

TIMING = {"time", "seconds", "created"}
RENAMED_KEYS = {"iteration_budget": "per_iteration", "run_budget": "per_run"}  # settings.json's, round four


def plain(value: object, paths: tuple[str, str]) -> object:
    """``value`` with timing fields dropped, the run directories' paths replaced by RUN and renamed keys by their
    new names."""
    if isinstance(value, dict):
        kept = {k: v for k, v in value.items() if k not in TIMING and not k.endswith("_seconds")}
        return {RENAMED_KEYS.get(k, k): plain(v, paths) for k, v in kept.items()}
    if isinstance(value, list):
        return [plain(v, paths) for v in value]
    if isinstance(value, str):
        for path in paths:
            value = value.replace(path, "RUN")
    return value


def _lines(run: Path, paths: tuple[str, str]) -> list[object]:
    text = (run / "summary.jsonl").read_text(encoding="utf-8")
    return [plain(json.loads(line), paths) for line in text.splitlines() if line.strip()]


def _git(run: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(run), *args], capture_output=True, text=True, check=True).stdout


def compare_runs(before: Path, after: Path) -> int:
    """Print how the two runs compare (module docstring); 0 when identical, else 1."""
    paths = (str(before.resolve()), str(after.resolve()))
    old, new = _lines(before, paths), _lines(after, paths)
    differing = [i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b]
    print(f"summary.jsonl: {len(old)} lines before, {len(new)} after; {len(differing)} differ")
    for i in differing:
        print(f"  line {i + 1}:")
        print(f"    before {json.dumps(old[i], sort_keys=True)[:600]}")
        print(f"    after  {json.dumps(new[i], sort_keys=True)[:600]}")
    tags_before, tags_after = _git(before, "tag").split(), _git(after, "tag").split()
    same_tags = tags_before == tags_after
    print(f"tags: {len(tags_before)} before, {len(tags_after)} after ({'the same' if same_tags else 'DIFFERENT'})")
    files = {t: _git(before, "ls-tree", "--name-only", t).split() for t in tags_before}
    programs = [t for t in tags_before if "harness.py" in files[t] and t in tags_after]
    unlike = [t for t in programs if _git(before, "show", f"{t}:harness.py") != _git(after, "show", f"{t}:harness.py")]
    print(
        f"harness.py byte-identical in {len(programs) - len(unlike)} of {len(programs)} candidate tags"
        + (f"; differs in {', '.join(unlike)}" if unlike else "")
    )
    if "root" in tags_before and "root" in tags_after:
        roots = [plain(json.loads(_git(run, "show", "root:run.json")), paths) for run in (before, after)]
        print(f"root run.json: {'the same' if roots[0] == roots[1] else 'DIFFERENT'} once timing fields are dropped")
        unlike += [] if roots[0] == roots[1] else ["root"]
    ok = not differing and len(old) == len(new) and same_tags and not unlike
    print("IDENTICAL" if ok else "DIFFERENT")
    return 0 if ok else 1


def allocations() -> list[list[object]]:
    """The solver's answers on the seeded problems (module docstring)."""
    from metaharness.budget import Budget, Spend

    try:
        from metaharness.search.staging.allocation import allocate
        from metaharness.search.staging.arms import Arm, stage_options
    except ImportError:  # before round four
        from metaharness.planner.allocation import Arm, allocate, stage_options  # type: ignore[no-redef]
    out: list[list[object]] = []
    for seed in range(300):
        rng = random.Random(seed)
        arms = []
        for i in range(rng.randint(1, 7)):
            examples = rng.choice([0, 0, 2, 5, 10])
            sd = rng.uniform(0.02, 0.2)
            variance = sd**2 if not examples else 1 / (1 / sd**2 + examples / 0.2)
            per = Spend(1, rng.choice([0, 100]), 0)
            paired = tuple(rng.choice([-1.0, 0.0, 1.0]) for _ in range(examples))
            options = stage_options(examples, 20, per)
            arms.append(
                Arm(
                    f"c{i}",
                    rng.uniform(-0.2, 0.2),
                    variance,
                    0.2,
                    examples,
                    20,
                    options,
                    0.0,
                    paired,
                    rng.random() < 0.5,
                )
            )
        budget = Budget(evals=rng.choice([5, 10, 20, 40, 80]), tokens=rng.choice([float("inf"), 2000.0]))
        for solver, limit in (("auto", None), ("auto", 50), ("exact", None)):
            r = allocate(arms, budget, solver=solver, node_limit=limit)
            bound = round(r.bound, 12) if r.bound is not None else None
            out.append(
                [
                    seed,
                    solver,
                    limit,
                    r.targets,
                    round(r.value, 12),
                    r.status,
                    r.nodes,
                    round(r.net, 12),
                    bound,
                    r.truncated,
                ]
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    runs = commands.add_parser("runs", help="compare two run directories of the same command")
    runs.add_argument("before", type=Path)
    runs.add_argument("after", type=Path)
    commands.add_parser("allocation", help="print the solver's answers on 300 seeded problems (JSON)")
    args = parser.parse_args(argv)
    if args.command == "runs":
        return compare_runs(args.before, args.after)
    print(json.dumps(allocations()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
