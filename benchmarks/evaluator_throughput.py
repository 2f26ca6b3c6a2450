"""Evaluator throughput vs. a bare concurrent loop of the same model calls, on one local OpenAI-compatible server.

Starts ``python -m llama_cpp.server`` with the embedded GGUF (``metaharness.models.llama_server``), then alternates:

- evaluator: ``evaluate(harness, symptom2disease/val)`` with the response cache off: sandbox processes, the proxy,
  tracing and scoring included. The default harness makes one short call per example (the question, 8 answer
  tokens), which exposes the evaluator's per-example overhead the most; ``--seed retrieval`` uses a seed instead;
- bare loop: the very requests the evaluator's harness sent (read back from the records of an untimed warm-up
  run), issued straight to the same client from a thread pool of the same width.

The two sides alternate (bare first in odd rounds, evaluator first in even rounds).

Prints examples/s of both per round and the ratio of the medians (target: evaluator >= 90% of the bare loop).

    python benchmarks/evaluator_throughput.py [--examples 24] [--workers 4] [--rounds 2] [--seed retrieval]

Every request is a cache miss (``cache=False``), so both sides do the same model work.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from metaharness.candidates import seed_path
from metaharness.evaluation import evaluate
from metaharness.models import ChatRequest, connect
from metaharness.models.llama_server import LlamaServer
from metaharness.models.local import DEFAULT_LOCAL_MODEL, gguf_path
from metaharness.tasks import get_task

SHORT_CALL_HARNESS = """
class Harness:
    def __init__(self, lm, train):
        self.lm = lm

    def predict(self, x):
        return self.lm("Diagnose in two words: " + x, max_tokens=8)
"""


def bare_loop(client, requests: list[ChatRequest], workers: int) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda request: client.complete(request), requests))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=24)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", default=None, help="evaluate this seed harness instead of the short-call harness")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the server below is stopped on kill too
    server = LlamaServer(gguf_path(DEFAULT_LOCAL_MODEL))
    try:
        server.wait_ready()
        client = connect(f"openai:{DEFAULT_LOCAL_MODEL}@{server.base_url}", cache=False)
        if args.seed:
            harness = seed_path("symptom2disease", args.seed)
        else:
            harness = Path(tempfile.mkdtemp(prefix="metaharness-bench-")) / "short_call.py"
            harness.write_text(SHORT_CALL_HARNESS)
        task = get_task("symptom2disease", data_dir=args.data_dir)
        task.load("train"), task.load("val")  # parse the files once, outside the timed runs

        def run_evaluator():
            return evaluate(harness, task, "val", model=client, limit=args.examples, workers=args.workers)

        warmup = run_evaluator()  # the requests the bare loop replays
        requests = [
            ChatRequest(
                messages=call["messages"], max_tokens=call["options"]["max_tokens"] or 512, stop=call["options"]["stop"]
            )
            for record in warmup.records
            for call in record.calls
        ]
        evaluator_rates, bare_rates = [], []
        for round_ in range(1, args.rounds + 1):
            order = ("bare", "evaluator") if round_ % 2 else ("evaluator", "bare")
            for side in order:
                if side == "bare":
                    bare_rates.append(len(warmup.records) / bare_loop(client, requests, args.workers))
                else:
                    report = run_evaluator()
                    evaluator_rates.append(len(report.records) / report.seconds)
            print(
                f"round {round_}: evaluator {evaluator_rates[-1]:.3f} ex/s ({report.errors} errors), "
                f"bare loop {bare_rates[-1]:.3f} ex/s",
                flush=True,
            )
        ratio = statistics.median(evaluator_rates) / statistics.median(bare_rates)
        print(
            json.dumps(
                {
                    "harness": str(harness),
                    "examples": args.examples,
                    "workers": args.workers,
                    "server": server.base_url,
                    "evaluator_examples_per_s": [round(r, 3) for r in evaluator_rates],
                    "bare_examples_per_s": [round(r, 3) for r in bare_rates],
                    "ratio_of_medians": round(ratio, 3),
                    "target": 0.9,
                    "met": ratio >= 0.9,
                },
                indent=2,
            )
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
