"""A run stopped by each cap, many times in a row: its exit code, never a signal.

Runs ``metaharness optimize`` on the task folder shipped in tasks/custom/example with the embedded model
(``local:smollm2-135m``, 8 examples in flight, a fresh response cache each time so every call is computed) and a cap
small enough to stop it while the seeds are evaluated, ``--runs`` times per cap: ``--max-tokens``, ``--max-cost``,
and their ``--budget tokens=`` and ``--budget usd=`` forms (dollars from a price file naming the local model). A
capped run is a clean stop: exit code 0, ``stopped: cost cap reached`` in its last lines and a ``stop`` line in
summary.jsonl. Each run is checked for that, for an exit by a signal (a negative return code, or 128 + N from a
shell) and for a traceback or a crash message on stderr. Prints one line per run and a JSON summary.

    python benchmarks/cap_exits.py [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "tasks" / "custom" / "example"
CAPS = {
    "--max-tokens 300": ["--max-tokens", "300"],
    "--max-cost 0.03": ["--max-cost", "0.03"],
    "--budget tokens=300": ["--budget", "tokens=300"],
    "--budget usd=0.03": ["--budget", "usd=0.03"],
}
PRICES = {"local:smollm2-135m": {"input": 100.0, "output": 100.0}}  # $0.0001 a token: 300 tokens is $0.03
CRASHES = ("Traceback", "Segmentation fault", "Fatal Python error", "core dumped", "Aborted")


def run_once(cap: list[str], folder: Path) -> dict[str, object]:
    cache, run_dir = folder / "cache", folder / "run"
    cache.mkdir()
    prices = folder / "prices.json"
    prices.write_text(json.dumps(PRICES))
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    env |= {"METAHARNESS_CACHE_DIR": str(cache), "METAHARNESS_PRICES": str(prices), "COLUMNS": "200"}
    argv = [sys.executable, "-m", "metaharness", "optimize", "--dataset", str(TASK), "--val-limit", "2"]
    argv += ["--iters", "1", "--no-test", "--run-dir", str(run_dir), *cap]
    started = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800, check=False)
    seconds = time.monotonic() - started
    stops = [
        json.loads(line) for line in (run_dir / "summary.jsonl").read_text().splitlines() if '"type": "stop"' in line
    ]
    crashed = [word for word in CRASHES if word in done.stderr]
    signalled = done.returncode < 0 or done.returncode > 128
    reason = str(stops[-1].get("reason")) if stops else ""
    capped = "cap reached" in reason and "stopped: cost cap reached" in done.stdout
    return {
        "code": done.returncode,
        "signal": signalled,
        "capped": capped,
        "crash": crashed,
        "seconds": round(seconds, 1),
        "reason": reason[:70],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    summary: dict[str, dict[str, int]] = {}
    for name, cap in CAPS.items():
        counts = {"runs": 0, "exit 0 and capped": 0, "signal": 0, "crash message": 0}
        for index in range(runs):
            with tempfile.TemporaryDirectory(prefix="metaharness-cap-") as folder:
                result = run_once(cap, Path(folder))
            counts["runs"] += 1
            counts["exit 0 and capped"] += result["code"] == 0 and bool(result["capped"])
            counts["signal"] += bool(result["signal"])
            counts["crash message"] += bool(result["crash"])
            print(
                f"{name:22} run {index + 1:2}: exit {result['code']:<4} {result['seconds']:6.1f}s  "
                f"{'capped' if result['capped'] else 'NOT CAPPED'}  {result['reason']}"
                + (f"  CRASH: {result['crash']}" if result["crash"] else ""),
                flush=True,
            )
        summary[name] = counts
    print(json.dumps(summary))
    clean = all(
        c["exit 0 and capped"] == c["runs"] and not c["signal"] and not c["crash message"] for c in summary.values()
    )
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
