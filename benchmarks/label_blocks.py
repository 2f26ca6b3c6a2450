"""How good are the model-free label blocks, measured the way a search meets them: on training examples only.

    python benchmarks/label_blocks.py [--data-dir DIR] [--folds 5] [--tasks symptom2disease,lawbench,uspto]
        [--json OUT.json]

For each task, the *training* split is cut into ``--folds`` folds (a fixed shuffle); each fold is predicted by
what the other folds train. The validation split is the search's and is never read here (nor is test); no default
of any block was tuned on validation examples.

The reference is a nearest-neighbour label vote with no model that tunes itself, written here with numpy and none
of the project's code: TF-IDF (damped term frequency, unit length) over words or character n-grams (1 to 5), the
answers of the K most similar training examples weighted by similarity, n and K (1, 3, 5, 7, 9, 15, 25) chosen by
leave-one-out on the fold's training examples, whole answers voted (a label set is one answer).

Beside it, the run's own no-model baseline (``metaharness.search.baseline.NeighbourVote``, the vote a search's
best is judged against: terms, K and label-set share by leave-one-out with the task's metric), fitted on each
fold's training examples.

The blocks run as the operators write them into a harness: the harness code of ``harness_code.definitions``,
executed as a harness executes it, at the settings a revision gives them, with the model's answer at weight 0
(the model cannot help or hurt), and answers scored with the task's own metric. The self-tuning blocks
(``tuned_vote``, ``classifier_auto``) choose their settings on each fold's training examples, as a harness does
on the ``train`` it receives; what they chose per fold is printed. Model-calling blocks (constrained
answers, the label-primed query, draft-then-verify) need the task model on every example and are not scored here;
for the shortlist the model chooses from, the share of examples whose labels are all among the classifier's first
N is printed (what the model can at best reach by choosing).

Printed per task and block: the cross-validated primary score (mean over the training examples), its paired
differences from the tuned vote and from the run's baseline with 95% intervals (normal, over examples), and the CPU
seconds of this process a harness's ``__init__`` took on one fold's training examples (160 of the 200, mean over
folds) and on all of them (once), and ``predict`` took per example (process CPU time, so other work on a shared
machine slows it less than wall time; still not a final figure).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from metaharness.proposers.operators import answer_profile, label_atoms
from metaharness.proposers.operators.harness_code import definitions
from metaharness.search.baseline import NeighbourVote
from metaharness.tasks import Example, get_task

TASKS = ("symptom2disease", "lawbench", "uspto")
VOTE_TERMS = (0, 1, 2, 3, 4, 5)
VOTE_K = (1, 3, 5, 7, 9, 15, 25)
SHORTLIST = (3, 5)
RUN_BASELINE = "the run's baseline (metaharness.search.baseline)"


def folds(n: int, k: int, seed: int = 0) -> list[list[int]]:
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return [sorted(order[i::k]) for i in range(k)]


# ---------------------------------------------------------------- the reference: a self-tuning neighbour vote


def _terms(text: str, n: int) -> list[str]:
    text = re.sub(r"\s+", " ", text.lower())
    if n == 0:
        return re.findall(r"\w+", text)
    return [text[i : i + n] for i in range(max(1, len(text) - n + 1))]


def _tfidf(train: list[str], test: list[str], n: int) -> tuple[np.ndarray, np.ndarray]:
    docs = [Counter(_terms(t, n)) for t in train]
    vocab = {t: i for i, t in enumerate(sorted({t for d in docs for t in d}))}
    df = np.zeros(len(vocab))
    for d in docs:
        for t in d:
            df[vocab[t]] += 1
    idf = np.log((1 + len(docs)) / (1 + df)) + 1

    def matrix(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), len(vocab)))
        for r, text in enumerate(texts):
            for t, c in Counter(_terms(text, n)).items():
                if t in vocab:
                    out[r, vocab[t]] = (1 + math.log(c)) * idf[vocab[t]]
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    return matrix(train), matrix(test)


def _vote(sims: np.ndarray, targets: list[str], k: int) -> str:
    """The answer with the most similarity among the ``k`` nearest (ties: the nearer one's)."""
    votes: dict[str, float] = {}
    for i in np.argsort(-sims, kind="stable")[:k]:
        votes[targets[i]] = votes.get(targets[i], 0.0) + max(0.0, float(sims[i]))
    return max(votes, key=lambda target: votes[target])


def tuned_vote(task: Any, train: list[Example], test: list[Example]) -> tuple[list[str], dict[str, Any]]:
    """The reference's answers on ``test``, n and K chosen by leave-one-out on ``train``; and its choice."""
    targets = [e.target for e in train]
    best: tuple[float, int, int] | None = None
    cache = {}
    for n in VOTE_TERMS:
        tr, te = _tfidf([e.input for e in train], [e.input for e in test], n)
        cache[n] = te @ tr.T
        sims = tr @ tr.T
        np.fill_diagonal(sims, -1.0)
        for k in VOTE_K:
            hits = sum(task.score(_vote(sims[i], targets, k), e)["primary"] for i, e in enumerate(train))
            if best is None or hits > best[0]:
                best = (hits, n, k)
    assert best is not None
    _, n, k = best
    return [_vote(cache[n][j], targets, k) for j in range(len(test))], {"terms": n, "k": k}


# ---------------------------------------------------------------- the blocks, as harness code


def _harness_code() -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    names = (
        "_LabelClassifier",
        "_TunedVote",
        "_NeighbourIndex",
        "_neighbour_votes",
        "_prior_corrected",
        "_decide",
        "_label_counts",
    )
    exec("\n\n".join(definitions(*names).values()), namespace)
    return namespace


@dataclass
class Trained:
    """A block trained on one fold: its answer's labels for an input, and the settings it chose itself."""

    predict: Callable[[str], list[str]]
    chosen: dict[str, Any] = field(default_factory=dict)


Block = Callable[[list[dict[str, str]]], Trained]


def vote_block(
    ngram: object = 0, k: int = 5, scoring: str = "tfidf", power: float = 1.0, prior: float = 0.0, share: float = 1.0
) -> Block:
    """The neighbour vote as ``neighbour_vote`` writes it (model weight 0), at these settings."""
    code = _harness_code()

    def train(items: list[dict[str, str]]) -> Trained:
        index = code["_NeighbourIndex"](items, ngram, scoring)
        counts = code["_label_counts"](items)

        def predict(x: str) -> list[str]:
            votes = code["_neighbour_votes"](index.nearest(x, k), power)
            return code["_decide"](code["_prior_corrected"](votes, counts, prior), [], 0.0, share)

        return Trained(predict)

    return train


def tuned_vote_block(prior: object = "auto") -> Block:
    """The self-tuning vote as ``tuned_vote`` writes it (model weight 0): terms, K, power, share (and the
    frequency correction, unless given) chosen by leave-one-out on the fold's training examples."""
    code = _harness_code()

    def train(items: list[dict[str, str]]) -> Trained:
        vote = code["_TunedVote"](items, "auto", "auto", "auto", "auto", "tfidf", prior)

        def predict(x: str) -> list[str]:
            return code["_decide"](vote.scores(x), [], 0.0, vote.share)

        chosen = {"terms": vote.ngram, "k": vote.k, "power": vote.power, "prior": vote.prior, "share": vote.share}
        return Trained(predict, chosen)

    return train


def classifier_block(kind: str, terms: object = "auto", prior: float = 0.0, share: float = 1.0) -> Block:
    """A label classifier as ``classifier_<kind>`` writes it (model weight 0), at these settings."""
    code = _harness_code()

    def train(items: list[dict[str, str]]) -> Trained:
        classifier = code["_LabelClassifier"](items, kind, terms, 10)
        counts = code["_label_counts"](items)

        def predict(x: str) -> list[str]:
            scores = code["_prior_corrected"](classifier.scores(x), counts, prior)
            return code["_decide"](scores, [], 0.0, share)

        return Trained(predict, {"kind": classifier.kind, "terms": classifier.ngram} if kind == "auto" else {})

    return train


def run_baseline_block(task: Any) -> Block:
    """The run's own no-model baseline (``metaharness.search.baseline.NeighbourVote``: terms, K and label-set share
    by leave-one-out with the task's metric), fitted on the fold's training examples; its answer as labels."""

    def train(items: list[dict[str, str]]) -> Trained:
        vote = NeighbourVote.fit(_FoldTask(task, items))
        return Trained(
            lambda x: label_atoms(vote.predict(x)), {k: v for k, v in vote.settings.items() if k != "loo_score"}
        )

    return train


class _FoldTask:
    """``task`` whose training split is one fold's training examples (the baseline fits on ``load("train")``)."""

    def __init__(self, task: Any, items: list[dict[str, str]]) -> None:
        self.task, self.items = task, items

    def load(self, split: str) -> list[Example]:
        assert split == "train", "the baseline reads the training split only"
        return [Example(item["id"], item["input"], item["target"]) for item in self.items]

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        return self.task.score(prediction, example)


def blocks(task: Any, multi_label: bool) -> dict[str, Block]:
    found = {
        RUN_BASELINE: run_baseline_block(task),
        "tuned vote (tuned_vote: all auto)": tuned_vote_block(),
        "tuned vote, no frequency correction": tuned_vote_block(prior=0.0),
        "classifier auto (classifier_auto: kind and terms by 3-fold CV)": classifier_block("auto"),
        "vote (neighbour_vote: K 5, words)": vote_block(),
        "vote, character 3-grams": vote_block(3),
        "vote, BM25": vote_block(scoring="bm25"),
        "vote, similarity power 4": vote_block(power=4.0),
        "vote, label-frequency correction 1.0": vote_block(prior=1.0),
        "vote, K 9, power 4, correction 0.5": vote_block(k=9, power=4.0, prior=0.5),
        "classifier centroid (terms auto)": classifier_block("centroid"),
        "classifier bayes (terms auto)": classifier_block("bayes"),
        "classifier logistic (terms auto)": classifier_block("logistic"),
        "classifier centroid, words": classifier_block("centroid", 0),
        "classifier centroid, character 3-grams": classifier_block("centroid", 3),
        "classifier centroid, correction 0.5": classifier_block("centroid", prior=0.5),
    }
    if multi_label:
        found["vote, share 0.5 (label sets)"] = vote_block(share=0.5)
        found["classifier centroid, share 0.8 (label sets)"] = classifier_block("centroid", share=0.8)
    return found


def shortlist_recall(items: list[dict[str, str]], test: list[Example], size: int) -> list[float]:
    """Per test example: 1 when every label of its answer is among the centroid classifier's first ``size``."""
    code = _harness_code()
    classifier = code["_LabelClassifier"](items, "centroid", "auto")
    out = []
    for example in test:
        scores = classifier.scores(example.input)
        first = set(sorted(scores, key=lambda label: (-scores[label], label))[:size])
        out.append(float(set(label_atoms(example.target)) <= first))
    return out


# ---------------------------------------------------------------- the study


def paired(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Mean of a - b and its 95% interval (normal approximation over examples)."""
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    mean = statistics.fmean(diffs)
    half = 1.96 * statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
    return mean, mean - half, mean + half


def study(name: str, data_dir: str | None, k: int) -> dict[str, Any]:
    task = get_task(name, data_dir=data_dir)
    examples = task.load("train")
    profile = answer_profile(examples)
    reference: list[float] = [0.0] * len(examples)
    choices = []
    scores: dict[str, list[float]] = {}
    seconds: dict[str, list[float]] = {}
    recall: dict[int, list[float]] = {size: [0.0] * len(examples) for size in SHORTLIST}
    candidates = blocks(task, profile.multi_label) if profile.labelled else {}
    chosen: dict[str, list[dict[str, Any]]] = {}
    for test in folds(len(examples), k):
        held = set(test)
        train = [examples[i] for i in range(len(examples)) if i not in held]
        tests = [examples[i] for i in test]
        answers, choice = tuned_vote(task, train, tests)
        choices.append(choice)
        for i, answer in zip(test, answers, strict=True):
            reference[i] = task.score(answer, examples[i])["primary"]
        items = [e.as_train_item() for e in train]
        for label, block in candidates.items():
            start = time.process_time()
            trained = block(items)
            built = time.process_time() - start
            if trained.chosen:
                chosen.setdefault(label, []).append(trained.chosen)
            row = scores.setdefault(label, [0.0] * len(examples))
            start = time.process_time()
            for i in test:
                row[i] = task.score(";".join(trained.predict(examples[i].input)), examples[i])["primary"]
            per = (time.process_time() - start) / len(test)
            seconds.setdefault(label, []).extend([built, per])
        if profile.labelled:
            for size in SHORTLIST:
                for i, hit in zip(test, shortlist_recall(items, tests, size), strict=True):
                    recall[size][i] = hit
    result: dict[str, Any] = {
        "task": name,
        "examples": len(examples),
        "folds": k,
        "labels": profile.labels,
        "multi_label": profile.multi_label,
        "tuned_vote": {"score": statistics.fmean(reference), "choices": choices},
        "blocks": {},
    }
    everything = [e.as_train_item() for e in examples]
    for label, row in scores.items():
        times = seconds[label]
        start = time.process_time()
        candidates[label](everything)
        result["blocks"][label] = {
            "score": statistics.fmean(row),
            "minus_tuned_vote": [round(x, 4) for x in paired(row, reference)],
            "minus_run_baseline": [round(x, 4) for x in paired(row, scores[RUN_BASELINE])],
            "init_cpu_seconds": round(statistics.fmean(times[0::2]), 3),
            "init_cpu_seconds_all": round(time.process_time() - start, 3),
            "predict_cpu_seconds": round(statistics.fmean(times[1::2]), 4),
            "chosen": chosen.get(label, []),
        }
    if profile.labelled:
        result["shortlist_recall"] = {str(size): statistics.fmean(hits) for size, hits in recall.items()}
    return result


def report(result: dict[str, Any]) -> str:
    choices = ", ".join(f"{c['terms']}/{c['k']}" for c in result["tuned_vote"]["choices"])
    lines = [
        f"## {result['task']}: {result['examples']} training examples, {result['folds']}-fold cross-validation",
        "",
        f"tuned neighbour vote (reference): {result['tuned_vote']['score']:.3f} (per fold, terms/K: {choices}; "
        "terms 0 = words, n = character n-grams)",
        "",
    ]
    if not result["blocks"]:
        lines.append("The answers are not labels: no label block applies.")
        return "\n".join(lines) + "\n"
    everything = result["examples"]
    lines += [
        "| block | train-CV | minus tuned vote [95% interval] | minus the run's baseline [95% interval] "
        f"| init CPU s ({everything * (result['folds'] - 1) // result['folds']}) | init CPU s ({everything}) "
        "| predict CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, row in sorted(result["blocks"].items(), key=lambda kv: -kv[1]["score"]):
        lines.append(
            f"| {label} | {row['score']:.3f} | {_interval(row['minus_tuned_vote'])} "
            f"| {_interval(row['minus_run_baseline'])} | {row['init_cpu_seconds']:.2f} "
            f"| {row['init_cpu_seconds_all']:.2f} | {row['predict_cpu_seconds']:.4f} |"
        )
    recall = ", ".join(f"first {size}: {share:.3f}" for size, share in result["shortlist_recall"].items())
    lines += ["", f"Shortlist (centroid, terms auto): every gold label among the classifier's {recall}.", ""]
    lines.append("What the self-tuning blocks chose, per fold:")
    for label, row in result["blocks"].items():
        if row["chosen"]:
            folds = "; ".join(", ".join(f"{k} {v}" for k, v in c.items()) for c in row["chosen"])
            lines.append(f"- {label}: {folds}")
    return "\n".join(lines) + "\n"


def _interval(figures: list[float]) -> str:
    diff, lo, hi = figures
    return f"{diff:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--json", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    results = []
    for name in args.tasks.split(","):
        start = time.perf_counter()
        result = study(name, args.data_dir, args.folds)
        result["seconds"] = round(time.perf_counter() - start, 1)
        results.append(result)
        print(report(result), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
