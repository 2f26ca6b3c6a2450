"""Free and exact: what a program outputs where the model's answers cannot change it is scored with no model call.

A harness may call the task model and then ignore what it says (a vote of the nearest training examples' labels
that gives the model's own answer no weight, a classifier, a lookup), everywhere or on some examples (a classifier
that lets the model break near-ties only). Each such example would buy a model call that cannot change its score.
`ModelFreeCheck` finds them before anything is spent: it runs the program once in the sandbox on every example
``SALTS`` times over (`Repeated`), through a stand-in model (`metaharness.models.stand_in.StandInClient`) that
answers each repeat of a request differently, and compares the outputs example by example. An example is *free*
when its outputs are the same under every answer, its calls as many each time (a harness that memoises its calls is
not taken at its word) and no error came after a call (a stand-in's answer may break what the model's would not):
its output does not depend on the model there, and the first pass's record is its result, with no model call and
nothing charged. A program free on every example asked is *model-free* (``Evaluation.model_free``): the loop
scores its whole share so, the held-out examples too.

It is a check on every example it scores, not a guess from a few: the judge examples are checked again when a
model-free candidate is scored on them. The answers a stand-in gives are ones a harness can read (the request's own
assistant turns first, the run's recorded responses, the task's training answers), so the code that reads an
answer runs; a program that reads only one exotic form of answer that none of the three answers takes could pass
where it should not. Costs: one sandbox evaluation (one ``__init__``, three predictions per example), in
``ModelFree.seconds``; no token, no dollar. A program checked again on the same examples with the same answers to
give (the proposer's prediction of a revision, then the loop's check of the committed candidate) gets the first
check's result at no cost (``seconds`` 0, ``runs`` 0). `ModelFreeCheck.prefetch` runs the checks of several programs
at once, one per CPU (each is one sandbox process), so that the calls that follow find them done.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from metaharness.candidate import Evaluation
from metaharness.candidates.protocol import HARNESS_FILE
from metaharness.evaluation.protocol import CandidateEvaluator, CandidateFailed
from metaharness.models.stand_in import StandInClient
from metaharness.search.replay import free_evaluation
from metaharness.store.files import atomic_write_text, read_jsonl
from metaharness.tasks.protocol import Example, Task

SALTS = 3  # answers every example's calls get, one per pass
MAX_ANSWERS = 200  # answers a stand-in picks from (besides the request's own assistant turns)


@dataclass(frozen=True)
class ModelFree:
    """What the check found on the examples asked: ``evaluation`` over the free examples (nothing charged) and
    ``trace`` (their records), None when none is free; ``model_free`` when every example asked is free; the
    ``seconds`` of sandbox time it took; ``load_error`` when the program did not load over the stand-in (its
    ``__init__`` may have read a stand-in's answer the real model would not give: only a load with the real model
    says it cannot run)."""

    evaluation: Evaluation | None
    trace: Path | None
    model_free: bool
    seconds: float
    runs: int = 1
    load_error: str | None = None

    @property
    def free(self) -> tuple[str, ...]:
        """The examples whose outputs do not depend on the model's answers."""
        return tuple(self.evaluation.example_ids) if self.evaluation is not None else ()


Evaluators = Callable[[Task, StandInClient], CandidateEvaluator]
REPEAT = "#pass"  # an example's id in the check's repeated view: ``<id>#pass<k>``
Key = tuple[str, str, tuple[str, ...], int]  # a check: the program's digest, split, example ids, answers known


class Repeated:
    """``task`` with every example of a scored split repeated ``times`` over (ids ``<id>#pass<k>``, all of pass 0
    first), so one evaluation asks each example under several answers; the training split is the task's."""

    def __init__(self, task: Task, times: int) -> None:
        self.task, self.times = task, times
        self.name, self.description = task.name, task.description

    def load(self, split: str) -> list[Example]:
        examples = self.task.load(split)
        if split == "train":
            return examples
        return [dataclasses.replace(e, id=f"{e.id}{REPEAT}{k}") for k in range(self.times) for e in examples]

    def score(self, prediction: str, example: Example) -> dict[str, float]:
        return self.task.score(prediction, example)

    def metric_names(self) -> list[str]:
        return self.task.metric_names()


