"""The test split at the end of a run: scored within a stated bound, in stages that Ctrl-C can stop, and never twice.

What is scored: the best candidate, then the other members of the Pareto front (score vs. context vs. cost), each on
the first ``n`` examples of the test split, in split order: ``TestSplit.limit`` examples (``metaharness optimize
--test-limit N``), the whole split with ``TestSplit(whole=True)`` (``--test-limit all``), and by default as many as
the search scores each candidate on (its share of the validation examples, ``--val-limit``): a small trial run gets
a small test, and the test of each candidate costs at most what one full validation evaluation of it costs.
``--no-test`` scores nothing.

How: in stages of ``STAGE`` examples (about the examples in flight). Each stage's result is saved, merged with the
candidate's earlier stages (``evals/<id>.test.json``, its note, a ``test`` line in ``summary.jsonl``), before the next
starts, and the stop request is checked between stages: Ctrl-C stops the test split once the examples in flight are
scored and saved, and a rerun continues where it stopped, with a note saying so.

Never twice: a candidate scored on its ``n`` examples is not scored again. A rerun of a finished run scores nothing
and says which results it kept (``store.test_result``); to score a candidate again, delete its
``evals/<id>.test.json``. A larger ``--test-limit`` on a rerun scores only the examples not yet scored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from metaharness import frontier
from metaharness.candidate import Candidate, Evaluation
from metaharness.errors import InputError
from metaharness.evaluation.protocol import CandidateEvaluator, Progress
from metaharness.search.traces import merge_trace
from metaharness.store.crash import crash_point
from metaharness.store.log import TestSkippedLine
from metaharness.store.protocol import RunStore

# Test examples scored (and saved) between two checks of the stop request.
STAGE = 8


@dataclass(frozen=True)
class TestSplit:
    """How a session scores the test split (the module docstring): at most ``limit`` examples per candidate, the
    whole split when ``whole``, else (neither given) as many as the search's validation examples."""

    __test__ = False  # not a pytest test class
    limit: int | None = None
    whole: bool = False

    @classmethod
    def parse(cls, text: str) -> TestSplit:
        """``--test-limit``'s value: ``all`` (the whole split) or a whole number >= 1."""
        if text.strip().lower() == "all":
            return cls(whole=True)
        if not text.strip().isdigit() or int(text) < 1:
            raise InputError(f"--test-limit takes a number of examples >= 1 or 'all', got '{text}'.")
        return cls(limit=int(text))

    @classmethod
    def of(cls, test: bool | TestSplit) -> TestSplit | None:
        """A session's ``test`` setting as a ``TestSplit`` (``True``: the default bound; ``False``: none)."""
        if isinstance(test, TestSplit):
            return test
        return cls() if test else None

    def examples(self, validation: int, split_size: int) -> int:
        """How many of the split's ``split_size`` examples each candidate is scored on, in a run whose search scores
        candidates on ``validation`` examples."""
        if self.whole:
            return split_size
        return min(self.limit if self.limit is not None else validation, split_size)

    def describe(self) -> str:
        """The bound in words, for notes and the dry run."""
        if self.whole:
            return "the whole test split"
        if self.limit is not None:
            return f"at most {self.limit} test examples per candidate"
        return "as many test examples per candidate as the search has validation examples"


class TestEvents(Protocol):
    """What the test split reports (the loop's events)."""

    def note(self, text: str) -> None: ...

    def candidate_started(self, cid: str, split: str, summary: str) -> None: ...


def targets(candidates: list[Candidate]) -> list[Candidate]:
    """The candidates the test split scores: the best, then the rest of the Pareto front."""
    chosen: list[Candidate] = []
    for candidate in [frontier.best(candidates), *frontier.pareto_front(candidates)]:
        if candidate is not None and candidate not in chosen:
            chosen.append(candidate)
    return chosen


def score_test_split(
    store: RunStore,
    evaluator: CandidateEvaluator,
    plan: TestSplit,
    *,
    validation: int,
    stop: Callable[[], None],
    events: TestEvents,
    progress: Progress | None = None,
) -> dict[str, Evaluation]:
    """Score the run's best and Pareto front on the test split as ``plan`` bounds it (the module docstring; the search
    scores candidates on ``validation`` examples); returns every target's saved result. ``stop()`` raises to stop
    between stages; a split this evaluator cannot score is logged (``test_skipped``) and noted, and nothing is
    scored."""
    chosen = targets(store.candidates())
    saved = {c.id: store.test_result(c.id) for c in chosen}
    if not chosen:
        return {}
    reason = evaluator.split_unavailable("test")
    if reason:
        if any(ev is None for ev in saved.values()):
            store.log(TestSkippedLine(reason))
            events.note(f"test split not evaluated: {reason}")
        return {cid: ev for cid, ev in saved.items() if ev is not None}
    split = evaluator.examples("test")
    n = plan.examples(validation, len(split))
    done = [c.id for c in chosen if (ev := saved[c.id]) is not None and ev.examples >= n]
    if done:
        kept = ", ".join(f"{cid} {saved[cid].primary:.3f} on {saved[cid].examples}" for cid in done)  # type: ignore[union-attr]
        events.note(f"test split already scored, kept (delete evals/<id>.test.json to score again): {kept}")
    for candidate in chosen:
        if candidate.id not in done:
            saved[candidate.id] = _score(
                store, evaluator, candidate, split[:n], saved[candidate.id], stop, events, progress
            )
    return {cid: ev for cid, ev in saved.items() if ev is not None}


def _score(
    store: RunStore,
    evaluator: CandidateEvaluator,
    candidate: Candidate,
    ids: list[str],
    evaluation: Evaluation | None,
    stop: Callable[[], None],
    events: TestEvents,
    progress: Progress | None,
) -> Evaluation:
    """Score ``candidate`` on the test examples ``ids`` it has not been scored on, a stage at a time, saving each."""
    scored = evaluation.example_ids if evaluation is not None else []
    if scored:
        events.note(f"test split: continuing {candidate.id} from {len(scored)} of {len(ids)} examples")
    harness = store.work_file(candidate.id, candidate.source)
    trace = store.trace_path(candidate.id, "test")
    part = trace.with_name(f"{candidate.id}.test.part.jsonl")
    already = set(scored)
    todo = [i for i in ids if i not in already]
    for start in range(0, len(todo), STAGE):
        stop()
        stage = todo[start : start + STAGE]
        events.candidate_started(candidate.id, f"test {len(scored) + len(stage)}/{len(ids)}", candidate.summary)
        more = evaluator.evaluate(harness, "test", trace_path=part, progress=progress, examples=stage)
        crash_point("test:evaluated")
        evaluation = evaluation.merge(more) if evaluation is not None else more
        evaluation = dataclasses.replace(evaluation, share=len(ids))
        merge_trace(trace, part, keep=scored)
        store.save_split_result(candidate.id, "test", evaluation)
        scored = evaluation.example_ids
    assert evaluation is not None  # ids holds at least one example the candidate was not scored on
    return evaluation
