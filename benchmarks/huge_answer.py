"""What a harness that answers with a huge string costs the evaluating process: CPU time, memory of the trace.

Evaluates, on one example of a task held in memory, a harness whose ``predict`` returns ``--megabytes`` MB of
text (default 100), with a scripted task model (no model server). Prints one JSON object: the parent's CPU seconds
for the evaluation (``getrusage(RUSAGE_SELF)``: the sandbox processes are not counted), its wall seconds, the size
of ``records.jsonl``, the length of the prediction kept, and whether it ends with the cut marker.

    python benchmarks/huge_answer.py [--megabytes 100] [--variant answer|pipe]

``--variant pipe`` has the harness write the huge reply line to the worker's protocol pipe itself, around the
worker's own cut (the parent must then stop reading at its cap and kill the sandbox).
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from metaharness.evaluation import evaluate
from metaharness.models.protocol import ChatRequest, ChatResult, Choice, Usage
from metaharness.tasks import Example

HARNESSES = {
    "answer": 'return "x" * {size}',
    "pipe": (
        "pipe = self.lm._call_model.__self__._writer\n"
        '        pipe.write(b\'{{"type": "result", "prediction": "\' + b\'x\' * {size} + b\'"}}\\n\')\n'
        "        pipe.flush()\n"
        '        return "unreachable"'
    ),
}


class OneExample:
    """A task with one training and one validation example, scored by exact match."""

    name = "one-example"
    description = ""

    def load(self, split: str) -> list[Example]:
        return [Example(f"{split}-0000", "Say something.", "something")]

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        return {"primary": float(prediction == example.target)}

    def metric_names(self) -> list[str]:
        return ["primary"]


class Silent:
    """A task model nobody calls (the harness never asks it)."""

    spec = "none:benchmark"

    def complete(self, request: ChatRequest, *, role: str = "task") -> ChatResult:
        return ChatResult([Choice("")], Usage(0, 0), 0.0, self.spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--variant", choices=sorted(HARNESSES), default="answer")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="metaharness-huge-answer-"))
    harness = folder / "harness.py"
    body = HARNESSES[args.variant].format(size=args.megabytes * 1_000_000)
    header = "class Harness:\n    def __init__(self, lm, train):\n        self.lm = lm\n\n    def predict(self, x):\n"
    harness.write_text(f"{header}        {body}\n")
    trace = folder / "records.jsonl"
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    report = evaluate(harness, OneExample(), "val", model=Silent(), workers=1, trace_path=trace)  # type: ignore[arg-type]
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    record = report.records[0]
    print(
        json.dumps(
            {
                "variant": args.variant,
                "answer_megabytes": args.megabytes,
                "parent_cpu_seconds": round(after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, 2),
                "wall_seconds": round(wall, 2),
                "records_jsonl_bytes": trace.stat().st_size,
                "prediction_chars": len(record.prediction or ""),
                "cut_marker": (record.prediction or "").rstrip().endswith("kept]"),
                "error": (record.error or "")[:200] or None,
            },
            indent=2,
        )
    )
    trace.unlink()
    harness.unlink()
    folder.rmdir()


if __name__ == "__main__":
    main()
