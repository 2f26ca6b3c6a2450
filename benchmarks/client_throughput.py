"""What the client layer costs: evaluation-style throughput through ``metaharness.models`` versus a bare loop of the
``openai`` client, both against the same local OpenAI-compatible server (llama-cpp-python's, with the embedded
model) in the same run, and the speed-up of a warm response cache.

    python benchmarks/client_throughput.py [--examples 24] [--rounds 3] [--max-tokens 16]

The bare loop and the layer alternate request by request (which goes first alternates too), so changes in machine
load hit both alike; each reports requests per second over all its requests. Both send the same temperature-0
requests, so their answers should be identical. Target: the layer costs under 5% of throughput.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from model_server import LlamaServer  # noqa: E402  (the test suite's server launcher)

from metaharness.models import ChatRequest, ResponseCache, connect  # noqa: E402
from metaharness.models.embedded import DEFAULT_LOCAL_MODEL, gguf_path  # noqa: E402

SYMPTOMS = [
    "a persistent dry cough and mild fever", "itchy red patches on the elbows", "sharp pain in the lower right abdomen",
    "frequent urination and constant thirst", "a throbbing headache on one side with nausea",
    "joint stiffness every morning", "shortness of breath when climbing stairs", "a sore throat and swollen glands",
    "blurred vision and dizziness", "heartburn after every meal", "numbness in the fingers at night",
    "a rash with small blisters along one side of the chest",
]  # fmt: skip


def prompts(count: int) -> list[list[dict[str, str]]]:
    """Evaluation-style requests: one fixed instruction, a different example each time."""
    system = "You are a medical triage assistant. Name the most likely condition in at most five words."
    return [
        [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Patient {i}: {SYMPTOMS[i % len(SYMPTOMS)]}. Most likely condition?"},
        ]
        for i in range(count)
    ]


def bare_call(client: openai.OpenAI, messages, max_tokens: int) -> str:
    response = client.chat.completions.create(
        model=DEFAULT_LOCAL_MODEL, messages=messages, temperature=0.0, max_tokens=max_tokens
    )
    return response.choices[0].message.content or ""


def layer_call(client, messages, max_tokens: int) -> str:
    return client.complete(ChatRequest(messages, max_tokens=max_tokens)).text


def timed(call, *args) -> tuple[float, float, str]:
    """Wall-clock seconds, this process's CPU seconds (the client side only; the server is another process), text."""
    start, cpu = time.perf_counter(), time.process_time()
    text = call(*args)
    return time.perf_counter() - start, time.process_time() - cpu, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=24, help="distinct requests (evaluation examples)")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the examples")
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()

    server = LlamaServer(gguf_path(DEFAULT_LOCAL_MODEL), alias=DEFAULT_LOCAL_MODEL)
    try:
        server.wait_ready()
        batch = prompts(args.examples)
        bare = openai.OpenAI(base_url=server.base_url, api_key="no-key-needed", max_retries=0)
        layer = connect(f"openai:{DEFAULT_LOCAL_MODEL}@{server.base_url}", cache=False)
        for messages in batch[:2]:  # warm-up: model pages, connection pools, server detection
            bare_call(bare, messages, args.max_tokens)
            layer_call(layer, messages, args.max_tokens)

        # Request by request, alternating which of the two goes first, so load changes hit both alike.
        legs = {"bare": (bare_call, bare), "layer": (layer_call, layer)}
        seconds = {"bare": 0.0, "layer": 0.0}
        cpu = {"bare": 0.0, "layer": 0.0}
        pair_ratios = []  # layer time / bare time of the same request, measured back to back
        same = 0
        for round_ in range(args.rounds):
            for index, messages in enumerate(batch):
                texts, pair = {}, {}
                for which in ("bare", "layer") if (index + round_) % 2 == 0 else ("layer", "bare"):
                    call, client = legs[which]
                    elapsed, used, texts[which] = timed(call, client, messages, args.max_tokens)
                    seconds[which] += elapsed
                    cpu[which] += used
                    pair[which] = elapsed
                pair_ratios.append(pair["layer"] / pair["bare"])
                same += texts["bare"] == texts["layer"]

        with tempfile.TemporaryDirectory() as folder:
            cached = connect(f"openai:{DEFAULT_LOCAL_MODEL}@{server.base_url}", cache=ResponseCache(Path(folder) / "c.sqlite"))
            cold = sum(timed(layer_call, cached, m, args.max_tokens)[0] for m in batch)
            warm = sum(timed(layer_call, cached, m, args.max_tokens)[0] for _ in range(args.rounds) for m in batch)
            hits = cached.ledger.totals()["cache_hits"]
    finally:
        server.stop()

    total = args.examples * args.rounds
    bare_rps, layer_rps = total / seconds["bare"], total / seconds["layer"]
    warm_rps = total / warm
    record = {
        "requests_per_loop": total,
        "max_tokens": args.max_tokens,
        "bare_openai_requests_per_s": round(bare_rps, 3),
        "layer_requests_per_s": round(layer_rps, 3),
        "layer_to_bare_throughput_ratio": round(layer_rps / bare_rps, 4),
        "layer_overhead_percent": round(100 * (1 - layer_rps / bare_rps), 2),
        # Geometric mean over pairs: each order (layer first / bare first) occurs equally often, so the server's
        # advantage for the second of two identical prompts (its prompt cache) cancels out.
        "pair_time_ratio_layer_to_bare": round(statistics.geometric_mean(pair_ratios), 4),
        "client_cpu_ms_per_request_bare": round(1000 * cpu["bare"] / total, 2),
        "client_cpu_ms_per_request_layer": round(1000 * cpu["layer"] / total, 2),
        "identical_answers": f"{same}/{total}",
        "cache_cold_requests_per_s": round(args.examples / cold, 3),
        "cache_warm_requests_per_s": round(warm_rps, 1),
        "cache_hit_speedup_vs_bare": round(warm_rps / bare_rps, 1),
        "cache_hits": hits,
    }
    print(f"bare openai loop : {bare_rps:8.2f} requests/s ({total} requests, interleaved with the layer's)")
    print(f"metaharness layer: {layer_rps:8.2f} requests/s")
    print(f"ratio layer/bare : {layer_rps / bare_rps:8.4f}  (overhead {record['layer_overhead_percent']}%, target < 5%)")
    print(f"pair time ratio  : {record['pair_time_ratio_layer_to_bare']:8.4f}  (layer / bare time of the same request, geometric mean)")
    print(
        f"client CPU       : {record['client_cpu_ms_per_request_bare']} ms/request bare, "
        f"{record['client_cpu_ms_per_request_layer']} ms/request through the layer"
    )
    print(f"identical answers: {record['identical_answers']}")
    print(f"warm cache       : {warm_rps:8.1f} requests/s, {record['cache_hit_speedup_vs_bare']}x the bare loop")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
