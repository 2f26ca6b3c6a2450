"""The same seed harness through a model server and in process: the same prompts, the same answers, the same spend.

One seed (``--seed``, default ``few_shot``, which fills the context with training examples) is evaluated on the first
``--examples`` validation examples of ``--dataset`` twice, each with a fresh response cache and a fresh ledger:

- in process: ``local:smollm2-135m`` (the embedded model, a context of 4,096 tokens);
- through a server: ``python -m llama_cpp.server`` with the same GGUF and ``--n_ctx 4096``, as
  ``openai:smollm2-135m@http://127.0.0.1:PORT/v1``. The backend reads the window from the server
  (``metaharness.models.openai_api``), and the seconds that took are printed.

For each side it prints the window the harness was given (``lm.context_window``), the model calls, the calls refused
(a prompt past the window: not charged), the tokens charged per example (the ledger) and the score; then how many
examples sent the same prompts on both sides and got the same answers. Nothing is timed against the other side:
the machine is shared.

    python benchmarks/server_vs_inprocess.py [--dataset symptom2disease] [--seed few_shot] [--examples 5]
        [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from metaharness.evaluation.evaluator import evaluate
from metaharness.models import connect
from metaharness.models.llama_server import LlamaServer
from metaharness.models.local import DEFAULT_LOCAL_MODEL, DEFAULT_N_CTX, gguf_path
from metaharness.models.protocol import ModelClient, context_window
from metaharness.tasks import open_task


def side(name: str, client: ModelClient, harness: Path, args: argparse.Namespace) -> dict[str, object]:
    """Evaluate the seed with ``client``; what the comparison reads of it."""
    task = open_task(args.dataset, data_dir=args.data_dir)
    report = evaluate(harness, task, "val", model=client, limit=args.examples, workers=1)
    calls = [call for record in report.records for call in record.calls]
    refused = [call for call in calls if call.get("error")]
    ledger = client.ledger  # type: ignore[attr-defined]
    print(
        f"{name:12s} window {context_window(client)}  calls {len(calls)}  refused {len(refused)}  "
        f"charged {ledger.tokens:,} tokens ({ledger.tokens / len(report.records):,.0f} per example)  "
        f"score {report.scores['primary']:.3f}  errors {report.errors}"
    )
    return {
        "prompts": [_digest([c.get("messages") for c in r.calls if not c.get("error")]) for r in report.records],
        "answers": [r.prediction for r in report.records],
    }


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="symptom2disease")
    parser.add_argument("--seed", default="few_shot")
    parser.add_argument("--examples", type=int, default=5)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    harness = Path(__file__).resolve().parents[1] / "candidates" / args.dataset / f"{args.seed}.py"
    print(
        f"seed {args.seed} of {args.dataset}, first {args.examples} val examples, fresh caches, n_ctx {DEFAULT_N_CTX}"
    )
    with tempfile.TemporaryDirectory() as cache:
        os.environ["METAHARNESS_CACHE_DIR"] = cache
        local = side(
            "in process", connect(f"local:{DEFAULT_LOCAL_MODEL}", cache=Path(cache) / "a.sqlite"), harness, args
        )
        server = LlamaServer(gguf_path(DEFAULT_LOCAL_MODEL), alias=DEFAULT_LOCAL_MODEL, n_ctx=DEFAULT_N_CTX)
        try:
            server.wait_ready()
            client = connect(f"openai:{DEFAULT_LOCAL_MODEL}@{server.base_url}", cache=Path(cache) / "b.sqlite")
            started = time.perf_counter()
            window = context_window(client)
            print(f"read the server's window ({window} tokens) in {time.perf_counter() - started:.1f} s")
            remote = side("via server", client, harness, args)
        finally:
            server.stop()
    same_prompts = sum(a == b for a, b in zip(local["prompts"], remote["prompts"], strict=True))  # type: ignore[call-overload]
    same_answers = sum(a == b for a, b in zip(local["answers"], remote["answers"], strict=True))  # type: ignore[call-overload]
    print(f"same prompts on {same_prompts} of {args.examples} examples; same answers on {same_answers}")


if __name__ == "__main__":
    main()
