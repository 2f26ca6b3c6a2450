"""How often a judgement of a given size can tell a real gain: the chance that the paired 95% interval of a
model-free label classifier over the no-model neighbour vote lies above 0, on judge sets of several sizes.

Both contestants are fitted on the task's training split only and scored once on every validation example (no
model call: the classifiers are the harness code the offline proposer writes, ``_LabelClassifier`` with the
model's weight 0; the vote is ``metaharness.search.baseline.NeighbourVote``). For each judge size, ``--draws``
seeded samples of that many validation examples are judged as a run judges (``paired_interval``), and the share
whose interval lies above 0 is printed, with each contestant's score on the whole split. A larger judge tells more
often; the search's examples shrink by as many, which is the trade the default holdout makes
(``metaharness.search.staging.order``).

    python benchmarks/judge_power.py DATASET [--data-dir DATA] [--sizes 14,20,25,30] [--draws 200]
"""

from __future__ import annotations

import argparse
import json
import random

from metaharness.proposers.operators.harness_label_models import _decide, _LabelClassifier
from metaharness.search.baseline import NeighbourVote
from metaharness.search.judgement import paired_interval
from metaharness.tasks.registry import open_task

KINDS = (("centroid", 3), ("logistic", 3), ("bayes", 3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--sizes", default="14,20,25,30")
    parser.add_argument("--draws", type=int, default=200)
    args = parser.parse_args()
    task = open_task(args.dataset, data_dir=args.data_dir)
    metric = task.metric_names()[0]
    train = [{"id": e.id, "input": e.input, "target": e.target} for e in task.load("train")]
    val = task.load("val")
    vote = NeighbourVote.fit(task)
    baseline = [task.score(vote.predict(e.input), e)[metric] for e in val]
    out: dict[str, object] = {
        "dataset": args.dataset,
        "validation": len(val),
        "vote": round(sum(baseline) / len(val), 3),
    }
    for kind, ngram in KINDS:
        model = _LabelClassifier(train, kind=kind, ngram=ngram)
        scores = [task.score(";".join(_decide(model.scores(e.input), [], 0.0, 1.0)), e)[metric] for e in val]
        told = {}
        for size in (int(s) for s in args.sizes.split(",")):
            rng = random.Random(f"judge-power:{size}")
            above = 0
            for _ in range(args.draws):
                picked = rng.sample(range(len(val)), min(size, len(val)))
                low = paired_interval([scores[i] for i in picked], [baseline[i] for i in picked], resamples=400)[1]
                above += low > 0
            told[str(size)] = round(above / args.draws, 3)
        out[f"{kind} (char {ngram}-grams)"] = {
            "score": round(sum(scores) / len(val), 3),
            "wins": sum(a > b for a, b in zip(scores, baseline, strict=True)),
            "losses": sum(a < b for a, b in zip(scores, baseline, strict=True)),
            "P(interval above 0) by judge size": told,
        }
    print(json.dumps(out, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
