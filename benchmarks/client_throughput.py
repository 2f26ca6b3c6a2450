"""What the client layer costs: evaluation-style throughput through ``metaharness.models`` versus a bare loop of the
``openai`` client, both against the same local OpenAI-compatible server (llama-cpp-python's, with the embedded
model) in the same run, and the speed-up of a warm response cache.

    python benchmarks/client_throughput.py [--examples 24] [--rounds 3] [--max-tokens 16]

The bare loop and the layer alternate request by request (which goes first alternates too), so changes in machine
load hit both alike; each reports requests per second over all its requests. Both send the same temperature-0
requests, so their answers should be identical. Target: the layer costs under 5% of throughput.

The same comparison then runs against a stub server on 127.0.0.1 that answers every request at once with a canned
completion: there the model takes no time, so the ratio is an upper bound on what the layer costs on any server.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import openai

from metaharness.models import ChatRequest, ResponseCache, connect
from metaharness.models.llama_server import LlamaServer
from metaharness.models.local import DEFAULT_LOCAL_MODEL, gguf_path

SYMPTOMS = [
    "a persistent dry cough and mild fever",
    "itchy red patches on the elbows",
    "sharp pain in the lower right abdomen",
    "frequent urination and constant thirst",
    "a throbbing headache on one side with nausea",
    "joint stiffness every morning",
    "shortness of breath when climbing stairs",
    "a sore throat and swollen glands",
    "blurred vision and dizziness",
    "heartburn after every meal",
    "numbness in the fingers at night",
    "a rash with small blisters along one side of the chest",
]


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


def compare(base_url: str, batch, rounds: int, max_tokens: int) -> dict:
    """The bare openai loop and the layer on the same server, request by request, alternating which goes first."""
    bare = openai.OpenAI(base_url=base_url, api_key="no-key-needed", max_retries=0)
    layer = connect(f"openai:{DEFAULT_LOCAL_MODEL}@{base_url}", cache=False)
    for messages in batch[:2]:  # warm-up: model pages, connection pools, server detection
        bare_call(bare, messages, max_tokens)
        layer_call(layer, messages, max_tokens)
    legs = {"bare": (bare_call, bare), "layer": (layer_call, layer)}
    seconds = {"bare": 0.0, "layer": 0.0}
    cpu = {"bare": 0.0, "layer": 0.0}
    pair_ratios = []  # layer time / bare time of the same request, measured back to back
    same = 0
    for round_ in range(rounds):
        for index, messages in enumerate(batch):
            texts, pair = {}, {}
            for which in ("bare", "layer") if (index + round_) % 2 == 0 else ("layer", "bare"):
                call, client = legs[which]
                elapsed, used, texts[which] = timed(call, client, messages, max_tokens)
                seconds[which] += elapsed
                cpu[which] += used
                pair[which] = elapsed
            pair_ratios.append(pair["layer"] / pair["bare"])
            same += texts["bare"] == texts["layer"]
    total = len(batch) * rounds
    bare_rps, layer_rps = total / seconds["bare"], total / seconds["layer"]
    return {
        "requests_per_loop": total,
        "bare_openai_requests_per_s": round(bare_rps, 3),
        "layer_requests_per_s": round(layer_rps, 3),
        "layer_to_bare_throughput_ratio": round(layer_rps / bare_rps, 4),
        "layer_overhead_percent": round(100 * (1 - layer_rps / bare_rps), 2),
        # Geometric mean over pairs: each order (layer first / bare first) occurs equally often, so the server's
        # advantage for the second of two identical prompts (its prompt cache) cancels out.
        "pair_time_ratio_layer_to_bare": round(statistics.geometric_mean(pair_ratios), 4),
        "client_cpu_ms_per_request_bare": round(1000 * cpu["bare"] / total, 3),
        "client_cpu_ms_per_request_layer": round(1000 * cpu["layer"] / total, 3),
        "identical_answers": f"{same}/{total}",
    }


def cache_speedup(base_url: str, batch, rounds: int, max_tokens: int) -> dict:
    """Cold pass (fills the cache) and warm passes (every request a hit) through a cached client."""
    with tempfile.TemporaryDirectory() as folder:
        cached = connect(f"openai:{DEFAULT_LOCAL_MODEL}@{base_url}", cache=ResponseCache(Path(folder) / "c.sqlite"))
        cold = sum(timed(layer_call, cached, m, max_tokens)[0] for m in batch)
        warm = sum(timed(layer_call, cached, m, max_tokens)[0] for _ in range(rounds) for m in batch)
        return {
            "cache_cold_requests_per_s": round(len(batch) / cold, 3),
            "cache_warm_requests_per_s": round(len(batch) * rounds / warm, 1),
            "cache_hits": cached.ledger.totals()["cache_hits"],
        }


class StubServer:
    """Answers GET /v1/models and POST /v1/chat/completions at once with a fixed completion (no model)."""

    COMPLETION = {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": DEFAULT_LOCAL_MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Common cold."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 4, "total_tokens": 44},
    }
    MODELS = {"object": "list", "data": [{"id": DEFAULT_LOCAL_MODEL, "object": "model", "owned_by": "stub"}]}

    def __init__(self):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, like a real server

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in two writes; without this, Nagle + delayed ACK add 40 ms to each.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, payload: dict) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer(stub.MODELS)

            def do_POST(self) -> None:
                self._answer(stub.COMPLETION)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def report(title: str, record: dict) -> None:
    print(title)
    print(
        f"  bare openai loop : {record['bare_openai_requests_per_s']:10.2f} requests/s "
        f"({record['requests_per_loop']} requests)"
    )
    print(f"  metaharness layer: {record['layer_requests_per_s']:10.2f} requests/s")
    print(
        f"  ratio layer/bare : {record['layer_to_bare_throughput_ratio']:10.4f}  "
        f"(overhead {record['layer_overhead_percent']}%, target < 5%)"
    )
    print(
        f"  pair time ratio  : {record['pair_time_ratio_layer_to_bare']:10.4f}  "
        f"(layer / bare time of the same request, geometric mean)"
    )
    print(
        f"  client CPU       : {record['client_cpu_ms_per_request_bare']} ms/request bare, "
        f"{record['client_cpu_ms_per_request_layer']} ms/request through the layer"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=24, help="distinct requests (evaluation examples)")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the examples")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--stub-requests", type=int, default=500, help="requests per loop against the stub server")
    args = parser.parse_args()
    batch = prompts(args.examples)

    server = LlamaServer(gguf_path(DEFAULT_LOCAL_MODEL), alias=DEFAULT_LOCAL_MODEL)
    try:
        server.wait_ready()
        local = compare(server.base_url, batch, args.rounds, args.max_tokens)
        local.update(cache_speedup(server.base_url, batch, args.rounds, args.max_tokens))
    finally:
        server.stop()
    local["cache_hit_speedup_vs_bare"] = round(
        local["cache_warm_requests_per_s"] / local["bare_openai_requests_per_s"], 1
    )

    stub = StubServer()
    try:
        instant = compare(stub.base_url, prompts(args.stub_requests), 1, args.max_tokens)
    finally:
        stub.close()

    report(f"llama-cpp-python server, embedded model, max_tokens={args.max_tokens}:", local)
    print(f"  identical answers: {local['identical_answers']}")
    print(
        f"  warm cache       : {local['cache_warm_requests_per_s']:10.1f} requests/s, "
        f"{local['cache_hit_speedup_vs_bare']}x the bare loop"
    )
    report("stub server answering at once (upper bound of the layer's cost):", instant)
    print(json.dumps({"max_tokens": args.max_tokens, "local_server": local, "stub_server": instant}))


if __name__ == "__main__":
    main()
