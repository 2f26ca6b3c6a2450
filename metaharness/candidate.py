"""A candidate harness: one model shared by the loop, the proposers, the store and the reports.

A ``Candidate`` is a program (its complete source), where it came from (``parent``: the candidate it revises,
``None`` for a seed), why (``summary``, ``hypothesis``, the proposer's ``prediction``), and what its validation run
measured (``Evaluation``, maybe on part of the validation examples so far: see ``Candidate.supported``), or
the ``error`` that made it fail. An ``implemented`` candidate passed the import check and has no score yet: every
proposal is committed so when it is checked (so is an intermediate step of a chosen revision chain A -> B -> C: B,
whose commit makes git's parents the revisions), and the loop's staged evaluation (``metaharness.search.staging``)
then scores it on as many validation examples as it allots. Only a ``supported`` candidate can be
the best. Ids are ``c001``, ``c002``, ... in the order candidates were planned. The store writes a candidate into
its commit and its evaluation into the commit's git note, updated as the evaluation is continued (see
``metaharness.store``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from metaharness.budget import Spend

CANDIDATE_ID = re.compile(r"^c\d{3,}$")

EVALUATED = "evaluated"
FAILED = "failed"
IMPLEMENTED = "implemented"


def candidate_id(number: int) -> str:
    """``c001``, ``c002``, ...: short, sortable, and usable as a git tag name."""
    return f"c{number:03d}"


def id_number(cid: str) -> int:
    return int(cid[1:])


@dataclass(frozen=True)
class Increment:
    """One stage of a staged evaluation: in ``iteration``, ``examples`` more examples for ``spend`` (what the run
    was charged: example-evaluations, tokens, dollars)."""

    iteration: int
    examples: int
    spend: Spend

    def to_dict(self) -> dict[str, Any]:
        return {"iteration": self.iteration, "examples": self.examples, "spend": self.spend.to_json()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Increment:
        return cls(int(data["iteration"]), int(data["examples"]), Spend.from_json(data.get("spend")))


@dataclass
class Evaluation:
    """What a candidate's run on a split measured (aggregates; the per-example records are in the trace).

    A validation evaluation may be *partial*: scored on ``example_ids``, a prefix of the search's example order, out
    of a share of ``share`` examples; continued later by ``merge`` (``increments`` says when each part ran and
    what it cost). ``share`` 0 (an evaluation of a whole split) means the evaluation is complete.
    """

    split: str
    scores: dict[str, float]
    # input_tokens, output_tokens, usd, context_tokens (prompt tokens per example), charged_examples, charged_tokens
    cost: dict[str, float] = field(default_factory=dict)
    examples: int = 0
    errors: int = 0
    seconds: float = 0.0
    example_ids: list[str] = field(default_factory=list)
    # The primary score of each of ``example_ids``, in the same order (what paired comparisons read).
    example_scores: list[float] = field(default_factory=list)
    share: int = 0
    increments: list[Increment] = field(default_factory=list)
    # Scored with no model call: its outputs were the same under stand-in answers (``metaharness.search.model_free``).
    model_free: bool = False
    # Its score on the held-out examples that choose the returned candidate among the search's best
    # (``metaharness.search.staging.ExampleOrder.confirm``), once it was a contender; no proposer ever sees it.
    confirm: Evaluation | None = None
    # A model-free candidate's score by cross-validation on the training examples, with no model call
    # (``metaharness.search.train_folds``), once it was in the running for what the run returns.
    folds: Evaluation | None = None

    @property
    def primary(self) -> float:
        return float(self.scores.get("primary", 0.0))

    @property
    def supported(self) -> bool:
        """Scored on every example of its share: the score can stand for the candidate (be the best, be judged)."""
        return self.examples >= self.share

    def spend(self) -> Spend:
        """What the run was charged for it (a fake or older evaluation without charge counts: every example)."""
        return Spend(
            self.cost.get("charged_examples", float(self.examples)),
            self.cost.get("charged_tokens", self.cost.get("input_tokens", 0.0) + self.cost.get("output_tokens", 0.0)),
            self.cost.get("usd", 0.0),
        )

    def merge(self, more: Evaluation) -> Evaluation:
        """This evaluation continued by ``more`` (other examples of the same split): means weighted by examples,
        costs added (``context_tokens``, a per-example mean, weighted), example ids and increments appended."""
        n = self.examples + more.examples
        weight = (lambda a, b: (a * self.examples + b * more.examples) / n) if n else (lambda a, b: 0.0)
        names = list(dict.fromkeys([*self.scores, *more.scores]))
        cost = {k: self.cost.get(k, 0.0) + more.cost.get(k, 0.0) for k in dict.fromkeys([*self.cost, *more.cost])}
        if "context_tokens" in cost:
            cost["context_tokens"] = weight(self.cost.get("context_tokens", 0.0), more.cost.get("context_tokens", 0.0))
        return Evaluation(
            split=self.split,
            scores={k: weight(self.scores.get(k, 0.0), more.scores.get(k, 0.0)) for k in names},
            cost=cost,
            examples=n,
            errors=self.errors + more.errors,
            seconds=self.seconds + more.seconds,
            example_ids=[*self.example_ids, *more.example_ids],
            example_scores=[*self.example_scores, *more.example_scores],
            share=max(self.share, more.share),
            increments=[*self.increments, *more.increments],
            model_free=self.model_free and more.model_free,
            confirm=more.confirm or self.confirm,
            folds=more.folds or self.folds,
        )

    def to_dict(self) -> dict[str, Any]:
        data = {**asdict(self), "seconds": round(self.seconds, 3)}
        data["increments"] = [i.to_dict() for i in self.increments]
        data["confirm"] = self.confirm.to_dict() if self.confirm is not None else None
        data["folds"] = self.folds.to_dict() if self.folds is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evaluation:
        return cls(
            split=data["split"],
            scores={k: float(v) for k, v in data.get("scores", {}).items()},
            cost={k: float(v) for k, v in data.get("cost", {}).items()},
            examples=int(data.get("examples", 0)),
            errors=int(data.get("errors", 0)),
            seconds=float(data.get("seconds", 0.0)),
            example_ids=[str(i) for i in data.get("example_ids", [])],
            example_scores=[float(x) for x in data.get("example_scores", [])],
            share=int(data.get("share", 0)),
            increments=[Increment.from_dict(i) for i in data.get("increments", [])],
            model_free=bool(data.get("model_free", False)),
            confirm=Evaluation.from_dict(data["confirm"]) if isinstance(data.get("confirm"), dict) else None,
            folds=Evaluation.from_dict(data["folds"]) if isinstance(data.get("folds"), dict) else None,
        )


def _number(value: object) -> float | None:
    """``value`` when it is a JSON number (not a bool), as stored (an int stays an int), else ``None``."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _costs(value: object) -> Mapping[str, float] | None:
    """``value`` when it is an object of numbers by limit name (``{"evals": 1, "tokens": 900, "usd": 0.002}``)."""
    if isinstance(value, dict) and all(isinstance(k, str) and _number(v) is not None for k, v in value.items()):
        return value
    return None


