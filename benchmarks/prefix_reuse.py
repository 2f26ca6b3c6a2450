"""Prompt tokens the embedded model computes against the prompt tokens sent, before and after prefix reuse.

Two workloads, each recorded once and then replayed through three backends:

- seeds: each task's three seed harnesses evaluated on its first ``--examples`` val examples as a search's
  iteration 0 does (one seed after another, ``--workers`` examples in flight, no response cache), for
  symptom2disease, uspto and lawbench;
- run: a short search, ``optimize --dataset symptom2disease --iters RUN_ITERS --val-limit RUN_VAL_LIMIT`` on the
  embedded defaults (the offline proposer, whose probes share the model) with no response cache.

Recording runs the workload in a process of its own with the embedded model as it now is (prefix reuse on), and
writes every request the backend receives in the order it ran them: the calls of concurrent examples and probes
interleave as in a real run. (The run workload's ``optimize`` builds its client with ``connect``; the recording
process swaps the ``LocalBackend`` that ``connect`` uses for a recording subclass.) Each replay runs the recorded
requests one after another, in that order, in a fresh process:

- before: the embedded backend as it was before prefix reuse: one ``llama_cpp.Llama`` with llama-cpp-python's
  defaults (batches of 512 tokens), which reuses only the prefix a prompt shares with the previous call;
- after: ``LocalBackend``, prefix reuse on (``metaharness.models.prefix_states``);
- fresh: ``LocalBackend(reuse_prefixes=False)``: every prompt evaluated from its first token, the answers'
  reference.

Before them, the ``batches`` table: one prompt of 3,008 tokens (LawBench training facts, the size of a LawBench seed
prompt) evaluated in batches of 64 and of 512 tokens with one thread and with one thread per CPU (3 rounds, the
medians), the wall and CPU seconds of each, and whether its last logits are the same bits as the 512-token,
all-CPU evaluation's (llama-cpp-python's defaults).

After them, ``least possible``: the prompt tokens no exact prefix cache could spare (``least_computed``: a
cache of unlimited size and no chunk grid, so each call computes only what follows the longest prefix it shares
with any earlier prompt), the floor under any backend's ratio for that workload.

For each replay it prints the calls, the prompt tokens sent (``Usage.input_tokens``), the prompt tokens computed (sent
minus those reused: ``Usage.cached_tokens`` after; before, the prefix shared with the previous call's tokens, as
llama-cpp-python's ``generate`` reuses it), their ratio, the wall time, and how many answers equal fresh's.

    python benchmarks/prefix_reuse.py [--examples 5] [--workers 8] [--run-iters 1] [--run-val-limit 10]
        [--data-dir DIR] [--tasks ...] [--skip-run] [--skip-batches]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from metaharness.candidates import seed_path
from metaharness.evaluation import evaluate
from metaharness.models import ChatRequest, ChatResult, Ledger
from metaharness.models.client import Client
from metaharness.models.local import DEFAULT_LOCAL_MODEL, DEFAULT_N_CTX, LocalBackend, chat_arguments, gguf_path
from metaharness.models.protocol import Tool
from metaharness.models.spec import parse_spec
from metaharness.tasks import get_task

TASKS = ("symptom2disease", "uspto", "lawbench")
SEEDS = ("zero_shot", "few_shot", "retrieval")
SPEC = f"local:{DEFAULT_LOCAL_MODEL}"
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "meta-harness"


class RecordingBackend(LocalBackend):
    """``LocalBackend`` that appends every request it completes, in the order it ran them, to ``RECORDED``."""

    recorded: list[tuple[ChatRequest, ChatResult]] = []
    _lock = threading.Lock()

    def complete(self, request: ChatRequest) -> ChatResult:
        result = super().complete(request)
        with self._lock:
            self.recorded.append((request, result))
        return result


def write_calls(path: Path, seconds: float, parts: dict[str, int] | None = None) -> None:
    """The recorded requests, one JSON line each, and beside them the recording's own summary and ``parts``: where
    each part of the workload (a seed) starts among the calls."""
    calls = RecordingBackend.recorded
    with path.open("w", encoding="utf-8") as out:
        for request, _ in calls:
            out.write(json.dumps(asdict(request), ensure_ascii=False) + "\n")
    live = summary([result for _, result in calls], seconds)
    path.with_suffix(".live.json").write_text(json.dumps({**live, "parts": parts or {}}))


def read_calls(path: Path) -> list[ChatRequest]:
    requests = []
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = json.loads(line)
        fields["tools"] = [Tool(**tool) for tool in fields["tools"]] if fields["tools"] else None
        requests.append(ChatRequest(**fields))
    return requests


def summary(results: list[ChatResult], seconds: float) -> dict[str, Any]:
    sent = sum(r.usage.input_tokens for r in results)
    return {
        "calls": len(results),
        "sent": sent,
        "computed": sent - sum(r.usage.cached_tokens for r in results),
        "seconds": round(seconds, 1),
        "answers": [[c.text for c in r.choices] for r in results],
        "per_call": [[r.usage.input_tokens, r.usage.input_tokens - r.usage.cached_tokens] for r in results],
    }


def record_seeds(task_name: str, data_dir: str, examples: int, workers: int, out: Path) -> None:
    client = Client(SPEC, RecordingBackend(parse_spec(SPEC)), cache=None, ledger=Ledger())
    task = get_task(task_name, data_dir=data_dir)
    task.load("train"), task.load("val")
    started = time.perf_counter()
    parts, seconds = {}, {}
    for seed in SEEDS:
        parts[seed], begun = len(RecordingBackend.recorded), time.perf_counter()
        evaluate(seed_path(task_name, seed), task, "val", model=client, limit=examples, workers=workers)
        seconds[seed] = round(time.perf_counter() - begun, 1)
    write_calls(out, time.perf_counter() - started, parts)
    print(json.dumps({"seconds by seed": seconds}))


def record_run(data_dir: str, iterations: int, val_limit: int, out: Path) -> None:
    import metaharness.models.client as client_module
    from metaharness import optimize, run_config

    client_module.LocalBackend = RecordingBackend  # type: ignore[misc]  # connect() builds the recording backend
    os.environ["METAHARNESS_CACHE_DIR"] = tempfile.mkdtemp(prefix="prefix-reuse-cache-")  # a fresh response cache
    settings = run_config("symptom2disease", val_limit=val_limit)
    started = time.perf_counter()
    optimize(
        Path(tempfile.mkdtemp(prefix="prefix-reuse-run-")) / "run",
        settings,
        iterations=iterations,
        data_dir=data_dir,
        test=False,
    )
    write_calls(out, time.perf_counter() - started)


def replay(mode: str, calls: Path) -> dict[str, Any]:
    requests = read_calls(calls)
    started = time.perf_counter()
    if mode == "before":
        results, least = replay_before(requests)
        return {**summary(results, time.perf_counter() - started), "least": least}
    backend = LocalBackend(parse_spec(SPEC), reuse_prefixes=mode == "after")
    results = [backend.complete(request) for request in requests]
    return summary(results, time.perf_counter() - started)


def least_computed(prompt: tuple[int, ...], earlier: list[tuple[int, ...]]) -> int:
    """The prompt tokens no exact prefix cache can spare: those after the longest prefix ``prompt`` shares with any
    of the ``earlier`` prompts (kept sorted; a cache of unlimited size, no chunk grid), and at least the last one,
    whose logits give the answer. Over a workload the sum is the size of its prompts' token trie, whatever their
    order.

    >>> earlier = []
    >>> [least_computed(p, earlier) for p in [(1, 2, 3), (1, 2, 4), (1, 2, 4), (5,)]]
    [3, 1, 1, 1]
    """
    at = bisect.bisect_left(earlier, prompt)
    shared = max((shared_length(earlier[i], prompt) for i in (at - 1, at) if 0 <= i < len(earlier)), default=0)
    bisect.insort(earlier, prompt)
    return len(prompt) - min(shared, len(prompt) - 1)


def shared_length(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """How many first tokens ``a`` and ``b`` share."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def replay_before(requests: list[ChatRequest]) -> tuple[list[ChatResult], list[int]]:
    """The requests through llama-cpp-python's own reuse, as the embedded backend ran them before prefix reuse;
    beside the results, each call's ``least_computed`` tokens (the prompts' tokens are at hand here)."""
    import llama_cpp

    from metaharness.models.prefix_states import common_prefix
    from metaharness.models.protocol import Choice, Usage

    models: dict[bool, llama_cpp.Llama] = {}
    results, least, earlier = [], [], []
    for request in requests:
        logits_all = request.logprobs is not None
        if logits_all not in models:
            models[logits_all] = llama_cpp.Llama(
                model_path=str(gguf_path(DEFAULT_LOCAL_MODEL)),
                n_ctx=DEFAULT_N_CTX,
                logits_all=logits_all,
                verbose=False,
            )
        llama = models[logits_all]
        usage, choices, spared = Usage(), [], 0
        for index in range(request.n):
            previous = llama.input_ids[: llama.n_tokens].copy()
            out = llama.create_chat_completion(**chat_arguments(request, index))
            sent = out["usage"]["prompt_tokens"]
            reused = min(common_prefix(previous, llama.input_ids[:sent]), sent - 1)
            usage = usage + Usage(sent, out["usage"]["completion_tokens"], reused)
            spared += least_computed(tuple(int(t) for t in llama.input_ids[:sent]), earlier)
            choices.append(Choice(text=out["choices"][0]["message"].get("content") or ""))
        results.append(ChatResult(choices=choices, usage=usage, latency_s=0.0, model=SPEC))
        least.append(spared)
    return results, least


