"""The lines of ``summary.jsonl``, the run's machine-readable log: one typed record per kind of line.

A record's ``to_json`` is the line as it is written (``type`` first in meaning, every key sorted on
disk; the run journal adds the ``time``), in the format ``docs/run-directory.md`` documents. Lines are read back as
written (``metaharness.store.protocol.RunJournal.log_records``): a log holds lines of older versions too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import ClassVar

from metaharness import frontier
from metaharness.budget import Budget, Spend
from metaharness.candidate import Candidate, Evaluation, Prediction


def _json(value: object) -> object:
    """A field's value as JSON."""
    if isinstance(value, Evaluation):
        return value.to_dict()
    if isinstance(value, (Prediction, Spend)):
        return value.to_json()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple):
        return list(value)
    return value


@dataclass(frozen=True)
class _Line:
    """A line of the log: ``{"type": kind, <every field by its name>}``."""

    kind: ClassVar[str]

    def to_json(self) -> dict[str, object]:
        return {"type": self.kind, **_flat(self)}


@dataclass(frozen=True)
class StartLine(_Line):
    """A session began: the settings it resolved, the iterations it runs to, what the run had spent before it."""

    kind: ClassVar[str] = "start"
    settings: Mapping[str, object]
    iterations: int
    spent_before: Mapping[str, float]


@dataclass(frozen=True)
class CandidateLine(_Line):
    """A candidate was committed (as it stood then: implemented, failed, or evaluated)."""

    kind: ClassVar[str] = "candidate"
    id: str
    parent: str | None
    iteration: int
    status: str
    score: float
    evaluation: Evaluation | None
    prediction: Prediction | None
    error: str | None
    summary: str

    @classmethod
    def of(cls, candidate: Candidate) -> CandidateLine:
        c = candidate
        return cls(c.id, c.parent, c.iteration, c.status, c.score, c.evaluation, c.prediction, c.error, c.summary)


@dataclass(frozen=True)
class EvaluationLine(_Line):
    """A committed candidate's evaluation was continued: in ``iteration``, ``added`` examples for ``spend``, so
    that it is now scored ``score`` on ``examples`` of its ``share`` (``supported``: all of them)."""

    kind: ClassVar[str] = "evaluation"
    id: str
    iteration: int
    examples: int
    share: int
    added: int
    score: float
    spend: Spend
    supported: bool


@dataclass(frozen=True)
class FailureLine(_Line):
    """A committed candidate turned out unable to run (``error`` says why); it is failed from then on."""

    kind: ClassVar[str] = "failure"
    id: str
    error: str | None


@dataclass(frozen=True)
class SplitLine(_Line):
    """A candidate's result on another split than the search's (``type`` is the split: ``test``, ``holdout``)."""

    kind: ClassVar[str] = "split"
    split: str
    id: str
    evaluation: Evaluation

    def to_json(self) -> dict[str, object]:
        return {"type": self.split, "id": self.id, "evaluation": self.evaluation.to_dict()}


@dataclass(frozen=True)
class IterationFacts:
    """What the candidates tell of an iteration: its candidates (``candidates``: their ids) and how many of them
    are evaluated, implemented and failed; the best candidate, its score and the Pareto front."""

    iteration: int
    candidates: Sequence[str]
    evaluated: int
    implemented: int
    failed: int
    best: str | None
    best_score: float | None
    frontier: Sequence[str]

    @classmethod
    def of(cls, iteration: int, candidates: Sequence[Candidate]) -> IterationFacts:
        """The facts of ``iteration``, the best and the front taken over ``candidates``."""
        mine = [c for c in candidates if c.iteration == iteration]
        best = frontier.best(list(candidates))
        return cls(
            iteration=iteration,
            candidates=[c.id for c in mine],
            evaluated=sum(c.evaluated for c in mine),
            implemented=sum(c.implemented for c in mine),
            failed=sum(c.failed for c in mine),
            best=best.id if best else None,
            best_score=best.score if best else None,
            frontier=[c.id for c in frontier.pareto_front(list(candidates))],
        )


# What an iteration's task-model calls were for: the proposer's predictions (probes), the checks of new
# candidates, the evaluation on validation examples.
PHASES = ("predict", "check", "measure")


@dataclass(frozen=True)
class PhaseSpendLine(_Line):
    """What one phase of an iteration (``predict`` or ``check``; see `PHASES`) spent of the iteration's budget,
    written as soon as it is known (several lines of one phase add up: a rerun after a stop writes its own)."""

    kind: ClassVar[str] = "phase"
    iteration: int
    phase: str
    spend: Spend


@dataclass(frozen=True)
class Identical:
    """Candidates whose outputs equal an earlier candidate's on every example they were scored on (``same_as``:
    candidate -> the earlier one) and the example-evaluations an iteration charged to them (``charged``)."""

    charged: float
    same_as: Mapping[str, str]


