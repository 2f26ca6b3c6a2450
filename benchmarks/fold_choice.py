"""What the training folds buy in choosing the candidate a run returns, replayed on recorded runs' model-free
candidates and judged on validation examples the simulated search never saw.

    python benchmarks/fold_choice.py RUN [RUN ...] --data-dir DATA --out reports/fold-choice
    python benchmarks/fold_choice.py --rewrite reports/fold-choice   # the tables again, from results.json

A recorded run (``reports/replay/recorded``, see ``benchmarks/replay_study.py``) scored every candidate on its first
30 validation examples. Its model-free candidates (``metaharness.search.model_free``: outputs that do not depend on
the model's answers) can be scored anywhere with no model call, so for each of them this script collects, once
(kept in ``OUT/runs/<run>.json``): its scores on all validation examples (the recorded ones, and the others through
the model-free check, in the sandbox over the stand-in), its score by cross-validation on the training examples
(``metaharness.search.train_folds``; ``--folds``, 3 as in the loop), and the no-model neighbour vote's scores on
the same validation examples (``metaharness.search.baseline``). Only candidates model-free on every validation
example and with a fold score take part: the study is of the return rule among them, not of model-calling
candidates.

Each replicate then draws, as a run's ``ExampleOrder`` does, a search share of ``--share`` of the recorded examples
and ``--confirm`` held-out examples that choose from the validation examples the recorded run never scored (its
proposer saw the recorded ones in its traces), and judges on the rest of those. Three return rules
choose among the model-free candidates (``metaharness.search.held_out`` and ``metaharness.frontier``):

- ``no folds`` (``--train-folds off``, the default): the two best by search score with distinct
  outputs (the earlier of a tie) are scored on the confirm examples; the higher confirm score wins, ties by search
  score;
- ``folds on ties`` (``--train-folds on`` before 0c21c7a): as ``no folds``, with the training-fold score ordering
  candidates whose search scores tie;
- ``pooled`` (``--train-folds on`` since 0c21c7a): the contenders are the two best by their search and fold scores
  pooled by example count (``frontier.evidence``), the confirm examples decide between them, ties by the pooled
  score.

Distinct outputs are read on the search share, and the contest is the two-standard-error cut's ``near`` set of the
loop, kept whole here (a simplification: every model-free candidate is in the running). Printed: per run and
pooled, each rule's mean judged score, the vote's on the same judge examples, pooled minus each other rule and the
default rule (``no folds``) minus the vote, each with a two-stage bootstrap 95% interval (runs, then replicates;
``replay_study.bootstrap``). Every run of one task draws its confirm and judge examples from the same few unseen
examples, so the intervals say how the rules differ over runs and draws, not how those examples were sampled from
the task.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from replay_study import CHECKS, _check, bootstrap, check_run, load

from metaharness.search.baseline import NeighbourVote
from metaharness.search.train_folds import FOLDS, TrainFolds
from metaharness.store.files import atomic_write_json, atomic_write_text

RULES = ("no folds", "folds on ties", "pooled")
CONTENDERS = 2  # as metaharness.search.held_out


def collect(name: Path, data_dir: Path | None, out: Path, folds: int = FOLDS) -> dict[str, object]:
    """The run's model-free candidates' scores on every validation example and on the training folds, and the
    vote's on every validation example (module docstring); read from ``out/runs`` when collected before."""
    kept = out / "runs" / f"{name.name.removesuffix('.tar.xz')}.json"
    if kept.is_file():
        return dict(json.loads(kept.read_text(encoding="utf-8")))
    started = time.perf_counter()
    run = load(name)
    check_run(run, CHECKS, data_dir=data_dir)
    free = [c for c in run.candidates if not c.failed and len(run.free.get(c.id, ())) == len(run.examples)]
    check = _check(run, data_dir)
    task = check.plain_task
    val = [e.id for e in task.load("val")]
    unseen = [i for i in val if i not in run.examples]
    scored = TrainFolds(check, folds).scores([c.source for c in free])
    candidates: dict[str, object] = {}
    for c, fold in zip(free, scored, strict=True):
        found = check(c.source, unseen)
        if not found.model_free or found.evaluation is None or fold is None:
            continue
        scores = dict(run.scores[c.id])
        scores.update(zip(found.evaluation.example_ids, found.evaluation.example_scores, strict=True))
        candidates[c.id] = {
            "summary": c.summary,
            "val": scores,
            "outputs": run.outputs[c.id],
            "folds": dict(zip(fold.example_ids, fold.example_scores, strict=True)),
        }
    vote, settings = NeighbourVote.scorer(task)(val)
    found_run: dict[str, object] = {
        "run": run.name,
        "folds": folds,
        "recorded": run.examples,
        "unseen": unseen,
        "candidates": candidates,
        "baseline": dict(zip(val, vote, strict=True)),
        "baseline_settings": settings,
        "seconds": round(time.perf_counter() - started, 1),
    }
    kept.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(kept, json.dumps(found_run, sort_keys=True) + "\n")  # one line: the runs are kept in git
    return found_run