def batches(data_dir: str) -> None:
    import statistics

    import llama_cpp
    import numpy as np

    lines = (Path(data_dir) / "crime_prediction" / "train.jsonl").read_text(encoding="utf-8").splitlines()
    facts = [json.loads(line)["question"][:300] for line in lines]
    path = str(gguf_path(DEFAULT_LOCAL_MODEL))
    cpus = os.cpu_count() or 1
    configs = [(size, threads) for threads in (1, cpus) for size in (64, 512)]
    models = {
        (size, threads): llama_cpp.Llama(
            model_path=path, n_ctx=DEFAULT_N_CTX, n_batch=size, n_ubatch=size, n_threads_batch=threads, verbose=False
        )
        for size, threads in configs
    }
    prompt = models[configs[0]].tokenize("".join(facts[:12]).encode())[:3008]
    times: dict[tuple[int, int], list[tuple[float, float]]] = {config: [] for config in configs}
    logits = {}
    for _ in range(3):
        for config, llama in models.items():
            llama.reset()
            llama._ctx.kv_cache_clear()
            wall, cpu = time.perf_counter(), time.process_time()
            llama.eval(prompt)
            times[config].append((time.perf_counter() - wall, time.process_time() - cpu))
            last = llama_cpp.llama_get_logits_ith(llama._ctx.ctx, -1)
            logits[config] = np.ctypeslib.as_array(last, shape=(llama.n_vocab(),)).copy()
    print(f"batches: {len(prompt)} prompt tokens, median of 3 rounds")
    print(f"{'batch tokens':>12} {'threads':>7} {'wall s':>7} {'cpu s':>7}  same logits as 512 tokens, {cpus} threads")
    for config in configs:
        wall = statistics.median(t[0] for t in times[config])
        cpu = statistics.median(t[1] for t in times[config])
        same = bool(np.array_equal(logits[config], logits[(512, cpus)]))
        print(f"{config[0]:>12} {config[1]:>7} {wall:>7.1f} {cpu:>7.1f}  {same}", flush=True)


