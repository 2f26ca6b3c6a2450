"""What one sandbox costs, without a model: the time to start it (process, confinement, loading the harness) and
the time of one example whose harness makes one model call (answered at once by a stub).

Starts ``--sandboxes`` sandboxes one after another, runs ``--examples`` examples in each, and prints the median
start and example seconds as JSON (the first start, which also probes the machine, is reported apart).

    python benchmarks/sandbox_overhead.py [--sandboxes 10] [--examples 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from metaharness.evaluation.sandbox import Sandbox, SandboxLimits

HARNESS = """
class Harness:
    def __init__(self, lm, train):
        self.lm = lm

    def predict(self, x):
        return self.lm(x, max_tokens=8)
"""


def answer(request: dict) -> dict:
    return {"text": "ok"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxes", type=int, default=10)
    parser.add_argument("--examples", type=int, default=20)
    args = parser.parse_args()
    starts, examples = [], []
    for _ in range(args.sandboxes):
        started = time.perf_counter()
        sandbox = Sandbox(HARNESS, [], SandboxLimits(), context_window=4096, on_call=answer)
        starts.append(time.perf_counter() - started)
        for _ in range(args.examples):
            started = time.perf_counter()
            assert sandbox.predict("hello") == "ok"
            examples.append(time.perf_counter() - started)
        sandbox.close()
    print(
        json.dumps(
            {
                "first_start_seconds": round(starts[0], 3),
                "median_start_seconds": round(statistics.median(starts[1:] or starts), 3),
                "median_example_seconds": round(statistics.median(examples), 5),
                "sandboxes": args.sandboxes,
                "examples_per_sandbox": args.examples,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
