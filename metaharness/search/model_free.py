"""Free and exact: a program whose outputs do not depend on the model's answers is scored with no model call.

A harness may call the task model and then ignore what it says (a vote of the nearest training examples' labels
that gives the model's own answer no weight, a classifier, a lookup): every example it is scored on then buys a
model call that cannot change the score. `ModelFreeCheck` finds such programs before anything is spent: it runs
the program in the sandbox with stand-in models (`metaharness.models.stand_in.StandInClient`) that answer every
request differently, salt after salt, and compares the outputs example by example:

1. a screen: ``SCREEN`` examples under two salts; one output that differs settles it (model-dependent), which is
   what most programs show at once;
2. otherwise every example under ``SALTS`` salts (the screen's runs reused). Outputs the same under every salt, on
   every example: the program is *model-free* there, and the first salt's run is its evaluation, recorded with no
   model call and nothing charged (``Evaluation.model_free``).

It is a check on every example it scores, not a guess from a few: a judge on held-out examples or the test split
runs it again on those. The answers a stand-in gives are ones a harness can read (the request's own assistant
turns, the run's recorded responses, the task's training answers), so the code that reads an answer runs; a
program that reads only one exotic form of answer that none of the salts gives could pass where it should not,
which is why three salts and every example are asked. Costs: sandbox time only, in ``ModelFree.seconds`` (the
loop reports it per iteration); no token, no dollar.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from metaharness.candidate import Evaluation
from metaharness.candidates.protocol import HARNESS_FILE
from metaharness.evaluation.protocol import CandidateEvaluator, CandidateFailed
from metaharness.models.stand_in import StandInClient
from metaharness.store.files import atomic_write_text, read_jsonl

SCREEN = 3  # examples of the first look under two salts
SALTS = 3  # stand-ins every example of a model-free program is run with
MAX_ANSWERS = 200  # answers a stand-in picks from (besides the request's own assistant turns)


@dataclass(frozen=True)
class ModelFree:
    """What the check found on the examples asked: ``evaluation`` (the first salt's, with nothing charged) and
    ``trace`` (its records) when the program is model-free there, else None; ``seconds`` of sandbox time and
    ``runs`` (sandbox evaluations) it took."""

    evaluation: Evaluation | None
    trace: Path | None
    seconds: float
    runs: int

    @property
    def model_free(self) -> bool:
        return self.evaluation is not None


Evaluators = Callable[[StandInClient], CandidateEvaluator]


class ModelFreeCheck:
    """Runs the check of the module docstring. ``evaluator_for(client)``: the run's evaluator over a stand-in;
    ``answers``: the answers stand-ins pick from (the task's training answers; ``learn`` adds recorded responses);
    ``folder``: where programs and records are written; ``context_window``: the real model's."""

    def __init__(
        self, evaluator_for: Evaluators, answers: Sequence[str], folder: Path, context_window: int | None = None
    ) -> None:
        self.evaluator_for = evaluator_for
        self.answers = list(dict.fromkeys(answers))
        self.folder = Path(folder)
        self.context_window = context_window
        self._runs = 0

    def learn(self, responses: Sequence[str]) -> None:
        """Add responses the real model gave (the forms of answer harnesses were written to read), up to
        ``MAX_ANSWERS`` answers in all; the first ones are kept."""
        for text in responses:
            if len(self.answers) >= MAX_ANSWERS:
                return
            if isinstance(text, str) and text.strip() and text not in self.answers:
                self.answers.append(text)

    def __call__(self, source: str, examples: Sequence[str], split: str = "val") -> ModelFree:
        """The check of ``source`` on ``examples`` (ids of ``split``)."""
        started, runs = time.monotonic(), 0
        folder = self.folder / hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        harness = folder / HARNESS_FILE
        atomic_write_text(harness, source)
        ids = list(dict.fromkeys(examples))
        screen, rest = ids[:SCREEN], ids[SCREEN:]

        def run(salt: int, part: list[str]) -> tuple[Evaluation, Path] | None:
            nonlocal runs
            if not part:
                return None
            runs += 1
            self._runs += 1
            path = folder / f"{split}-{self._runs}-salt{salt}.jsonl"
            evaluator = self.evaluator_for(StandInClient(self.answers, salt, self.context_window))
            return evaluator.evaluate(harness, split, trace_path=path, examples=part), path

        def done(found: tuple[Evaluation, Path] | None = None) -> ModelFree:
            evaluation, trace = found if found is not None else (None, None)
            return ModelFree(evaluation, trace, round(time.monotonic() - started, 3), runs)

        try:
            first = [run(0, screen), run(1, screen)]
            if not ids or _differ(first):
                return done()
            whole = [run(0, rest), run(1, rest)]
            if rest and _differ(whole):
                return done()
            last = run(2, ids)
            if _differ([_joined(first[0], whole[0], folder / "joined.jsonl"), last]):
                return done()
        except CandidateFailed:
            return done()
        joined = _joined(first[0], whole[0], folder / f"{split}-{self._runs}-model-free.jsonl")
        assert joined is not None
        evaluation, trace = joined
        return done((dataclasses.replace(evaluation, model_free=True), trace))


def _outputs(found: tuple[Evaluation, Path] | None) -> dict[str, str]:
    return record_outputs(read_jsonl(found[1])) if found is not None else {}


def record_outputs(records: Sequence[dict[str, object]]) -> dict[str, str]:
    """Example id -> output of each record (its ``prediction`` as JSON; an error as ``error: ...``): what two runs
    are compared by."""
    out: dict[str, str] = {}
    for record in records:
        if isinstance(record.get("id"), str):
            error = record.get("error")
            out[str(record["id"])] = f"error: {error}" if error else json.dumps(record.get("prediction"))
    return out


def _differ(runs: Sequence[tuple[Evaluation, Path] | None]) -> bool:
    """Whether two runs over the same examples gave some example different outputs."""
    a, b = (_outputs(r) for r in runs)
    return a.keys() != b.keys() or any(a[i] != b[i] for i in a)


def _joined(
    head: tuple[Evaluation, Path] | None, tail: tuple[Evaluation, Path] | None, path: Path
) -> tuple[Evaluation, Path] | None:
    """Two runs of one salt over consecutive parts as one: the evaluation merged and the records in one file."""
    if head is None or tail is None:
        return head or tail
    evaluation = head[0].merge(tail[0])
    lines = [p.read_text(encoding="utf-8") for p in (head[1], tail[1])]
    atomic_write_text(path, "".join(text if text.endswith("\n") or not text else text + "\n" for text in lines))
    return evaluation, path