class ModelFreeCheck:
    """Runs the check of the module docstring on ``task``. ``evaluator_for(task, client)``: the run's evaluator on a
    task over a stand-in (one example in flight, so one harness answers every pass); the stand-ins pick from the
    task's training answers (``learn`` adds recorded responses); ``folder``: where programs and records are
    written; ``context_window``: the real model's."""

    def __init__(self, task: Task, evaluator_for: Evaluators, folder: Path, context_window: int | None = None) -> None:
        self.plain_task = task
        self.task = Repeated(task, SALTS)
        self.evaluator_for = evaluator_for
        self.answers = list(dict.fromkeys(e.target for e in task.load("train")))
        self.folder = Path(folder)
        self.context_window = context_window
        self._runs = 0
        self._lock = threading.Lock()  # prefetching threads number their records from ``_runs``
        self._memo: dict[Key, ModelFree] = {}
        self._paid: set[Key] = set()  # checks whose cost a call has returned

    def on(self, view: Task, folder: Path) -> ModelFreeCheck:
        """The same check on another view of the task (``view``'s training split is what a program is built on),
        with the answers this one has learnt, its records under ``folder``."""
        other = ModelFreeCheck(view, self.evaluator_for, folder, self.context_window)
        other.answers = list(self.answers)
        return other

    def learn(self, responses: Sequence[str]) -> None:
        """Add responses the real model gave (the forms of answer harnesses were written to read), up to
        ``MAX_ANSWERS`` answers in all; the first ones are kept."""
        for text in responses:
            if len(self.answers) >= MAX_ANSWERS:
                return
            if isinstance(text, str) and text.strip() and text not in self.answers:
                self.answers.append(text)

    def __call__(self, source: str, examples: Sequence[str], split: str = "val") -> ModelFree:
        """The check of ``source`` on ``examples`` (ids of ``split``); a repeated check is the first one's result
        (the module docstring)."""
        key = self._key(source, examples, split)
        if key not in self._memo:
            self._memo[key] = self._check(source, key)
        if key in self._paid:
            return dataclasses.replace(self._memo[key], seconds=0.0, runs=0)
        self._paid.add(key)
        return self._memo[key]

    def prefetch(self, programs: Sequence[tuple[str, Sequence[str]]], split: str = "val") -> None:
        """Run the checks of ``programs`` ((source, example ids) pairs) not made yet, one per CPU at a time; the
        call that then asks for each gets its result and its cost. An error in a check is raised here."""
        todo = {self._key(source, examples, split): source for source, examples in programs}
        todo = {key: source for key, source in todo.items() if key not in self._memo}
        if len(todo) < 2:
            return
        with ThreadPoolExecutor(max_workers=min(len(todo), os.cpu_count() or 1)) as pool:
            done = {key: pool.submit(self._check, source, key) for key, source in todo.items()}
        for key, future in done.items():
            self._memo[key] = future.result()

    def _key(self, source: str, examples: Sequence[str], split: str) -> Key:
        digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
        return digest, split, tuple(dict.fromkeys(examples)), len(self.answers)  # answers are only ever appended

    def _check(self, source: str, key: Key) -> ModelFree:
        started = time.monotonic()
        digest, split, examples, _ = key
        ids = list(examples)
        folder = self.folder / digest[:16]
        harness = folder / HARNESS_FILE
        with self._lock:
            atomic_write_text(harness, source)
            self._runs += 1
            path = folder / f"{split}-{self._runs}.jsonl"
        trace = path.with_suffix(".free.jsonl")
        evaluator = self.evaluator_for(self.task, StandInClient(self.answers, 0, self.context_window, repeats=True))
        asked = [f"{i}{REPEAT}{k}" for k in range(SALTS) for i in ids]
        load_error = None
        try:
            evaluation = evaluator.evaluate(harness, split, trace_path=path, examples=asked) if ids else None
        except CandidateFailed as failed:
            evaluation, load_error = None, str(failed)
        seconds = round(time.monotonic() - started, 3)
        runs: dict[str, list[dict[str, object]]] = {}
        for record in read_jsonl(path) if evaluation is not None else []:
            original = str(record.get("id")).rsplit(REPEAT, 1)[0]
            runs.setdefault(original, []).append({**record, "id": original})
        free = [runs[i][0] for i in ids if _same(runs.get(i, []))]
        if evaluation is None or not free:
            return ModelFree(None, None, False, seconds, load_error=load_error)
        atomic_write_text(trace, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in free))
        whole = len(free) == len(ids)
        kept = free_evaluation(evaluation, free, answered="stand_in_calls")
        return ModelFree(dataclasses.replace(kept, model_free=whole), trace, whole, seconds)


def _same(records: Sequence[dict[str, object]]) -> bool:
    """Whether an example's ``SALTS`` records agree: one output, as many calls each time, and no error after a
    call (an error may come from a stand-in's answer, e.g. one that is no JSON: the real model's may not raise)."""
    if len(records) != SALTS:
        return False
    calls = {len(c) if isinstance(c := r.get("calls"), list) else 0 for r in records}
    if any(r.get("error") for r in records) and calls != {0}:
        return False
    return len(set(record_outputs(records, keyed=False).values())) == 1 and len(calls) == 1


def record_outputs(records: Sequence[dict[str, object]], *, keyed: bool = True) -> dict[str, str]:
    """Example id -> output of each record (its ``prediction`` as JSON; an error as ``error: ...``): what two runs
    are compared by (``keyed`` False: by the records' positions instead, for repeats of one example)."""
    out: dict[str, str] = {}
    for k, record in enumerate(records):
        if isinstance(record.get("id"), str):
            error = record.get("error")
            key = str(record["id"]) if keyed else str(k)
            out[key] = f"error: {error}" if error else json.dumps(record.get("prediction"))
    return out
