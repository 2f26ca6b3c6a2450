"""What the model-free check finds in a finished run's candidates as they were and with one piece of code replaced.

A seed's code lives on in every revision of it, so a change to a seed (how it writes its answer, say) changes
which of its descendants' outputs depend on the model's answers. This runs the check (stand-in model, no model
call) on each candidate of the run whose harness holds the text of ``--old``, as committed and with that text
replaced by the text of ``--new``, on the first ``--examples`` validation examples, and prints as JSON how many
are model-free and how many examples are free in each version.

    python benchmarks/patched_checks.py DATASET RUN_DIR --old OLD.txt --new NEW.txt [--data-dir DATA]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from model_free_loads import candidates

from metaharness.evaluation.task_evaluator import TaskEvaluator
from metaharness.search.model_free import ModelFreeCheck
from metaharness.tasks.registry import open_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--new", type=Path, required=True)
    parser.add_argument("--data-dir")
    parser.add_argument("--examples", type=int, default=30)
    args = parser.parse_args()
    old, new = args.old.read_text(encoding="utf-8"), args.new.read_text(encoding="utf-8")
    task = open_task(args.dataset, data_dir=args.data_dir)
    ids = [e.id for e in task.load("val")[: args.examples]]
    totals = {"as committed": [0, 0], "replaced": [0, 0]}
    per_candidate = {}
    with tempfile.TemporaryDirectory() as scratch:
        check = ModelFreeCheck(task, lambda view, client: TaskEvaluator(view, client, workers=1), Path(scratch))
        for name, source in candidates(args.run_dir):
            if old not in source:
                continue
            found = {"as committed": check(source, ids), "replaced": check(source.replace(old, new), ids)}
            per_candidate[name] = {version: len(f.free) for version, f in found.items()}
            for version, f in found.items():
                totals[version][0] += f.model_free
                totals[version][1] += len(f.free)
    print(
        json.dumps(
            {
                "dataset": args.dataset,
                "candidates": len(per_candidate),
                "examples": len(ids),
                "model_free": {version: t[0] for version, t in totals.items()},
                "free_examples": {version: t[1] for version, t in totals.items()},
                "free_examples_per_candidate": per_candidate,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
