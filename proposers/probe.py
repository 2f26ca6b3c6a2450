"""The cheap probe: run a candidate harness on a few held-out *training* examples with the task model.

This is how the offline proposer simulates a revision (TPS's state-simulation stage, done by execution instead of
by a model's guess). The probe examples are a fixed random sample of the train split, and the harness under probe
receives the rest of the train split as its ``train``, so a retrieval or voting harness cannot look its own answer
up. Nothing here touches the validation split.

A ``ProbeResult`` keeps each example's prediction and score, so two candidates whose predictions are identical
on every probe example can be merged (TPS's merging stage) and a revision's *flips* (examples it newly gets right
or wrong) can be read off against its parent, and each model call's request, so the share of a revision's calls
that repeat its parent's (``ProbeResult.repeat``) says what evaluating it would cost beyond the parent.

A probe's task-model calls are predictions, spent from the iteration's one budget: the prober charges what each
probe cost to its ``meter`` (the proposer sets it to ``RunState.predicting`` every iteration) and refuses a probe
the meter cannot afford (`PredictionBudgetSpent`), so no proposer predicts beyond what the loop allows.

What a probe can resolve: a probe of 8 examples that sees no flip does not show that a revision changes nothing,
only that it rarely changes an outcome. ``estimate_change`` is what the probe's per-example differences say
about the revision's true change of score (mean, uncertainty, per-example variance of paired differences), with a
``ChangePrior`` fitted on how often this run's revisions changed probe outcomes; ``Spread`` rescales
the uncertainty by how far this run's evaluated predictions actually landed from their prediction.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from metaharness.budget import Meter, Spend
from metaharness.candidates.protocol import HARNESS_FILE
from metaharness.evaluation.records import CallRecord, ExampleRecord
from metaharness.models.protocol import ModelClient
from metaharness.tasks.protocol import Example, Task


class PredictionBudgetSpent(Exception):
    """A probe would spend more than what the iteration's predictions may still spend (``RunState.predicting``)."""


class HeldOutTask:
    """A task whose ``"probe"`` split is a sample of the train split and whose ``"train"`` split is the rest.

    A ``Task`` in its own right (``"probe"`` is an extra split), delegating scoring to the
    real task.
    """

    def __init__(self, task: Task, size: int, *, seed: int = 0) -> None:
        self.task = task
        self.name = task.name
        self.description = getattr(task, "description", "")
        train = task.load("train")
        rng = random.Random(seed)
        chosen = set(rng.sample(range(len(train)), min(size, max(0, len(train) - 1))))
        self.probe = [ex for i, ex in enumerate(train) if i in chosen]
        self.rest = [ex for i, ex in enumerate(train) if i not in chosen]

    def load(self, split: str) -> list[Example]:
        if split == "probe":
            return list(self.probe)
        if split == "train":
            return list(self.rest)
        return self.task.load(split)

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        return self.task.score(prediction, example)

    def metric_names(self) -> list[str]:
        return self.task.metric_names()


@dataclass
class ProbeResult:
    """A candidate on the probe examples: per-example predictions and primary scores, errors, token cost."""

    predictions: dict[str, str | None]
    correct: dict[str, float]
    errors: dict[str, str] = field(default_factory=dict)
    tokens: float = 0.0  # input + output tokens over the probe
    context_tokens: float = 0.0  # mean prompt tokens per example
    # The per-example records (every model call's prompt and answer), for the subagents that read behaviour.
    records: list[ExampleRecord] = field(default_factory=list, compare=False, repr=False)
    # Input + output tokens of the calls this prober had not made before (what probing this source cost).
    new_tokens: float = 0.0

    def requests(self) -> list[str]:
        """One key per model call, in order: a digest of its request (messages and options, as recorded)."""
        return [request_key(call) for record in self.records for call in record.calls]

    def repeat(self, parent: ProbeResult) -> float:
        """The share of this candidate's probe calls whose request equals one of ``parent``'s (1.0 when it makes
        no call): on examples the parent was evaluated on, only the other calls cost anything."""
        mine = self.requests()
        if not mine:
            return 1.0
        theirs = set(parent.requests())
        return sum(key in theirs for key in mine) / len(mine)

    def differences(self, parent: ProbeResult) -> list[float]:
        """Per probe example, this candidate's primary score minus ``parent``'s (in example-id order)."""
        return [self.correct[k] - parent.correct.get(k, 0.0) for k in sorted(self.correct)]

    @property
    def score(self) -> float:
        return sum(self.correct.values()) / len(self.correct) if self.correct else 0.0

    def signature(self) -> str:
        """Equal signatures = the same behaviour on every probe example (the merge key)."""
        text = "\x1f".join(f"{k}={self.predictions[k]!r}" for k in sorted(self.predictions))
        return hashlib.sha256(text.encode()).hexdigest()

    def flips(self, parent: ProbeResult) -> dict[str, list[str]]:
        """Probe examples this candidate gets right and its parent did not (``gained``), and the reverse."""
        gained = [k for k in self.correct if self.correct[k] > parent.correct.get(k, 0.0)]
        lost = [k for k in self.correct if self.correct[k] < parent.correct.get(k, 0.0)]
        return {"gained": sorted(gained), "lost": sorted(lost)}