@dataclass(frozen=True)
class FreeChecks:
    """What an iteration's model-free checks cost (``metaharness.search.model_free``): the ``candidates`` checked,
    how many were ``model_free``, the sandbox ``runs`` and their ``seconds`` (no token, no dollar)."""

    candidates: int = 0
    model_free: int = 0
    runs: int = 0
    seconds: float = 0.0

    def add(self, seconds: float, runs: int, model_free: bool) -> FreeChecks:
        return FreeChecks(
            self.candidates + 1, self.model_free + int(model_free), self.runs + runs, round(self.seconds + seconds, 3)
        )

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class StagingReport:
    """What an iteration's staged evaluation did: the ``policy`` that decided, the candidates it ``considered``,
    the examples each scored candidate had before and after (``allotted``), the examples each new candidate was
    scored on for free from recorded calls (``replayed``), the summed predicted cost of the stages it chose and
    what the iteration's evaluation spent (``cost``: ``predicted``, ``realised``), what the whole iteration spent
    by phase (``spend``: ``predict``, ``check``, ``measure``; one budget covers them), the ``budget`` the first
    decision had (what the predictions and checks left), its ``reference`` candidate and ``calibration``, what
    the baselines would have done (``alternatives``), and each round's decision (``rounds``); the new candidates
    scored with no model call because their outputs do not depend on the model's answers (``model_free``, with
    what the checks cost: ``checks``), and the example-evaluations charged to candidates whose outputs are
    identical to an earlier candidate's on every example they were scored on (``identical``: ``charged``, and
    ``same_as``: candidate -> the earlier one, however it was scored)."""

    policy: str
    considered: Sequence[str]
    allotted: Mapping[str, tuple[int, int]]
    predicted: Spend
    realised: Spend
    budget: Budget
    reference: str | None
    calibration: Mapping[str, object]
    alternatives: Mapping[str, Mapping[str, int]]
    rounds: Sequence[Mapping[str, object]]
    spend: Mapping[str, Spend] = field(default_factory=dict)
    replayed: Mapping[str, int] = field(default_factory=dict)
    model_free: Mapping[str, int] = field(default_factory=dict)
    checks: FreeChecks = field(default_factory=FreeChecks)
    identical: Identical = field(default_factory=lambda: Identical(0.0, {}))

    def to_json(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "considered": list(self.considered),
            "allotted": {cid: list(examples) for cid, examples in self.allotted.items()},
            "replayed": dict(self.replayed),
            "model_free": dict(self.model_free),
            "checks": self.checks.to_json(),
            "identical": {"charged": self.identical.charged, "same_as": dict(self.identical.same_as)},
            "cost": {"predicted": self.predicted.to_json(), "realised": self.realised.to_json()},
            "spend": {phase: self.spend.get(phase, Spend()).to_json() for phase in PHASES},
            "budget": self.budget.to_json(),
            "reference": self.reference,
            "calibration": dict(self.calibration),
            "alternatives": {name: dict(targets) for name, targets in self.alternatives.items()},
            "rounds": [dict(r) for r in self.rounds],
        }


@dataclass(frozen=True)
class IterationLine(_Line):
    """An iteration finished: its ``IterationFacts``, the best's score on the held-out examples (None until the
    held-out examples have judged it, which they do once the last iteration is done), what the run had spent, and
    what its staged evaluation did (``StagingReport``); the facts and the staging are written as keys of the line
    itself."""

    kind: ClassVar[str] = "iteration"
    facts: IterationFacts
    holdout: float | None
    spent: Mapping[str, float]
    staging: StagingReport
    seconds: float

    def to_json(self) -> dict[str, object]:
        line = {**_flat(self.facts), **super().to_json(), **self.staging.to_json()}
        del line["facts"], line["staging"]
        return line


@dataclass(frozen=True)
class RebuiltIterationLine(_Line):
    """A finished iteration's line as git can tell it, written where the log had lost it (``rebuilt`` says so):
    its ``IterationFacts`` among the candidates up to it, as they stand now."""

    kind: ClassVar[str] = "iteration"
    facts: IterationFacts
    rebuilt: str

    def to_json(self) -> dict[str, object]:
        line = {**_flat(self.facts), **super().to_json()}
        del line["facts"]
        return line


def _flat(record: _Line | IterationFacts) -> dict[str, object]:
    """Every field of ``record`` by its name, as JSON."""
    return {f.name: _json(getattr(record, f.name)) for f in fields(record)}


@dataclass(frozen=True)
class StopLine(_Line):
    """The session stopped before its last iteration (a cap reached, Ctrl-C, an outage, the proposer failing)."""

    kind: ClassVar[str] = "stop"
    reason: str
    spent: Mapping[str, float]


@dataclass(frozen=True)
class ProposerFailureLine(_Line):
    """The proposer raised in ``iteration``; nothing was committed and the iteration is asked again."""

    kind: ClassVar[str] = "proposer_failure"
    iteration: int
    proposer_error: str
    proposer_traceback: str
    spent: Mapping[str, float]


@dataclass(frozen=True)
class TestSkippedLine(_Line):
    """The test split could not be evaluated (``reason``)."""

    kind: ClassVar[str] = "test_skipped"
    reason: str


@dataclass(frozen=True)
class JudgementLine(_Line):
    """What the search bought, on the ``examples`` held out to judge it (``metaharness.search.judgement``): each
    contestant's score there (``scores``: name -> {id, score}) and the returned candidate's paired difference over
    the others with 95% intervals (``comparisons``), after ``iteration``."""

    kind: ClassVar[str] = "judgement"
    iteration: int
    examples: int
    scores: Mapping[str, Mapping[str, object]]
    comparisons: Sequence[Mapping[str, object]]
    baseline: Mapping[str, object]


LogLine = (
    StartLine
    | CandidateLine
    | EvaluationLine
    | FailureLine
    | SplitLine
    | IterationLine
    | PhaseSpendLine
    | RebuiltIterationLine
    | StopLine
    | ProposerFailureLine
    | TestSkippedLine
    | JudgementLine
)
