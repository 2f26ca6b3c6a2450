"""The dry-run estimate of a search against the search itself: calls, tokens and minutes, estimated and measured.

Runs ``metaharness optimize ARGS --dry-run``, then ``metaharness optimize ARGS`` in a fresh folder with a fresh
response cache, and prints both side by side: the estimate's "whole run" row (an upper bound: every iteration's
whole budget) against what the run spent (``spend.jsonl``: charged model calls and tokens; example-evaluations
charged, from the run's Spent box) and its wall time. Both commands run with this interpreter
(``python -m metaharness``), so point ``PYTHONPATH`` at a clean checkout to measure a commit. Nothing is timed
against anything else running on the machine: the load average at the start and end is printed beside the times.

    python benchmarks/estimate_vs_run.py [--out DIR] -- --dataset symptom2disease --iters 2 --val-limit 10 \\
        --data-dir DATA
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Step:
    """One command run: its argv, its output, its exit code and its wall seconds."""

    argv: list[str]
    stdout: str
    stderr: str
    code: int
    seconds: float


def metaharness(*args: str, cwd: Path, env: dict[str, str], timeout: float = 6 * 3600) -> Step:
    """``python -m metaharness ARGS`` in ``cwd``; its output and how long it took."""
    argv = [sys.executable, "-m", "metaharness", *args]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return Step(["metaharness", *args], done.stdout, done.stderr, done.returncode, time.monotonic() - started)


def estimated(dry_run: str) -> dict[str, float]:
    """The "whole run" row of a dry run's table: examples, calls, tokens in and out, minutes."""
    row = next(line for line in dry_run.splitlines() if line.strip().startswith("whole run"))
    cells = row.split()[2:]  # "whole run" is two words
    numbers = [float(c.replace(",", "").replace("$", "")) if re.match(r"^\$?[\d,.]+$", c) else None for c in cells]
    keys = ["examples", "calls", "tokens_in", "tokens_out", "usd", "minutes"]
    return {k: v for k, v in zip(keys, numbers, strict=False) if v is not None}


def measured(run_dir: Path, seconds: float) -> dict[str, float]:
    """What the run spent: charged calls and tokens (``spend.jsonl``), charged example-evaluations (the Spent box's
    rows), its minutes."""
    calls = tokens = 0
    for line in (run_dir / "spend.jsonl").read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        calls += 0 if entry.get("carried") else 1
        tokens += int(entry.get("tokens", 0))
    from metaharness.report import RunView
    from metaharness.store import RunDirectory

    rows, _ = RunView.load(RunDirectory.browse(run_dir)).spend_story()
    examples = sum(float(r[1]) for r in rows if r[1] and r[1] != "not recorded" and "free" not in r[0])
    return {"examples": examples, "calls": calls, "tokens": tokens, "minutes": seconds / 60}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def compare(args: list[str], work: Path, env: dict[str, str]) -> tuple[Step, Step, dict[str, float], dict[str, float]]:
    """Dry run, then the run, in ``work``; (dry run, run, estimate, measurement)."""
    dry = metaharness("optimize", *args, "--dry-run", cwd=work, env=env)
    if dry.code != 0:
        raise SystemExit(f"the dry run failed:\n{dry.stdout[-2000:]}\n{dry.stderr[-2000:]}")
    run = metaharness("optimize", *args, cwd=work, env=env)
    if run.code != 0:
        raise SystemExit(f"the run failed:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    run_dir = next(p for p in (work / "runs").iterdir() if (p / "spend.jsonl").exists())
    return dry, run, estimated(dry.stdout), measured(run_dir, run.seconds)


def table(estimate: dict[str, float], real: dict[str, float]) -> str:
    """Estimate and measurement side by side (tokens: in and out together)."""
    tokens = estimate.get("tokens_in", 0) + estimate.get("tokens_out", 0)
    rows = [
        ("example-evaluations charged", estimate.get("examples"), real["examples"]),
        ("model calls charged", estimate.get("calls"), real["calls"]),
        ("tokens charged (in + out)", tokens, real["tokens"]),
        ("minutes (wall)", estimate.get("minutes"), real["minutes"]),
    ]
    lines = ["| | estimated (at most) | measured | measured / estimated |", "| --- | --- | --- | --- |"]
    for name, est, got in rows:
        form = "{:,.1f}" if name.startswith("minutes") else "{:,.0f}"
        shown = "not estimated" if est is None else form.format(est)
        lines.append(f"| {name} | {shown} | {form.format(got)} | {f'{got / est:.2f}' if est else ''} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="Folder for estimate.txt, run.txt and comparison.md.")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- then the optimize arguments")
    given = parser.parse_args()
    args = given.args[1:] if given.args[:1] == ["--"] else given.args
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        env = {**os.environ, "METAHARNESS_CACHE_DIR": str(work / "cache"), "COLUMNS": "160"}
        before = load()
        dry, run, estimate, real = compare(args, work, env)
        text = (
            f"metaharness optimize {' '.join(args)}  (load average {before} at the start, {load()} at the end)\n\n"
            f"dry run: {dry.seconds:.0f} s; run: {run.seconds / 60:.1f} min\n\n{table(estimate, real)}\n"
        )
        print(text)
        if given.out is not None:
            given.out.mkdir(parents=True, exist_ok=True)
            (given.out / "estimate.txt").write_text(f"$ {' '.join(dry.argv)}\n{dry.stdout}", encoding="utf-8")
            (given.out / "run.txt").write_text(f"$ {' '.join(run.argv)}\n{run.stdout}", encoding="utf-8")
            (given.out / "comparison.md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