def request_key(call: CallRecord) -> str:
    """A digest of one recorded model call's request: its messages and options, nothing it got back."""
    request = {"messages": call.get("messages"), "options": call.get("options")}
    return hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _call_tokens(call: CallRecord) -> float:
    return float(call.get("input_tokens") or 0) + float(call.get("output_tokens") or 0)


# Before a run has probed anything: a revision flips about 1 example in 10, a prior worth half a probe of 8.
DEFAULT_RATE = 0.1
DEFAULT_WEIGHT = 4.0
WEIGHT_RANGE = (0.5, 50.0)


@dataclass(frozen=True)
class ChangePrior:
    """How much a revision changes outcomes, before its probe: ``rate`` is the expected squared per-example score
    change (for 0/1 scores, the share of examples that flip), ``weight`` how many probe examples the prior is
    worth. ``fit`` reads it off the run's probes (empirical Bayes, beta-binomial moments)."""

    rate: float = DEFAULT_RATE
    weight: float = DEFAULT_WEIGHT
    revisions: int = 0

    @classmethod
    def fit(cls, changes: Iterable[tuple[float, int]]) -> ChangePrior:
        """The prior from ``(sum of squared per-example changes, examples)`` of each probed revision: the pooled
        rate (with the default as two probes' worth of pseudo-data), and the weight from how much the revisions'
        rates vary beyond binomial noise (revisions that either do nothing or a lot make a quiet probe telling,
        so the weight is low). Fewer than 5 revisions keep the default weight."""
        rows = [(float(x), int(n)) for x, n in changes if n > 0]
        pseudo = 16
        total_x = sum(x for x, _ in rows)
        total_n = sum(n for _, n in rows)
        rate = (total_x + DEFAULT_RATE * pseudo) / (total_n + pseudo)
        if len(rows) < 5:
            return cls(round(rate, 6), DEFAULT_WEIGHT, len(rows))
        mean_n = total_n / len(rows)
        spread = sum(n * (x / n - rate) ** 2 for x, n in rows) / total_n
        binomial = rate * max(1e-9, 1.0 - rate) / mean_n
        rho = (spread / binomial - 1.0) / max(1.0, mean_n - 1.0)
        low, high = WEIGHT_RANGE
        rho = min(1 / (1 + low), max(1 / (1 + high), rho))
        return cls(round(rate, 6), round(1 / rho - 1, 4), len(rows))

    def to_json(self) -> dict[str, float]:
        return {"rate": self.rate, "weight": self.weight, "revisions": self.revisions}


@dataclass(frozen=True)
class Change:
    """What a probe says about a revision's true change of score against its base (the change over the whole
    distribution the examples come from, not over one split): its posterior ``mean`` (shrunk towards 0), ``std``,
    and ``pair_variance``, the expected variance of one example's paired difference (what scoring the revision
    and its base on the same examples measures, example by example)."""

    mean: float
    std: float
    pair_variance: float


def estimate_change(differences: list[float], prior: ChangePrior) -> Change:
    """The ``Change`` a probe's per-example ``differences`` (revision minus base) support: a Dirichlet
    posterior over gained / lost / same, with ``prior`` as pseudo-examples (weight x rate squared changes, mean 0),
    so a quiet probe of 8 examples still allows a change of about 1 in 20. With no prior it is the usual standard
    error of a mean paired difference (with n + 1 for n)."""
    total = len(differences) + prior.weight
    if total <= 0:
        return Change(0.0, 0.0, 0.0)
    second = (sum(d * d for d in differences) + prior.weight * prior.rate) / total
    mean = sum(differences) / total
    pair_variance = max(0.0, second - mean * mean)
    return Change(mean, math.sqrt(pair_variance / (total + 1)), pair_variance)


