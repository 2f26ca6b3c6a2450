"""What the offline proposer offered per iteration, what its predictions cost, and how well they held.

    python benchmarks/offline_proposals.py RUN_DIR [RUN_DIR ...] [--json OUT.json]

Reads finished runs of ``metaharness optimize`` with the offline proposer (the proposer's planning records under
``RUN/proposer/planning/`` and the committed candidates) and prints, per run:

- per iteration: how many new candidates the proposer made (``made``: nodes added to the program graph; merged
  revisions are not new nodes), how many of them are dead ends, how many revisions it predicted (``simulated``),
  how many of those a complete replay scored exactly (``replayed``), how many probes the iteration's budget could
  not afford, and what its predictions spent (example-evaluations and tokens of the task model, against what they
  were allowed); runs recorded before the one budget show their probe tokens instead;
- the priors of the evaluated candidates against what validation measured, for all of them and by what predicted
  them (``replay``, ``probe``, ``prior``; older runs: ``probe``): mean absolute error of the predicted score, the
  share of actual scores within one and two predicted standard deviations (a calibrated normal prior covers 68% and
  95%), the root mean square of (actual - predicted) / std (1 when calibrated), and the same for the candidates
  whose probe saw no flip ("quiet");
- the cost priors: predicted tokens per example (when its calls are new) against the measured input + output
  tokens per example, and ``repeat`` against the share of the candidate's validation calls whose request its base
  made too.

Nothing is asserted; the figures are printed (and written as JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from metaharness.candidate import Candidate
from metaharness.proposers.probe import request_key
from metaharness.store.run_dir import RunDirectory

HOW = ("replay", "probe", "prior")  # what predicted a candidate (the proposer's "predicted_by")


def iterations(run: Path) -> list[dict[str, Any]]:
    """Per iteration: the proposer's counts and what its predictions spent, from its planning records."""
    rows = []
    for path in sorted((run / "proposer" / "planning").glob("iteration-*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        predicting = record.get("predicting")
        if predicting is not None:
            spent, allowed = predicting.get("spent", {}), predicting.get("allowed", {})
            spend = {
                "simulated": predicting.get("simulated"),
                "replayed": predicting.get("replayed"),
                "skipped": predicting.get("probes_not_afforded"),
                "evals": spent.get("evals"),
                "new_tokens": spent.get("tokens"),
                "allowed_evals": allowed.get("evals"),
            }
        else:  # a run recorded before the one budget: its probe-token counts
            tokens = record.get("probe_tokens", {})
            spend = {
                "simulated": record.get("probes"),
                "replayed": None,
                "skipped": tokens.get("revisions_skipped"),
                "evals": None,
                "new_tokens": tokens.get("spent"),
                "allowed_evals": None,
            }
        rows.append(
            {
                "iteration": record["iteration"],
                "want": record.get("want"),
                "made": len(record.get("made", [])),
                "live": len(record.get("made", [])) - len(record.get("dead_ends", [])),
                "dead_ends": len(record.get("dead_ends", [])),
                "proposed": len(record.get("proposed", [])),
                **spend,
            }
        )
    return rows


def _calls(run: Path, cand: Candidate) -> list[dict[str, Any]]:
    if cand.trace is None or not (run / cand.trace).is_file():
        return []
    lines = (run / cand.trace).read_text(encoding="utf-8").splitlines()
    return [call for line in lines if line.strip() for call in json.loads(line).get("calls", [])]


def priors(run: Path) -> list[dict[str, Any]]:
    """Every evaluated candidate the offline proposer predicted: predicted and actual score and cost."""
    browse = RunDirectory.browse(run)
    try:
        candidates = browse.candidates()
    finally:
        browse.close()
    by_id = {c.id: c for c in candidates}
    rows = []
    for cand in candidates:
        pred = cand.prediction.to_json() if cand.prediction is not None else {}
        how = pred.get("predicted_by", "probe" if "probe_std" in pred else None)
        if not cand.evaluated or how is None or pred.get("score") is None or cand.evaluation is None:
            continue
        examples = max(1, cand.evaluation.examples)
        calls = _calls(run, cand)
        base = by_id.get(str(pred.get("base")))
        base_requests = {request_key(c) for c in _calls(run, base)} if base is not None else set()
        flips = pred.get("flips") or {}
        rows.append(
            {
                "id": cand.id,
                "iteration": cand.iteration,
                "predicted_by": how,
                "supported": cand.supported,
                "predicted": pred["score"],
                "std": pred["std"],
                "actual": cand.score,
                "quiet": how == "probe" and not flips.get("gained") and not flips.get("lost"),
                "tokens_per_example": pred.get("tokens_per_example"),
                "measured_tokens_per_example": (
                    cand.cost.get("input_tokens", 0.0) + cand.cost.get("output_tokens", 0.0)
                )
                / examples,
                "repeat": pred.get("repeat"),
                "measured_repeat": (
                    sum(request_key(c) in base_requests for c in calls) / len(calls) if calls and base else None
                ),
            }
        )
    return rows


def calibration(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {"n": 0}
    errors = [r["actual"] - r["predicted"] for r in rows]
    z = [e / r["std"] for e, r in zip(errors, rows, strict=True) if r["std"] > 0]
    return {
        "n": len(rows),
        "mean_abs_error": round(statistics.fmean(abs(e) for e in errors), 4),
        "mean_std": round(statistics.fmean(r["std"] for r in rows), 4),
        "within_1_std": round(sum(abs(x) <= 1 for x in z) / len(z), 3) if z else None,
        "within_2_std": round(sum(abs(x) <= 2 for x in z) / len(z), 3) if z else None,
        "rms_z": round(math.sqrt(statistics.fmean(x * x for x in z)), 3) if z else None,
    }


def cost_fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    pairs = [(r["tokens_per_example"], r["measured_tokens_per_example"]) for r in rows if r["tokens_per_example"]]
    repeats = [(r["repeat"], r["measured_repeat"]) for r in rows if r["measured_repeat"] is not None]
    return {
        "tokens_ratio_median": (round(statistics.median(m / p for p, m in pairs if p > 0), 3) if pairs else None),
        "repeat_mean_abs_error": (round(statistics.fmean(abs(p - m) for p, m in repeats), 3) if repeats else None),
        "repeat_pairs": len(repeats),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    out = {}
    for run in args.runs:
        its = iterations(run)
        rows = priors(run)
        full = [r for r in rows if r["supported"]]
        summary = {
            "iterations": its,
            "made_min": min((r["live"] for r in its), default=0),
            "made_mean": round(statistics.fmean(r["live"] for r in its), 2) if its else 0,
            "prediction_evals": sum(r["evals"] or 0 for r in its),
            "prediction_tokens": sum(r["new_tokens"] or 0 for r in its),
            "calibration": calibration(full),
            **{f"calibration_{how}": calibration([r for r in full if r["predicted_by"] == how]) for how in HOW},
            "calibration_quiet": calibration([r for r in full if r["quiet"]]),
            "costs": cost_fit(rows),
            "evaluated": rows,
        }
        out[str(run)] = summary
        print(f"== {run}")
        print(" iter  want  made  live  dead  simulated  replayed  skipped  evals  new tokens  allowed evals")
        for r in its:
            print(
                f" {r['iteration']:4d}  {r['want'] or 0:4d}  {r['made']:4d}  {r['live']:4d}  {r['dead_ends']:4d}"
                f"  {r['simulated'] or 0:9d}  {r['replayed'] or 0:8d}  {r['skipped'] or 0:7d}  {r['evals'] or 0:5g}"
                f"  {r['new_tokens'] or 0:10g}  {r['allowed_evals'] or 0:13g}"
            )
        print(f" new candidates per iteration: min {summary['made_min']}, mean {summary['made_mean']}")
        spent = f"{summary['prediction_evals']:g} example-evaluations, {summary['prediction_tokens']:g} tokens"
        print(f" predictions spent: {spent}")
        for name in ("calibration", *(f"calibration_{how}" for how in HOW), "calibration_quiet"):
            print(f" {name} (supported candidates): {summary[name]}")
        print(f" costs: {summary['costs']}")
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
