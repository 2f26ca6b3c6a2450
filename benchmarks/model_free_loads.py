"""What the model-free check of a candidate costs with a sandbox's example cap at one value and at another.

A sandbox answers up to ``MAX_EXAMPLES_PER_WORKER`` predictions, then its pool retires it and the next prediction
loads the harness again in a new one. The model-free check asks every example ``SALTS`` times, so a check of n
examples loads a harness ceil(SALTS * n / cap) times; a harness that trains a classifier in ``__init__`` pays for
that each time. This runs the check of each candidate of a finished run (its committed harness, on the first
``--examples`` validation examples, over the stand-in model: no model call) once per cap, the caps interleaved
candidate by candidate so that both see the same machine, and prints the seconds per cap and their ratio as JSON.

    python benchmarks/model_free_loads.py DATASET RUN_DIR [--data-dir DATA] [--examples 30] [--caps 64,256]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import metaharness.evaluation.evaluator as evaluator
from metaharness.evaluation.task_evaluator import TaskEvaluator
from metaharness.search.model_free import ModelFreeCheck
from metaharness.tasks.registry import open_task


def candidates(run_dir: Path) -> list[tuple[str, str]]:
    """(id, harness source) of every candidate tag of the run, in id order."""
    tags = subprocess.run(["git", "tag", "--list", "c*"], cwd=run_dir, capture_output=True, text=True, check=True)
    out = []
    for tag in sorted(tags.stdout.split()):
        shown = subprocess.run(["git", "show", f"{tag}:harness.py"], cwd=run_dir, capture_output=True, text=True)
        if shown.returncode == 0:
            out.append((tag, shown.stdout))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--data-dir")
    parser.add_argument("--examples", type=int, default=30)
    parser.add_argument("--caps", default="64,256")
    args = parser.parse_args()
    task = open_task(args.dataset, data_dir=args.data_dir)
    ids = [e.id for e in task.load("val")[: args.examples]]
    caps = [int(c) for c in args.caps.split(",")]
    seconds = {cap: 0.0 for cap in caps}
    free = 0
    programs = candidates(args.run_dir)
    with tempfile.TemporaryDirectory() as scratch:
        for number, (name, source) in enumerate(programs):
            for cap in caps if number % 2 == 0 else caps[::-1]:
                evaluator.MAX_EXAMPLES_PER_WORKER = cap  # the pool's cap (the worker's CPU limit is set apart)
                check = ModelFreeCheck(
                    task,
                    lambda view, client: TaskEvaluator(view, client, workers=1),
                    Path(scratch) / f"{name}-{cap}",
                )
                started = time.perf_counter()
                found = check(source, ids)
                seconds[cap] += time.perf_counter() - started
                free += found.model_free and cap == caps[0]
    print(
        json.dumps(
            {
                "dataset": args.dataset,
                "candidates": len(programs),
                "model_free": free,
                "examples": len(ids),
                "seconds": {str(cap): round(s, 1) for cap, s in seconds.items()},
                "ratio": round(seconds[caps[-1]] / seconds[caps[0]], 3),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