@dataclass(frozen=True)
class Spread:
    """How far this run's evaluated predictions landed from their prediction, in units of their probe std, beyond
    what measuring them on a few validation examples explains: ``scale`` solves mean(miss^2 - sampling variance) =
    scale^2 x mean(std^2) over ``pairs`` evaluated predictions, with ``prior`` pseudo-pairs at scale 1 (so a few
    lucky pairs cannot shrink it much), clipped to [0.5, 3]. A probe's std times ``scale`` is its calibrated
    uncertainty."""

    scale: float = 1.0
    pairs: int = 0

    @classmethod
    def fit(cls, misses: Iterable[tuple[float, float, float]], *, prior: float = 2.0) -> Spread:
        """``misses``: (actual - predicted, probe std, sampling variance of the actual) per evaluated prediction."""
        rows = [(miss, std, sampling) for miss, std, sampling in misses if std > 0]
        if not rows:
            return cls()
        typical = sum(std * std for _, std, _ in rows) / len(rows)
        excess = sum(miss * miss - sampling for miss, _, sampling in rows) + prior * typical
        squared = excess / (sum(std * std for _, std, _ in rows) + prior * typical)
        return cls(round(math.sqrt(min(9.0, max(0.25, squared))), 4), len(rows))

    def to_json(self) -> dict[str, float]:
        return {"scale": self.scale, "pairs": self.pairs}


class Prober:
    """Runs harness sources on the probe split; results are memoised by source (the model's cache does the rest)."""

    def __init__(
        self,
        task: Task,
        model: ModelClient | str,
        *,
        size: int = 12,
        seed: int = 0,
        workers: int | None = None,
        folder: str | Path | None = None,
    ) -> None:
        self.held_out = HeldOutTask(task, size, seed=seed)
        self.model = model
        self.workers = workers
        # Without a folder the probe files live in a temporary one, removed with this object.
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if folder is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="metaharness-probe-")
            folder = self._tmp.name
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._memo: dict[str, ProbeResult] = {}
        self._requests: set[str] = set()  # every call request this prober made (see ProbeResult.new_tokens)
        self.runs = 0  # sources actually evaluated (not memoised)
        # What the probes may spend and have spent (the proposer sets the iteration's: RunState.predicting).
        self.meter = Meter()
        self._tokens_per_example = 0.0  # charged tokens per probe example so far (to estimate the next probe)

    @property
    def size(self) -> int:
        return len(self.held_out.probe)

    def known(self, source: str) -> bool:
        """Whether ``source`` was probed already (a further ``run`` is free)."""
        return hashlib.sha256(source.encode()).hexdigest() in self._memo

    def estimate(self) -> Spend:
        """What probing a new source is expected to cost: every probe example, at the charged tokens per example
        the probes have cost so far."""
        return Spend(float(self.size), self.size * self._tokens_per_example, 0.0)

    def affords(self, source: str) -> bool:
        """Whether ``source`` can be probed now: it was probed before (free), or the meter affords a new probe."""
        return self.known(source) or self.meter.affords(self.estimate())

    def run(self, source: str) -> ProbeResult:
        """``source`` on the probe examples (memoised); `PredictionBudgetSpent` when the meter cannot afford it."""
        # Here: `python -m metaharness.proposers.agent_sandbox` imports this package, and must not load the evaluator.
        from metaharness.evaluation import evaluate

        key = hashlib.sha256(source.encode()).hexdigest()
        if key not in self._memo:
            if not self.meter.affords(self.estimate()):
                raise PredictionBudgetSpent(
                    f"a probe of {self.size} training examples would pass what this iteration's predictions may "
                    f"still spend ({self.meter.left()})"
                )
            path = self.folder / key[:16] / HARNESS_FILE
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source, encoding="utf-8")
            report = evaluate(path, self.held_out, "probe", model=self.model, workers=self.workers)
            self.runs += 1
            charged = Spend(
                float(report.cost.get("charged_examples", 0)),
                float(report.cost.get("charged_tokens", 0)),
                float(report.cost.get("usd", 0.0)),
            )
            self.meter.charge(charged)
            if charged.evals:
                self._tokens_per_example = max(self._tokens_per_example, charged.tokens / charged.evals)
            new_tokens = 0.0
            for call in (call for record in report.records for call in record.calls):
                request = request_key(call)
                if request not in self._requests:
                    self._requests.add(request)
                    new_tokens += _call_tokens(call)
            self._memo[key] = ProbeResult(
                predictions={r.id: r.prediction for r in report.records},
                correct={r.id: float(r.scores.get("primary", 0.0)) for r in report.records},
                errors={r.id: r.error for r in report.records if r.error},
                tokens=float(report.cost.get("input_tokens", 0)) + float(report.cost.get("output_tokens", 0)),
                context_tokens=float(report.cost.get("context_tokens", 0)),
                records=list(report.records),
                new_tokens=new_tokens,
            )
        return self._memo[key]
