"""The embedded model's weights as shipped (Q4_1) against the Q8_0 copy it runs as: time, answers and scores.

For each task and seed harness, the seed is evaluated on the first ``--examples`` validation examples twice,
through the project's evaluator (sandboxed harness, no response cache):

1. with a client that sends every request to both files, one after the other (which goes first alternates from
   call to call, so a change of load on the machine falls on both), times each, keeps both answers, and gives
   the harness the Q4_1 answer;
2. with a client that gives the harness the Q8_0 answer kept for the same request (a request not seen in pass 1,
   which a harness that reacts to its answers may send, is computed on Q8_0 and not timed).

Both files run through ``LocalBackend`` with prefix reuse, as in a run. Printed per task and seed, and in all:
calls, prompt tokens sent, seconds on each file and their ratio (Q4_1 / Q8_0), answers that are the same text,
and the mean primary score of the harness with each file's answers.

    python benchmarks/embedded_format.py [--examples 10] [--tasks symptom2disease lawbench uspto]
        [--seeds few_shot retrieval zero_shot] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, dataclass, field

from metaharness.candidates import seed_path
from metaharness.evaluation import evaluate
from metaharness.models import ChatRequest, ChatResult
from metaharness.models.local import DEFAULT_LOCAL_MODEL, RUN_FORMAT, LocalBackend, gguf_path, run_path
from metaharness.models.protocol import Role
from metaharness.models.spec import parse_spec
from metaharness.tasks import open_task


@dataclass
class Tally:
    """What one seed's requests cost on each file and how their answers compare."""

    calls: int = 0
    prompt_tokens: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: {"Q4_1": 0.0, RUN_FORMAT: 0.0})
    same: int = 0
    scores: dict[str, float] = field(default_factory=dict)

    def add(self, other: Tally) -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.same += other.same
        for name, value in other.seconds.items():
            self.seconds[name] += value


def _key(request: ChatRequest) -> str:
    return repr(asdict(request))


class PairedClient:
    """Pass 1: every request on both files (order alternating), the Q4_1 answer to the harness."""

    def __init__(self, backends: dict[str, LocalBackend], tally: Tally, kept: dict[str, ChatResult]) -> None:
        self.spec = f"local:{DEFAULT_LOCAL_MODEL}"
        self.context_window = next(iter(backends.values())).n_ctx
        self.backends, self.tally, self.kept = backends, tally, kept

    def complete(self, request: ChatRequest, *, role: Role = "task") -> ChatResult:
        names = list(self.backends)
        if self.tally.calls % 2:
            names.reverse()
        results = {}
        for name in names:
            started = time.perf_counter()
            results[name] = self.backends[name].complete(request)
            self.tally.seconds[name] += time.perf_counter() - started
        self.tally.calls += 1
        self.tally.prompt_tokens += results["Q4_1"].usage.input_tokens
        self.tally.same += results["Q4_1"].text == results[RUN_FORMAT].text
        self.kept[_key(request)] = results[RUN_FORMAT]
        return results["Q4_1"]


class KeptClient:
    """Pass 2: the Q8_0 answer kept in pass 1 (computed, untimed, for a request pass 1 did not send)."""

    def __init__(self, backend: LocalBackend, kept: dict[str, ChatResult]) -> None:
        self.spec = f"local:{DEFAULT_LOCAL_MODEL}"
        self.context_window = backend.n_ctx
        self.backend, self.kept = backend, kept

    def complete(self, request: ChatRequest, *, role: Role = "task") -> ChatResult:
        return self.kept.get(_key(request)) or self.backend.complete(request)


def measure(task_name: str, seed: str, examples: int, backends: dict[str, LocalBackend], data_dir: str | None) -> Tally:
    task = open_task(task_name, data_dir=data_dir)
    harness = seed_path(task.name, seed)
    tally, kept = Tally(), {}
    first = evaluate(harness, task, "val", model=PairedClient(backends, tally, kept), limit=examples, workers=1)
    second = evaluate(harness, task, "val", model=KeptClient(backends[RUN_FORMAT], kept), limit=examples, workers=1)
    tally.scores = {"Q4_1": first.scores["primary"], RUN_FORMAT: second.scores["primary"]}
    return tally


def line(name: str, tally: Tally) -> str:
    q4, q8 = tally.seconds["Q4_1"], tally.seconds[RUN_FORMAT]
    scores = "  ".join(f"{k} {v:.3f}" for k, v in tally.scores.items())
    return (
        f"{name:<28} {tally.calls:>5} {tally.prompt_tokens:>8} {q4:>8.1f} {q8:>8.1f} {q4 / max(q8, 1e-9):>6.2f} "
        f"{tally.same:>4}/{tally.calls:<4} {scores}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=10)
    parser.add_argument("--tasks", nargs="+", default=["symptom2disease", "lawbench", "uspto"])
    parser.add_argument("--seeds", nargs="+", default=["few_shot", "retrieval", "zero_shot"])
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    shipped, runs = gguf_path(DEFAULT_LOCAL_MODEL), run_path(DEFAULT_LOCAL_MODEL)
    backends = {
        name: LocalBackend(parse_spec(f"local:{path}")) for name, path in (("Q4_1", shipped), (RUN_FORMAT, runs))
    }
    for name, path in (("shipped", shipped), ("runs as", runs)):
        print(f"{name} {path.name} ({path.stat().st_size:,} bytes)")
    header = ("task/seed", "calls", "prompt", "Q4_1 s", f"{RUN_FORMAT} s", "ratio", "same")
    print("{:<28} {:>5} {:>8} {:>8} {:>8} {:>6} {:>9} scores".format(*header))
    total = Tally()
    for task_name in args.tasks:
        for seed in args.seeds:
            tally = measure(task_name, seed, args.examples, backends, args.data_dir)
            total.add(tally)
            print(line(f"{task_name}/{seed}", tally), flush=True)
    print(line("all", total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