def child(*args: str) -> str:
    done = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True)
    return done.stdout


def compare(label: str, folder: Path) -> list[dict[str, Any]]:
    calls = folder / f"{label}.jsonl"
    live = json.loads(calls.with_suffix(".live.json").read_text())
    parts = live.pop("parts")
    rows = [{"workload": label, "backend": "recorded live (after)", **live}]
    for mode in ("before", "after", "fresh"):
        rows.append({"workload": label, "backend": mode, **json.loads(child("replay", mode, str(calls)))})
    least = rows[1].pop("least")
    rows.append(
        {
            "workload": label,
            "backend": "least possible",
            "calls": len(least),
            "sent": rows[1]["sent"],
            "computed": sum(least),
            "seconds": None,
            "answers": rows[-1]["answers"],
            "per_call": [[sent, spared] for (sent, _), spared in zip(rows[1]["per_call"], least, strict=True)],
        }
    )
    reference = rows[3]["answers"]
    for row in rows:
        answers, per_call = row.pop("answers"), row.pop("per_call")
        row["same answers as fresh"] = f"{sum(a == b for a, b in zip(answers, reference, strict=True))}/{len(answers)}"
        print_row(row)
        if parts:
            bounds = [*parts.values(), len(per_call)]
            ratios = []
            for name, start, stop in zip(parts, bounds, bounds[1:], strict=False):
                sent = sum(c[0] for c in per_call[start:stop])
                ratios.append(f"{name} {sum(c[1] for c in per_call[start:stop])}/{sent}")
            print(f"{'':<22} {'':<22} by seed (computed/sent): {', '.join(ratios)}", flush=True)
    return rows