def replicate(run: Mapping[str, object], rng: random.Random, share: int, confirm: int) -> dict[str, float]:
    """One draw of search share, confirm and judge examples: each rule's judged score and the vote's."""
    recorded, unseen = list(run["recorded"]), list(run["unseen"])  # type: ignore[call-overload]
    cands: Mapping[str, Mapping[str, Mapping[str, float]]] = run["candidates"]  # type: ignore[assignment]
    ids = sorted(cands)  # the order they were made in (c001, c002, ...)
    search = rng.sample(recorded, share)
    rest = list(unseen)  # the recorded examples outside the share were in the recorded search's traces
    rng.shuffle(rest)
    chosen, judge = rest[:confirm], rest[confirm:]

    def mean(c: str, on: Sequence[str]) -> float:
        return sum(cands[c]["val"][i] for i in on) / len(on)

    score = {c: mean(c, search) for c in ids}
    fold = {c: statistics.fmean(cands[c]["folds"].values()) for c in ids}
    pooled = {c: (score[c] * share + fold[c] * len(cands[c]["folds"])) / (share + len(cands[c]["folds"])) for c in ids}
    outputs = {c: tuple(cands[c]["outputs"].get(i) for i in search) for c in ids}

    def contenders(key: Mapping[str, float], then: Mapping[str, float]) -> list[str]:
        ranked = sorted(ids, key=lambda c: (-key[c], -then[c], ids.index(c)))
        distinct: list[str] = []
        for c in ranked:
            if all(outputs[c] != outputs[d] for d in distinct):
                distinct.append(c)
        return distinct[:CONTENDERS]

    def confirmed(among: list[str], tie: Mapping[str, float]) -> str:
        return max(among, key=lambda c: (mean(c, chosen), tie[c], -ids.index(c)))

    none = {c: 0.0 for c in ids}
    picks = {
        "no folds": confirmed(contenders(score, none), score),
        "folds on ties": confirmed(contenders(score, fold), score),
        "pooled": confirmed(contenders(pooled, none), pooled),
    }
    judged = {rule: mean(c, judge) for rule, c in picks.items()}
    judged["vote"] = sum(float(run["baseline"][i]) for i in judge) / len(judge)  # type: ignore[index]
    return judged


def study(runs: Sequence[Mapping[str, object]], replicates: int, share: int, confirm: int) -> dict[str, object]:
    """Every rule on every run's replicates: per-run means, and pooled minus the others over runs and replicates."""
    per_run: dict[str, dict[str, float]] = {}
    draws: dict[str, list[dict[str, float]]] = {}
    for run in runs:
        if len(run["candidates"]) < 2:  # type: ignore[arg-type]
            continue
        if share > len(run["recorded"]) or confirm >= len(run["unseen"]):  # type: ignore[arg-type]
            raise SystemExit(f"{run['run']}: a share of {share} and {confirm} confirm leave no judge example")
        rng = random.Random(0)
        rows = [replicate(run, rng, share, confirm) for _ in range(replicates)]
        draws[str(run["run"])] = rows
        per_run[str(run["run"])] = {
            "candidates": len(run["candidates"]),  # type: ignore[arg-type]
            **{k: round(statistics.fmean(r[k] for r in rows), 4) for k in (*RULES, "vote")},
        }
    pairs = (("pooled", "no folds"), ("pooled", "folds on ties"), ("pooled", "vote"), ("no folds", "vote"))
    differences = {
        f"{rule} - {other}": bootstrap([[r[rule] - r[other] for r in rows] for rows in draws.values()])
        for rule, other in pairs
        if draws
    }
    return {"share": share, "confirm": confirm, "replicates": replicates, "runs": per_run, "differences": differences}


def report(results: Mapping[str, object]) -> str:
    lines = [f"runs: {', '.join(results['names'])}", f"training folds: {results.get('folds', FOLDS)}", ""]  # type: ignore[arg-type]
    for s in results["studies"]:  # type: ignore[attr-defined]
        lines.append(
            f"search share {s['share']}, confirm {s['confirm']}, judged on the other unseen validation examples; "
            f"{s['replicates']} replicates per run"
        )
        if not s["runs"]:
            lines += ["no run has two model-free candidates with a training-fold score: nothing to choose among", ""]
            continue
        lines.append(f"{'run':<36} {'cands':>5} " + " ".join(f"{k:>13}" for k in (*RULES, "vote")))
        for name, row in s["runs"].items():
            lines.append(f"{name:<36} {row['candidates']:>5} " + " ".join(f"{row[k]:>13.3f}" for k in (*RULES, "vote")))
        means = {k: statistics.fmean(row[k] for row in s["runs"].values()) for k in (*RULES, "vote")}
        lines.append(f"{'mean over runs':<36} {'':>5} " + " ".join(f"{means[k]:>13.3f}" for k in (*RULES, "vote")))
        for name, (mean, low, high) in s["differences"].items():
            lines.append(f"  {name}: {mean:+.3f} [{low:+.3f}, {high:+.3f}] (runs, then replicates)")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="recorded runs (folders or .tar.xz archives)")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("reports/fold-choice"))
    parser.add_argument("--replicates", type=int, default=400)
    parser.add_argument("--share", type=int, nargs="+", default=[10, 25])
    parser.add_argument("--confirm", type=int, default=5)
    parser.add_argument("--folds", type=int, default=FOLDS, help="training folds (the loop's: %(default)s)")
    parser.add_argument("--rewrite", type=Path, default=None, help="print the tables of a results.json folder")
    args = parser.parse_args(argv)
    if args.rewrite is not None:
        print(report(json.loads((args.rewrite / "results.json").read_text(encoding="utf-8"))))
        return
    if not args.runs:
        parser.error("name at least one recorded run, or --rewrite FOLDER")
    runs = []
    for name in args.runs:
        runs.append(collect(name, args.data_dir, args.out, args.folds))
        print(f"collected {runs[-1]['run']}: {len(runs[-1]['candidates'])} model-free candidates", file=sys.stderr)
    results = {
        "names": [str(r["run"]) for r in runs],
        "folds": args.folds,
        "studies": [study(runs, args.replicates, share, args.confirm) for share in args.share],
    }
    atomic_write_json(args.out / "results.json", results)
    print(report(results))


if __name__ == "__main__":
    main()