# The keys a Prediction reads into fields, with the check a stored value must pass to be read into its field.
_PREDICTION_FIELDS = {
    "score": _number,
    "std": _number,
    "base": _text,
    "raw_gain": _number,
    "probe_std": _number,
    "pair_variance": _number,
    "cost": _costs,
    "edit_cost": _costs,
    "node": _text,
    "tokens_per_example": _number,
    "usd_per_example": _number,
    "repeat": _number,
}


@dataclass(frozen=True)
class Prediction:
    """What the proposer predicted about a candidate, as its ``prediction`` JSON object holds it.

    Each field is ``None`` when the proposer did not predict it (or stored something else under its key, which then
    stays in ``extra``):

    - ``score``, ``std``: the predicted primary validation score and its standard deviation;
    - ``base``: the candidate the prediction was made from, ``raw_gain`` the predicted gain over it before the
      run's calibration; ``probe_std`` and ``pair_variance`` what a training-example probe measured of that gain;
    - ``cost``: what evaluating the candidate is predicted to cost, by limit (``evals``, ``tokens``, ``usd``);
      ``edit_cost``: what writing the revision is predicted to cost (``tokens``, ``usd``);
    - ``node``: the program-graph node the candidate realises;
    - ``tokens_per_example``, ``usd_per_example``: its predicted task-model cost per validation example;
      ``repeat``: the share of its calls predicted to repeat its parent's (cached, free);
    - ``extra``: every other key exactly as the proposer wrote it (``chain``, ``flips``, ``label``, ...).

    ``from_json`` reads any stored object and ``to_json`` gives it back unchanged, so old runs load as
    they were written.
    """

    score: float | None = None
    std: float | None = None
    base: str | None = None
    raw_gain: float | None = None
    probe_std: float | None = None
    pair_variance: float | None = None
    cost: Mapping[str, float] | None = None
    edit_cost: Mapping[str, float] | None = None
    node: str | None = None
    tokens_per_example: float | None = None
    usd_per_example: float | None = None
    repeat: float | None = None
    extra: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Prediction:
        known: dict[str, Any] = {}
        extra: dict[str, object] = {}
        for key, value in data.items():
            read = _PREDICTION_FIELDS.get(key)
            typed = read(value) if read is not None else None
            if typed is None:
                extra[key] = value
            else:
                known[key] = typed
        return cls(**known, extra=extra)

    def to_json(self) -> dict[str, object]:
        """The JSON object ``from_json`` read (``{}`` for an empty prediction)."""
        known = {key: getattr(self, key) for key in _PREDICTION_FIELDS if getattr(self, key) is not None}
        return {**self.extra, **{k: dict(v) if isinstance(v, Mapping) else v for k, v in known.items()}}