def print_row(row: dict[str, Any]) -> None:
    ratio = row["computed"] / row["sent"] if row["sent"] else 0.0
    seconds = "-" if row["seconds"] is None else f"{row['seconds']:.1f}"
    print(
        f"{row['workload']:<22} {row['backend']:<22} {row['calls']:>5} {row['sent']:>9} {row['computed']:>9} "
        f"{ratio:>6.3f} {seconds:>9}  {row['same answers as fresh']}",
        flush=True,
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("record-seeds", "record-run", "replay", "batches"):
        command, *rest = sys.argv[1:]
        if command == "record-seeds":
            record_seeds(rest[0], rest[1], int(rest[2]), int(rest[3]), Path(rest[4]))
        elif command == "batches":
            batches(rest[0])
        elif command == "record-run":
            record_run(rest[0], int(rest[1]), int(rest[2]), Path(rest[3]))
        else:
            print(json.dumps(replay(rest[0], Path(rest[1]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=5, help="val examples per task for the seeds workload")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--run-iters", type=int, default=1)
    parser.add_argument("--run-val-limit", type=int, default=10)
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA))
    parser.add_argument("--skip-run", action="store_true", help="leave out the run workload")
    parser.add_argument("--skip-batches", action="store_true", help="leave out the batches table")
    parser.add_argument("--tasks", nargs="*", default=list(TASKS))
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="prefix-reuse-"))
    print(f"load average at start: {os.getloadavg()[0]:.2f}; calls recorded under {folder}", flush=True)
    if not args.skip_batches:
        print(child("batches", args.data_dir), flush=True)
    print(
        f"{'workload':<22} {'backend':<22} {'calls':>5} {'sent':>9} {'computed':>9} {'ratio':>6} {'wall s':>9}  "
        "same answers as fresh",
        flush=True,
    )
    for task_name in args.tasks:
        label = f"seeds-{task_name}"
        calls = str(folder / f"{label}.jsonl")
        recorded = child("record-seeds", task_name, args.data_dir, str(args.examples), str(args.workers), calls)
        by_seed = json.loads(recorded.splitlines()[-1])["seconds by seed"]
        print(f"{label}: the recording's wall seconds by seed: {by_seed}", flush=True)
        compare(label, folder)
    if not args.skip_run:
        label = "run-symptom2disease"
        child("record-run", args.data_dir, str(args.run_iters), str(args.run_val_limit), str(folder / f"{label}.jsonl"))
        compare(label, folder)
    print(f"load average at end: {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
