"""Free evidence: a program scored on recorded calls, wherever it makes only calls the run already made.

Most revisions a search tries change what a harness does with the model's answers (parse, snap, vote), not what
it asks. Such a revision makes exactly its parent's calls, so on every example its parent was scored on it can be
scored exactly, without one new model call: the `Replayer` runs it in the sandbox through a
`metaharness.models.replaying.ReplayingClient` (answers only requests the run paid for) and keeps the examples
whose every call was answered. What it measures is evidence, not a guess:

- the proposer reads it (`RunState.replay`) to predict a revision exactly and to merge revisions that behave the
  same on every replayed example before anything is spent on them;
- the loop records it as the committed candidate's first evaluation stage, at no cost, so no policy pays for what
  the run already knows.

Results are kept per program and examples for the session (the proposer's replay is the loop's); a resumed run
replays again, which costs sandbox time only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from metaharness.candidate import Evaluation
from metaharness.candidates.protocol import HARNESS_FILE
from metaharness.evaluation.protocol import CandidateEvaluator, CandidateFailed
from metaharness.models.replaying import NOT_RECORDED
from metaharness.store.files import atomic_write_text


@dataclass(frozen=True)
class Replay:
    """A program on recorded calls: ``evaluation`` over the examples whose every call was answered (None when
    none was), ``outputs`` (those examples' predictions, by id), ``missed`` (the examples with a call the run never
    made, in the order asked) and ``trace`` (the replayed examples' records, one JSON line each)."""

    evaluation: Evaluation | None
    outputs: dict[str, str | None]
    missed: tuple[str, ...]
    trace: Path | None

    @property
    def complete(self) -> bool:
        """Every example asked for was replayed."""
        return not self.missed and self.evaluation is not None

    @property
    def score(self) -> float:
        """The primary score over the replayed examples (0 when none was)."""
        return self.evaluation.primary if self.evaluation is not None else 0.0

    def signature(self) -> str:
        """Equal signatures: the same prediction on every replayed example (and the same examples missed)."""
        text = json.dumps([sorted(self.outputs.items()), list(self.missed)], ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


class Replayer:
    """Scores programs on recorded calls (the module docstring): ``evaluator`` is the run's evaluator over a
    replaying client, ``folder`` where the programs and their records are written."""

    def __init__(self, evaluator: CandidateEvaluator, folder: Path) -> None:
        self.evaluator = evaluator
        self.folder = Path(folder)
        self._memo: dict[tuple[str, tuple[str, ...]], Replay] = {}

    def __call__(self, source: str, examples: Sequence[str]) -> Replay:
        """``source`` on ``examples`` (validation ids), through recorded calls only."""
        ids = tuple(examples)
        digest = hashlib.sha256(source.encode()).hexdigest()
        key = (digest, ids)
        if key not in self._memo:
            self._memo[key] = self._replay(source, ids, digest) if ids else Replay(None, {}, (), None)
        return self._memo[key]

    def _replay(self, source: str, ids: tuple[str, ...], digest: str) -> Replay:
        folder = self.folder / digest[:16]
        harness = folder / HARNESS_FILE
        atomic_write_text(harness, source)
        records_path = folder / f"val-{len(self._memo)}.jsonl"
        try:
            evaluation = self.evaluator.evaluate(harness, "val", trace_path=records_path, examples=list(ids))
        except CandidateFailed:
            return Replay(None, {}, ids, None)
        records = _records(records_path)
        replayed = [r for r in records if not _refused(r)]
        kept_ids = {str(r.get("id")) for r in replayed}
        missed = tuple(i for i in ids if i not in kept_ids)
        if not replayed:
            return Replay(None, {}, missed, None)
        trace = folder / f"val-{len(self._memo)}.replayed.jsonl"
        atomic_write_text(trace, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in replayed))
        outputs = {str(r.get("id")): _text(r.get("prediction")) for r in replayed}
        return Replay(free_evaluation(evaluation, replayed), outputs, missed, trace)


def _records(path: Path) -> list[dict[str, object]]:
    out = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                out.append(value)
    return out


def _calls(record: dict[str, object]) -> list[dict[str, object]]:
    calls = record.get("calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def _scores(record: dict[str, object]) -> dict[str, object]:
    scores = record.get("scores")
    return scores if isinstance(scores, dict) else {}


def _score(record: dict[str, object], name: str) -> float:
    value = _scores(record).get(name, 0.0)
    return float(value) if isinstance(value, (int, float)) else 0.0


def _tokens(call: dict[str, object], key: str) -> int:
    value = call.get(key)
    return int(value) if isinstance(value, (int, float)) else 0


def _refused(record: dict[str, object]) -> bool:
    """Whether an example made a call the run never made (its score says nothing about the program)."""
    return any(isinstance(c.get("error"), str) and NOT_RECORDED in str(c.get("error")) for c in _calls(record))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def free_evaluation(
    evaluation: Evaluation, records: Sequence[dict[str, object]], answered: str = "cached_calls"
) -> Evaluation:
    """``evaluation`` over ``records`` only (in their order): mean scores, summed costs with nothing charged (every
    call was answered for free: ``answered`` counts them, ``cached_calls`` for a replay's repeats), per-example
    scores."""
    n = len(records)
    names = sorted({str(k) for r in records for k in _scores(r)})
    calls = [c for r in records for c in _calls(r)]
    tokens_in = sum(_tokens(c, "input_tokens") for c in calls)
    cost = {
        "input_tokens": float(tokens_in),
        "output_tokens": float(sum(_tokens(c, "output_tokens") for c in calls)),
        "usd": 0.0,
        "context_tokens": tokens_in / n,
        "calls": float(len(calls)),
        answered: float(len(calls)),
        "charged_examples": 0.0,
        "charged_tokens": 0.0,
    }
    return dataclasses.replace(
        evaluation,
        scores={name: sum(_score(r, name) for r in records) / n for name in names} or {"primary": 0.0},
        cost=cost,
        examples=n,
        errors=sum(1 for r in records if r.get("error")),
        example_ids=[str(r.get("id")) for r in records],
        example_scores=[_score(r, "primary") for r in records],
    )