@dataclass(frozen=True)
class PlanEntry:
    """One candidate an iteration will commit, as the iteration's journaled plan holds it: its ``id``, the
    ``parent`` it revises (``None``: a seed, or a fresh program), its program, why (``summary``, ``hypothesis``,
    ``prediction``), the program-graph ``node`` it realises (``None``: none, or one already realised) and whether
    it is to be evaluated (``False``: an intermediate of a revision chain, committed implemented)."""

    id: str
    parent: str | None
    source: str
    summary: str = ""
    hypothesis: str = ""
    prediction: Prediction | None = None
    node: str | None = None
    evaluate: bool = True

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "parent": self.parent,
            "source": self.source,
            "summary": self.summary,
            "hypothesis": self.hypothesis,
            "prediction": self.prediction.to_json() if self.prediction is not None else None,
            "node": self.node,
            "evaluate": self.evaluate,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlanEntry:
        """An entry as any run wrote it (a plan from before chains has no ``node`` and no ``evaluate``)."""
        prediction = data.get("prediction")
        return cls(
            id=data["id"],
            parent=data.get("parent"),
            source=data["source"],
            summary=data.get("summary", ""),
            hypothesis=data.get("hypothesis", ""),
            prediction=Prediction.from_json(prediction) if isinstance(prediction, dict) else None,
            node=data.get("node"),
            evaluate=bool(data.get("evaluate", True)),
        )


@dataclass
class Candidate:
    """One candidate as committed: a program, where it came from, and how it did on validation."""

    id: str
    parent: str | None
    iteration: int
    source: str
    status: str = EVALUATED
    summary: str = ""
    hypothesis: str = ""
    prediction: Prediction | None = None
    error: str | None = None
    evaluation: Evaluation | None = None
    # Per-example validation trace, relative to the run directory (kept beside the repository, not in it).
    trace: str | None = None

    @property
    def failed(self) -> bool:
        return self.status == FAILED

    @property
    def implemented(self) -> bool:
        """Implemented (and import-checked) as a step of a revision chain, not evaluated."""
        return self.status == IMPLEMENTED

    @property
    def evaluated(self) -> bool:
        """Scored on at least one validation example (maybe partly: see ``supported``)."""
        return self.status == EVALUATED and self.evaluation is not None

    @property
    def supported(self) -> bool:
        """Evaluated on every example of the search's share: only such a candidate can be the best."""
        return self.evaluated and self.evaluation is not None and self.evaluation.supported

    @property
    def partial(self) -> bool:
        """Evaluated on part of the search's share so far."""
        return self.evaluated and not self.supported

    @property
    def score(self) -> float:
        """The primary validation score (higher is better); a failed, implemented or unevaluated candidate counts
        as 0."""
        return self.evaluation.primary if self.evaluated and self.evaluation else 0.0

    def result(self, digits: int = 3) -> str:
        """What the candidate's validation result is, as every report, ``history``, ``show`` and git's subjects show
        it: ``failed``, ``implemented`` (checked, not scored), its score (``0.500``), or, for a partly scored
        candidate, its score and on how many examples of its share (``0.667 (3/4)``: not a result yet)."""
        if self.failed:
            return "failed"
        if not self.evaluated or self.evaluation is None:
            return "implemented"
        ev = self.evaluation
        return f"{self.score:.{digits}f}" + ("" if ev.supported else f" ({ev.examples}/{ev.share})")

    @property
    def scores(self) -> dict[str, float]:
        """Every validation metric, ``"primary"`` first; empty before evaluation."""
        return dict(self.evaluation.scores) if self.evaluation else {}

    @property
    def cost(self) -> dict[str, float]:
        """What the validation run cost: ``input_tokens``, ``output_tokens``, ``usd``, ``context_tokens`` (prompt
        tokens per example), ...; empty before evaluation."""
        return dict(self.evaluation.cost) if self.evaluation else {}

    def metadata(self) -> dict[str, Any]:
        """Everything but the program and its evaluation (``candidate.json`` in the candidate's commit)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("source", "evaluation")}
        return {**data, "prediction": self.prediction.to_json() if self.prediction is not None else None}

    def to_dict(self) -> dict[str, Any]:
        """Everything, as JSON (the journal's format for evaluated-but-uncommitted candidates)."""
        return {
            **self.metadata(),
            "source": self.source,
            "evaluation": self.evaluation.to_dict() if self.evaluation else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        evaluation = data.get("evaluation")
        prediction = data.get("prediction")
        return cls(
            id=data["id"],
            parent=data.get("parent"),
            iteration=int(data["iteration"]),
            source=data["source"],
            status=data.get("status", EVALUATED),
            summary=data.get("summary", ""),
            hypothesis=data.get("hypothesis", ""),
            prediction=Prediction.from_json(prediction) if isinstance(prediction, dict) else None,
            error=data.get("error"),
            evaluation=Evaluation.from_dict(evaluation) if evaluation else None,
            trace=data.get("trace"),
        )
