"""Staged evaluation replayed on recorded runs: every policy at equal total task-model spend, on real outcomes.

    python benchmarks/replay_study.py RUN_DIR [RUN_DIR ...] --out reports/replay/NAME
    python benchmarks/replay_study.py RUN_DIR ... --replicates 40 --judge 0.33 --evals-per-iter 3 --jobs 2
    python benchmarks/replay_study.py RUN_DIR ... --identity both --data-dir DATA   # with and without the check
    python benchmarks/replay_study.py --rewrite reports/replay/NAME   # the summary again, from its results.json

What a recorded run is: a run directory in which every candidate was scored once on every validation example (made
with ``metaharness optimize --evaluation all --holdout 0 ...``), with its traces (each example's output and every
task-model call: messages, options, tokens, dollars) and, when its proposer predicted, what the predictions cost
(the ``"phase"`` lines of ``summary.jsonl`` with ``"phase": "predict"``, one iteration's spend each). ``load``
reads it through `metaharness.store` (a run directory, or one archived and packed as those under
``reports/replay/recorded`` are: ``<name>.tar.xz``, which the path ``<name>`` also finds) and refuses a run whose
candidates do not cover every example.

What is replayed: for each *replicate* (a seed), the validation examples are shuffled and split into a search share
and judge examples (``--judge``, a fraction; the search never sees them), as a run's ``ExampleOrder`` does with
``--holdout``. Each policy then runs the loop's staged evaluation on the recorded proposals, iteration after
iteration: the recorded candidates of the iteration are committed unscored, with their predictions remade from
what the replay has scored (`Replay._predicted`: the recorded ones read the judge examples), scored for free first
wherever every call they make on their nearest scored ancestor's examples is one the replayed run already made (as
`metaharness.search.loop` does with its replay), then the policy decides round after round through the real
`Standing` and `decide()` (as ``Optimizer._evaluate`` does); a step's examples are scored with the recorded scores,
and cost what their calls cost *in the replay*: a call is charged the first time the replayed run makes it (by its
request key: messages and options), an example-evaluation when one of its calls is charged.

Equal total spend: every policy has the same budget per iteration (``--evals-per-iter`` full evaluations'
worth of example-evaluations). A policy that reads predictions pays for them out of it, as recorded; one that reads
none (`metaharness.search.staging.PREDICTION_FREE`) pays nothing. The proposals are the recorded ones for every
policy (a proposer serving a prediction-free policy would have made its own without probes): the replay compares
how policies *spend*, on the same candidates. ``--policies planner,planner-blind`` adds the planner deciding with
every prediction removed (`Standing.blind`) and paying for none: planner minus it is what the predictions bought.

The identity check (``--identity on``, the default; ``off`` replays as before it, ``both`` replays each way and
reports what it changed), as the loop does it since issue 46: a revision that cannot change an output costs
nothing.

- The model-free check (`metaharness.search.model_free`) runs once on every recorded candidate over all of its
  run's validation examples, in the sandbox over the stand-in (`check_run`; its verdicts are kept in
  ``--checks``, by default ``reports/replay/model-free-checks/<run>.json``, and reused while the candidate, the
  examples and the check's code are the same; the sandbox seconds each took are kept with them: a cost in time,
  no token and no example-evaluation). In the replay a candidate's free search examples are scored with no model
  call before any policy decides, as `metaharness.search.loop`'s ``_free_evidence`` does (all of its share: a
  model-free candidate); their calls are not made, so they answer no later request.
- A stopped answer stands for a longer limit (`metaharness.models.stopped`): a recorded call is not charged when
  the replayed run made one that differs only in ``max_tokens`` (the same messages and other options, temperature
  0) and whose answer stopped by itself (fewer output tokens than its own limit) within this call's limit.

Spend on identical outputs (`Replay.identical`): of the example-evaluations charged in iterations >= 1, those to
proposals whose recorded outputs equal their parent's on every validation example (the measure the issue's
39-59% are in; by kind of revision, the proposer's ``family``), to those equal to their parent's on the examples
charged to them, and to those whose outputs equal an earlier candidate's that the replay scored there; as shares
of the budget (``--evals-per-iter`` times the search share, per iteration) and of what was charged.

Metric: the *judged* score (mean recorded score on the judge examples) of the candidate the return rule returns
(`metaharness.frontier.best`) after each iteration; and the example-evaluations (predictions included) a policy
spent to reach greedy's final judged score, per run and on the runs' mean curves (with the count of runs on which
the planner needs at most half of what greedy needs). Intervals (95%) are given per unit, and say which:

- ``replicates``: over orders and splits of one run, conditional on its recorded proposals (the replicates share
  every proposal, so this is how sure the comparison is *for those proposals*);
- ``runs``: a two-stage bootstrap over the recorded runs, then their replicates (needs >= 2 runs);
- ``iterations`` (``--episodes``): every recorded iteration replayed alone from the recorded state before it (every
  earlier candidate scored on the whole search share), its judged gain, bootstrapped over the recorded iterations.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import multiprocessing
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from metaharness import frontier
from metaharness.budget import Budget, Spend
from metaharness.candidate import EVALUATED, FAILED, IMPLEMENTED, Candidate, Evaluation, Increment, Prediction
from metaharness.errors import InputError
from metaharness.evaluation.sandbox import SandboxLimits
from metaharness.evaluation.task_evaluator import TaskEvaluator
from metaharness.models.client import connect
from metaharness.models.protocol import context_window
from metaharness.proposers.probe import request_key
from metaharness.proposers.simulation import DEFAULT_GAIN_SD
from metaharness.runner.task import run_task
from metaharness.search.loop import evaluated_ancestor
from metaharness.search.model_free import ModelFreeCheck, record_outputs
from metaharness.search.staging import PREDICTION_FREE, ExampleOrder, Policy, Standing, decide
from metaharness.store import RunDirectory
from metaharness.store.archive import BUNDLE, PACKED, restore
from metaharness.store.files import atomic_write_json, read_jsonl
from metaharness.tasks.protocol import Task

ROOT = Path(__file__).resolve().parents[1]
ARMS: tuple[Policy, ...] = ("planner", "greedy", "threshold", "thompson", "best-of-n", "halving", "gate")
BLIND_PLANNER = "planner-blind"  # the planner with every prediction removed: what the predictions bought
CHECK_CODE = ("metaharness/search/model_free.py", "metaharness/models/stand_in.py")  # what a verdict rests on
USED = (
    "metaharness/search/staging",
    "metaharness/frontier.py",
    "benchmarks/replay_study.py",
    *CHECK_CODE,
)
CHECKS = ROOT / "reports" / "replay" / "model-free-checks"  # the verdicts' cache, one JSON per recorded run
FORMAT = 2  # of a verdicts' file


@dataclass(frozen=True)
class Call:
    """One recorded task-model call: its request key, what it costs when charged, and for a temperature-0 call its
    ``stem`` (the key without ``max_tokens``), its ``limit`` (``max_tokens``) and the tokens it answered with."""

    key: str
    tokens: float
    usd: float
    stem: str | None = None
    limit: float | None = None
    output_tokens: float = 0.0

    @property
    def stopped(self) -> bool:
        """Whether its answer ended by itself: fewer tokens than its limit (`metaharness.models.stopped`)."""
        return self.stem is not None and self.limit is not None and self.output_tokens < self.limit


@dataclass
class Recorded:
    """One recorded run: its candidates as committed (no evaluation), every validation example, each candidate's
    score, output and calls per example, and what each iteration's predictions cost."""

    name: str
    candidates: list[Candidate]
    examples: list[str]
    scores: dict[str, dict[str, float]]
    outputs: dict[str, dict[str, str]]
    calls: dict[str, dict[str, tuple[Call, ...]]]
    predicting: dict[int, Spend]
    settings: dict[str, object] = dataclasses.field(default_factory=dict)
    responses: list[str] = dataclasses.field(default_factory=list)  # the model's, in candidate order
    free: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)  # `check_run`'s verdicts
    checked: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)  # its scores unlike the recorded

    @property
    def iterations(self) -> int:
        return max((c.iteration for c in self.candidates), default=0)


def load(path: Path) -> Recorded:
    """The recorded run in ``path`` (module docstring): a run directory, or one archived by
    `metaharness.store.archive`, as a folder or packed (``<name>.tar.xz``, also found from ``<name>``), restored
    into a temporary folder that is removed once read; InputError naming what is missing."""
    packed = path.with_name(path.name + PACKED)
    if not path.exists() and packed.is_file():
        path = packed
    if not path.is_file() and not (path / BUNDLE).is_file():
        return _read(path)
    with tempfile.TemporaryDirectory(prefix="replay-") as scratch:
        return _read(restore(path, Path(scratch) / path.name.removesuffix(PACKED), cache=scratch))


def _read(path: Path) -> Recorded:
    """The recorded run in the run directory ``path`` (`load`)."""
    run = RunDirectory.browse(path)
    stored = run.candidates()
    if not stored:
        raise InputError(f"{path} holds no candidate: record a run first (metaharness optimize --evaluation all).")
    scored = [c for c in stored if not c.failed]
    examples = sorted({i for c in scored if c.evaluation for i in c.evaluation.example_ids})
    scores, outputs, calls, responses = {}, {}, {}, []
    for c in scored:
        ev = c.evaluation
        if ev is None or set(ev.example_ids) != set(examples):
            have = 0 if ev is None else len(set(ev.example_ids))
            raise InputError(
                f"{path}: candidate {c.id} was scored on {have} of the {len(examples)} validation examples; the replay "
                "needs every candidate scored on every example (record with --evaluation all --holdout 0)."
            )
        scores[c.id] = dict(zip(ev.example_ids, ev.example_scores, strict=True))
        trace = path / c.trace if c.trace else path / "traces" / f"{c.id}.val.jsonl"
        outputs[c.id], calls[c.id] = _trace(trace, examples, responses)
    bare = [dataclasses.replace(c, status=FAILED if c.failed else IMPLEMENTED, evaluation=None) for c in stored]
    return Recorded(
        path.name,
        bare,
        examples,
        scores,
        outputs,
        calls,
        _predicting(run.log_records("phase")),
        run.settings(),
        responses,
    )


def _trace(
    path: Path, examples: Sequence[str], responses: list[str]
) -> tuple[dict[str, str], dict[str, tuple[Call, ...]]]:
    """Each example's output and calls from a candidate's trace (an example missing from it: no output, no call);
    the model's responses in it are added to ``responses``."""
    outputs, calls = {}, {}
    for record in read_jsonl(path):
        eid = record.get("id")
        if not isinstance(eid, str):
            continue
        error = record.get("error")
        outputs[eid] = f"error: {error}" if error else json.dumps(record.get("prediction"))
        made = [call for call in record.get("calls") or [] if isinstance(call, dict)]
        calls[eid] = tuple(_call(call) for call in made)
        responses += [call["response"] for call in made if isinstance(call.get("response"), str)]
    return outputs, {i: calls.get(i, ()) for i in examples}


def _call(call: dict[str, object]) -> Call:
    """A recorded call; its stem when it was asked at temperature 0 for one answer and got one without error."""
    options = call.get("options")
    options = options if isinstance(options, dict) else {}
    limit = options.get("max_tokens")
    plain = options.get("temperature") in (0, 0.0) and options.get("n", 1) == 1 and not call.get("error")
    stem = None
    if plain and isinstance(limit, (int, float)):
        stem = request_key({**call, "options": {k: v for k, v in options.items() if k != "max_tokens"}})  # type: ignore[arg-type]
    return Call(
        request_key(call),  # type: ignore[arg-type]
        float(call.get("input_tokens") or 0) + float(call.get("output_tokens") or 0),  # type: ignore[arg-type]
        float(call.get("usd") or 0.0),  # type: ignore[arg-type]
        stem,
        float(limit) if stem is not None else None,  # type: ignore[arg-type]
        float(call.get("output_tokens") or 0),  # type: ignore[arg-type]
    )


def _predicting(lines: Iterable[Mapping[str, object]]) -> dict[int, Spend]:
    """Each iteration's prediction spend (the ``"predict"`` phase lines, summed)."""
    out: dict[int, Spend] = {}
    for line in lines:
        at, spend = line.get("iteration"), line.get("spend")
        if line.get("phase") == "predict" and isinstance(at, int) and isinstance(spend, dict):
            out[at] = out.get(at, Spend()) + Spend.from_json(spend)
    return out


# --- the model-free check ---------------------------------------------------------------------------------------
def check_run(
    run: Recorded, cache: Path, *, data_dir: Path | None = None, task: Task | None = None, window: int | None = None
) -> dict[str, object]:
    """`ModelFreeCheck` on every recorded candidate of ``run`` over all its validation examples, its verdicts (the
    free examples of each candidate) kept in ``run.free`` and in ``cache/<run name>.json``, whose verdicts are
    reused while the candidate's source, the examples and the check's code (``CHECK_CODE``) are the same.

    As the loop does it: the run's task (the one its settings name, opened with ``data_dir``; or ``task``, with
    ``window`` as the model's context window) in the sandboxed `TaskEvaluator` over the stand-in, one example in
    flight, the real model's context window (its client's, connected without a call), the stand-ins
    answering from the task's training answers and then the model's recorded responses (all of the run's, in
    candidate order: the loop has those of the candidates scored so far; both keep the first ``MAX_ANSWERS``). A
    verdict is per example, so one check on every example serves every replicate's search share. Also recorded:
    the sandbox seconds each check took (a cost in time, no token) and the free examples whose output in the check
    differs from the recorded one, with the score the check gave them (``mismatched``: the check was wrong there,
    and the loop would record its output; ``run.checked`` holds those scores). Returns what the checks cost and
    found."""
    path = cache / f"{run.name}.json"
    code = _check_code()
    stored = json.loads(path.read_text()) if path.is_file() else {}
    valid = (stored.get("check_code"), stored.get("examples"), stored.get("format")) == (code, run.examples, FORMAT)
    verdicts: dict[str, dict[str, object]] = dict(stored.get("candidates", {})) if valid else {}
    todo = [c for c in run.candidates if not c.failed and verdicts.get(c.id, {}).get("source") != _digest(c.source)]
    started = time.perf_counter()
    if todo:
        check = _check(run, data_dir) if task is None else _checker(run, task, window)
        for c in todo:
            found = check(c.source, run.examples)
            records = {str(r.get("id")): r for r in read_jsonl(found.trace)} if found.trace is not None else {}
            seen = record_outputs(list(records.values()))
            mismatched = {
                i: float(records[i].get("scores", {}).get("primary", 0.0))  # type: ignore[union-attr]
                for i in found.free
                if seen.get(i) != run.outputs[c.id].get(i)
            }
            verdicts[c.id] = {
                "source": _digest(c.source),
                "free": list(found.free),
                "seconds": found.seconds,
                "mismatched": mismatched,
            }
        cache.mkdir(parents=True, exist_ok=True)
        ordered = {c.id: verdicts[c.id] for c in run.candidates if c.id in verdicts}
        stored = {"format": FORMAT, "check_code": code, "examples": run.examples, "candidates": ordered}
        atomic_write_json(path, stored)
    run.free = {cid: frozenset(str(i) for i in v["free"]) for cid, v in verdicts.items()}  # type: ignore[attr-defined]
    run.checked = {cid: dict(v["mismatched"]) for cid, v in verdicts.items() if v["mismatched"]}  # type: ignore[call-overload]
    free = [len(run.free[c.id]) for c in run.candidates if c.id in run.free]
    wrong = [(cid, i, score) for cid, by in run.checked.items() for i, score in by.items()]
    return {
        "candidates": len(free),
        "model_free": sum(1 for n in free if n == len(run.examples)),
        "partly_free": sum(1 for n in free if 0 < n < len(run.examples)),
        "free_examples": sum(free),
        "mismatched": len(wrong),
        "mismatched_score": sum(1 for cid, i, score in wrong if score != run.scores[cid][i]),
        "sandbox_seconds": round(sum(float(v["seconds"]) for v in verdicts.values()), 1),  # type: ignore[arg-type]
        "checked_now": len(todo),
        "seconds_now": round(time.perf_counter() - started, 1),
        "cache": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
    }


def _check(run: Recorded, data_dir: Path | None) -> ModelFreeCheck:
    """The loop's check (``metaharness.runner.optimize``) on the task and model the run's settings name."""
    settings = run.settings
    source = settings.get("task_source")
    task = run_task(str(settings["dataset"]), source if isinstance(source, dict) else None, data_dir)  # type: ignore[arg-type]
    return _checker(run, task, context_window(connect(str(settings["task_model"]), cache=False)))


def _checker(run: Recorded, task: Task, window: int | None) -> ModelFreeCheck:
    """The check on ``task`` (``window``: the model's context window), taught the run's recorded responses."""
    seconds = run.settings.get("harness_seconds")
    limits = SandboxLimits(average_seconds=float(seconds)) if isinstance(seconds, (int, float)) else SandboxLimits()
    check = ModelFreeCheck(
        task,
        lambda view, client: TaskEvaluator(view, client, workers=1, limits=limits),
        Path(tempfile.mkdtemp(prefix=f"model-free-{run.name}-")),
        window,
    )
    check.learn(run.responses)
    return check


def _check_code() -> str:
    """A digest of the code a verdict depends on (``CHECK_CODE``): verdicts made by other code are made again."""
    return _digest("".join((ROOT / name).read_text() for name in CHECK_CODE))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _check_task(args: tuple[Recorded, Path, Path | None]) -> tuple[dict[str, object], Recorded]:
    run, cache, data_dir = args
    return check_run(run, cache, data_dir=data_dir), run


# --- the replay -------------------------------------------------------------------------------------------------
class Replay:
    """One policy on one recorded run, with one example order and judge split (module docstring); ``identity``:
    with the identity check (the module docstring's "The identity check")."""

    def __init__(
        self, run: Recorded, arm: str, order: ExampleOrder, evals_per_iter: float, *, identity: bool = True
    ) -> None:
        self.run, self.order, self.identity = run, order, identity
        self.blind = arm == BLIND_PLANNER
        self.policy: Policy = "planner" if self.blind else arm  # type: ignore[assignment]
        self.limit = evals_per_iter * order.share
        self.candidates: list[Candidate] = []
        self.made: set[str] = set()  # request keys the replayed run has made (its response cache)
        self.stems: dict[str, float] = {}  # stem -> tokens of a stopped answer the replayed run paid for
        self.spent = Spend()  # iterations >= 1, predictions included for a policy that reads them
        self.predicted = Spend()  # of which predictions
        self.charged: dict[str, list[str]] = {}  # candidate -> examples charged to it in iterations >= 1

    def add(self, iteration: int, *, scored: bool = False) -> list[str]:
        """Commit the recorded candidates of ``iteration`` (scored on the whole share when ``scored``: the state
        an episode starts from), then score each for free where its output ignores the model's answers (with the
        identity check) and where its calls were all made. Returns their ids."""
        fresh = [c for c in self.run.candidates if c.iteration == iteration]
        self.candidates += [dataclasses.replace(c, prediction=self._predicted(c)) for c in fresh]
        ids = [c.id for c in fresh if not c.failed]
        for cid in ids:
            if self.identity:
                self._model_free(cid, iteration)
            if scored:
                done = set(self._examples(cid))
                self._score(cid, [i for i in self.order.search if i not in done], iteration, charge=False)
            else:
                self._replay(cid, iteration)
        return ids

    def _model_free(self, cid: str, iteration: int) -> None:
        """Free evidence with no model call: the search examples where the model-free check found the candidate's
        output the same under every stand-in answer (all of them: model-free)."""
        free = self.run.free.get(cid, frozenset())
        ids = [i for i in self.order.search if i in free]
        if ids:
            self._score(cid, ids, iteration, charge=False, model_free=len(ids) == self.order.share)

    def _made(self, call: Call) -> bool:
        """Whether the replayed run has the answer to ``call``: it made the same request, or (with the identity
        check) one that differs only in ``max_tokens`` and whose answer stopped by itself within this limit."""
        if call.key in self.made:
            return True
        if not self.identity or call.stem is None or call.limit is None:
            return False
        tokens = self.stems.get(call.stem)
        return tokens is not None and tokens <= call.limit

    def _make(self, calls: Iterable[Call]) -> None:
        for call in calls:
            self.made.add(call.key)
            if call.stopped:
                self.stems.setdefault(str(call.stem), call.output_tokens)

    def _predicted(self, candidate: Candidate) -> Prediction | None:
        """The candidate's prediction as the proposer would have made it from what *this replay* has scored.

        The recording scored every candidate on every validation example, judge examples included, so its
        predictions read them: a replayed one (``predicted_by`` "replay") is its own score on its base's 30
        examples, a prior one its base's full score plus its family's mean gain. Read as recorded, they would tell
        a policy that reads predictions the judged outcome. So a replayed prediction is remade on the base's
        examples in this replay (known where every call was already made, the base's score elsewhere; none when
        the base is unscored here, as the proposer never predicts from an unscored base), and a prior one keeps
        its recorded gain over its base, anchored on the base's score in this replay (its nearest scored
        ancestor's when the base is unscored). The family's mean gain in it was measured on the recording's 30
        examples: a mild leak left in (a mean over the run's revisions of a family, not one candidate's outcome)."""
        prediction = candidate.prediction
        if prediction is None or prediction.score is None or prediction.base is None:
            return prediction
        by_id = {c.id: c for c in self.candidates}
        if prediction.extra.get("predicted_by") == "replay":
            base = by_id.get(prediction.base)
            if base is None or base.evaluation is None:
                return dataclasses.replace(prediction, score=None, std=None, repeat=0.0)
            ids = list(base.evaluation.example_ids)
            theirs = dict(zip(ids, base.evaluation.example_scores, strict=True))
            mine = self.run.scores[candidate.id]
            free = self.run.free.get(candidate.id, frozenset()) if self.identity else frozenset()
            known = [i for i in ids if i in free or all(self._made(call) for call in self.run.calls[candidate.id][i])]
            got = set(known)
            score = (sum(mine[i] for i in known) + sum(theirs[i] for i in ids if i not in got)) / len(ids)
            missed = (len(ids) - len(known)) / len(ids)
            return dataclasses.replace(prediction, score=score, std=DEFAULT_GAIN_SD * missed, repeat=1.0 - missed)
        recorded_base = statistics.fmean(self.run.scores[prediction.base].values())
        gain = float(prediction.score) - recorded_base
        anchor = evaluated_ancestor(candidate, by_id)
        if anchor is None:
            return dataclasses.replace(prediction, score=None, std=None)
        score = min(1.0, max(0.0, anchor.score + gain))
        return dataclasses.replace(prediction, score=score, base=anchor.id)

    def _replay(self, cid: str, iteration: int) -> None:
        """Free evidence: the examples of its nearest scored ancestor where every call it makes was made."""
        by_id = {c.id: c for c in self.candidates}
        base = evaluated_ancestor(by_id[cid], by_id)
        if base is None or base.evaluation is None:
            return
        search = set(self.order.search)
        calls = self.run.calls[cid]
        done = set(self._examples(cid))
        free = [
            i
            for i in base.evaluation.example_ids
            if i in search and i not in done and all(self._made(call) for call in calls[i])
        ]
        if free:
            self._score(cid, free, iteration, charge=False)

    def iterate(self, iteration: int) -> None:
        """Iteration 0: every seed to its whole share; later: the recorded proposals, then the policy's rounds."""
        proposals = self.add(iteration)
        if iteration == 0:
            for cid in proposals:
                self._score(cid, self._rest(cid), 0)
            return
        self.evaluate(iteration, proposals)

    def evaluate(self, iteration: int, proposals: list[str]) -> None:
        """The policy's rounds within what the iteration may spend (less its predictions, when it reads them)."""
        reads = not self.blind and self.policy not in PREDICTION_FREE
        predicting = self.run.predicting.get(iteration, Spend()) if reads else Spend()
        self.spent, self.predicted = self.spent + predicting, self.predicted + predicting
        budget = Budget(evals=max(0.0, self.limit - predicting.evals))
        this = Spend()
        for _ in range(10_000):
            standing = Standing(
                self.candidates, self.order, budget.left(this), iteration, proposals, outputs=self._outputs()
            )
            decision = decide(standing.blind() if self.blind else standing, self.policy, compare=False)
            progressed = False
            for cid in sorted(decision.steps):
                scored = self._examples(cid)
                ids = decision.ids.get(cid) or self.order.next_ids(scored, decision.steps[cid] - len(scored))
                if ids:
                    this, progressed = this + self._score(cid, ids, iteration), True
            if not progressed:
                return
        raise RuntimeError(f"the {self.policy} policy did not stop")

    def _examples(self, cid: str) -> list[str]:
        ev = self._by_id(cid).evaluation
        return list(ev.example_ids) if ev else []

    def _rest(self, cid: str) -> list[str]:
        return self.order.next_ids(self._examples(cid), self.order.share)

    def _by_id(self, cid: str) -> Candidate:
        return next(c for c in self.candidates if c.id == cid)

    def _score(
        self, cid: str, ids: list[str], iteration: int, *, charge: bool = True, model_free: bool | None = None
    ) -> Spend:
        """Record ``ids`` for ``cid`` with the recorded scores, charging each call the replayed run has not made;
        ``model_free`` (True: all of its share) records them with no model call at all."""
        if not ids:
            return Spend()
        charged_examples, charged_tokens, usd, tokens = 0.0, 0.0, 0.0, 0.0
        for i in [] if model_free is not None else ids:
            new = [call for call in self.run.calls[cid][i] if not self._made(call)]
            tokens += sum(call.tokens for call in self.run.calls[cid][i])
            if charge and new:
                charged_examples += 1
                charged_tokens += sum(call.tokens for call in new)
                usd += sum(call.usd for call in new)
                if iteration > 0:
                    self.charged.setdefault(cid, []).append(i)
            self._make(self.run.calls[cid][i])
        spend = Spend(charged_examples, charged_tokens, usd)
        checked = self.run.checked.get(cid, {}) if model_free is not None else {}
        scores = [checked.get(i, self.run.scores[cid][i]) for i in ids]  # with no model call: what the check scored
        more = Evaluation(
            "val",
            {"primary": sum(scores) / len(scores)},
            {
                "input_tokens": tokens,
                "output_tokens": 0.0,
                "usd": usd,
                "charged_examples": charged_examples,
                "charged_tokens": charged_tokens,
            },
            examples=len(ids),
            example_ids=list(ids),
            example_scores=scores,
            share=self.order.share,
            increments=[Increment(iteration, len(ids), spend)],
            model_free=bool(model_free),
        )
        index = next(k for k, c in enumerate(self.candidates) if c.id == cid)
        candidate = self.candidates[index]
        evaluation = candidate.evaluation.merge(more) if candidate.evaluation else more
        self.candidates[index] = dataclasses.replace(candidate, status=EVALUATED, evaluation=evaluation)
        if iteration > 0:
            self.spent = self.spent + spend
        return spend

    def _outputs(self) -> dict[str, dict[str, str]]:
        return {
            c.id: {i: self.run.outputs[c.id].get(i, "") for i in c.evaluation.example_ids}
            for c in self.candidates
            if c.evaluation is not None
        }

    def judged(self) -> float:
        """The judged score of the candidate the run would return now (0 when none is supported)."""
        best = frontier.best(self.candidates)
        if best is None or not self.order.holdout:
            return 0.0
        return statistics.fmean(self.run.scores[best.id][i] for i in self.order.holdout)

    def identical(self) -> dict[str, object]:
        """Where the example-evaluations charged in iterations >= 1 went (the module docstring's "Spend on
        identical outputs"): ``charged`` in all; ``parent``, to candidates whose recorded outputs equal their
        parent's on every validation example, and ``kinds``, that spend by kind of revision (the proposer's
        ``family``); ``parent_charged``, to candidates whose outputs equal their parent's on every example charged to
        them; ``same``, to candidates whose outputs equal, on every validation example, those of a candidate
        committed before them that the replay scored on the examples charged to them."""
        outputs, order = self.run.outputs, {c.id: k for k, c in enumerate(self.run.candidates)}
        parents = {c.id: c.parent for c in self.run.candidates}
        kinds = {c.id: _kind(c) for c in self.run.candidates}
        scored = {c.id: set(c.evaluation.example_ids) for c in self.candidates if c.evaluation is not None}
        out: dict[str, float] = {"charged": 0.0, "parent": 0.0, "parent_charged": 0.0, "same": 0.0}
        by_kind: dict[str, float] = {}
        for cid, ids in self.charged.items():
            mine, n = outputs[cid], float(len(ids))
            theirs = outputs.get(str(parents[cid]))
            out["charged"] += n
            if theirs == mine:
                out["parent"] += n
                by_kind[kinds[cid]] = by_kind.get(kinds[cid], 0.0) + n
            if theirs is not None and all(theirs.get(i) == mine[i] for i in ids):
                out["parent_charged"] += n
            if any(order[d] < order[cid] and scored[d] >= set(ids) and outputs[d] == mine for d in scored):
                out["same"] += n
        return {**out, "kinds": by_kind}


def _order(run: Recorded, replicate: int, judge: float) -> ExampleOrder:
    holdout = min(len(run.examples) - 1, max(1, round(judge * len(run.examples))))
    return ExampleOrder.of(run.examples, seed=replicate, holdout=holdout)


def _kind(candidate: Candidate) -> str:
    """The kind of revision ``candidate`` is: its proposer's ``family`` (else its summary's first words)."""
    extra = candidate.prediction.extra if candidate.prediction is not None else {}
    family = extra.get("family")
    return str(family) if family else " ".join(candidate.summary.split()[:4]) or "?"


Curve = list[tuple[float, float, float]]  # per iteration 1..: judged score returned, evals and tokens spent so far


def sequential(
    run: Recorded, policy: str, replicate: int, judge: float, evals_per_iter: float, identity: bool = True
) -> tuple[Curve, dict[str, object]]:
    """The replay's curve (per iteration 1..: judged score returned, example-evaluations spent so far, tokens so
    far) and where its charged example-evaluations went (`Replay.identical`)."""
    replay = Replay(run, policy, _order(run, replicate, judge), evals_per_iter, identity=identity)
    replay.iterate(0)
    out = []
    for iteration in range(1, run.iterations + 1):
        replay.iterate(iteration)
        out.append((replay.judged(), replay.spent.evals, replay.spent.tokens))
    return out, replay.identical()


def episode(
    run: Recorded,
    policy: str,
    replicate: int,
    judge: float,
    evals_per_iter: float,
    iteration: int,
    identity: bool = True,
) -> tuple[float, float]:
    """Recorded iteration ``iteration`` alone, from every earlier candidate scored on the whole share: (judged gain
    of what is returned over what was returned before, example-evaluations spent)."""
    replay = Replay(run, policy, _order(run, replicate, judge), evals_per_iter, identity=identity)
    for earlier in range(iteration):
        replay.add(earlier, scored=True)
    before = replay.judged()
    replay.spent = Spend()
    replay.evaluate(iteration, replay.add(iteration))
    return replay.judged() - before, replay.spent.evals


# --- the summary ------------------------------------------------------------------------------------------------
def interval(values: Sequence[float]) -> list[float]:
    """Mean and its 95% interval (normal approximation) over ``values``."""
    mean = statistics.fmean(values)
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan
    return [round(mean, 4), round(mean - half, 4), round(mean + half, 4)]


def bootstrap(groups: Sequence[Sequence[float]], *, draws: int = 4000, seed: int = 0) -> list[float]:
    """Mean and the 95% percentile interval of a two-stage bootstrap: groups drawn with replacement, then values
    within each drawn group (a one-level bootstrap over values when there is one group)."""
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(g, dtype=float) for g in groups if len(g)]
    means = np.empty(draws)
    for d in range(draws):
        picked = rng.integers(0, len(arrays), len(arrays))
        means[d] = np.mean([rng.choice(arrays[k], len(arrays[k])).mean() for k in picked])
    mean = float(np.mean([a.mean() for a in arrays]))
    low, high = np.quantile(means, [0.025, 0.975])
    return [round(mean, 4), round(float(low), 4), round(float(high), 4)]


def reach(judged: Sequence[float], evals: Sequence[float], goal: float) -> float | None:
    """Example-evaluations at which a mean judged curve first reaches ``goal`` (linear between iterations)."""
    before_t, before_e = None, 0.0
    for t, e in zip(judged, evals, strict=True):
        if t >= goal - 1e-12:
            if before_t is None or t == before_t:
                return round(e, 1)
            return round(before_e + (e - before_e) * (goal - before_t) / (t - before_t), 1)
        before_t, before_e = t, e
    return None


def summarise(curves: Mapping[str, Mapping[str, list[list[tuple[float, float, float]]]]]) -> dict[str, object]:
    """``curves[run][policy]``: per replicate, the per-iteration (judged, evals, tokens). Mean curves per run and
    policy, planner minus each baseline at the last iteration (per run over replicates; over runs by the two-stage
    bootstrap), and the example-evaluations each policy needs to reach greedy's final judged score."""
    out: dict[str, object] = {"runs": {}}
    diffs: dict[str, list[list[float]]] = {}
    for name, by_policy in curves.items():
        means = {
            policy: {
                "judged": [round(statistics.fmean(r[t][0] for r in rows), 4) for t in range(len(rows[0]))],
                "evals": [round(statistics.fmean(r[t][1] for r in rows), 1) for t in range(len(rows[0]))],
                "tokens": [round(statistics.fmean(r[t][2] for r in rows)) for t in range(len(rows[0]))],
            }
            for policy, rows in by_policy.items()
            if rows and rows[0]
        }
        paired = {}
        for base in by_policy:
            if base == "planner" or "planner" not in by_policy:
                continue
            values = [p[-1][0] - b[-1][0] for p, b in zip(by_policy["planner"], by_policy[base], strict=True)]
            paired[base] = interval(values)
            diffs.setdefault(base, []).append(values)
        goal = means["greedy"]["judged"][-1] if "greedy" in means else None
        reaches = {
            policy: reach(curve["judged"], curve["evals"], goal) if goal is not None else None
            for policy, curve in means.items()
        }
        out["runs"][name] = {"curves": means, "planner_minus": paired, "goal": goal, "reach": reaches}  # type: ignore[index]
    out["over_runs"] = {base: bootstrap(groups) for base, groups in diffs.items()} if len(curves) > 1 else None
    out["pooled"] = _pooled(out["runs"])  # type: ignore[arg-type]
    return out


def _pooled(runs: Mapping[str, Mapping[str, object]]) -> dict[str, object] | None:
    """Over the runs (None for one run): each policy's mean curve (the runs' mean curves averaged), the
    example-evaluations each needs to reach greedy's mean final judged score on it, and on how many runs the planner
    reaches greedy's final score with at most half of what greedy needs (``half`` of the ``of`` runs)."""
    if len(runs) < 2:
        return None
    curves: dict[str, dict[str, list[float]]] = {}
    for policy in next(iter(runs.values()))["curves"]:  # type: ignore[attr-defined]
        rows = [run["curves"][policy] for run in runs.values()]  # type: ignore[index]
        curves[policy] = {
            key: [round(statistics.fmean(r[key][t] for r in rows), 4) for t in range(len(rows[0][key]))]
            for key in ("judged", "evals")
        }
    goal = curves["greedy"]["judged"][-1] if "greedy" in curves else None
    reaches = {p: reach(c["judged"], c["evals"], goal) if goal is not None else None for p, c in curves.items()}
    ratios = [
        (run["reach"].get("planner"), run["reach"].get("greedy"))  # type: ignore[attr-defined]
        for run in runs.values()
    ]
    half = sum(1 for p, g in ratios if g is not None and p is not None and p <= 0.5 * g)
    return {"curves": curves, "goal": goal, "reach": reaches, "half": half, "of": len(ratios)}


def summarise_episodes(gains: Mapping[tuple[str, int], Mapping[str, list[tuple[float, float]]]]) -> dict[str, object]:
    """``gains[(run, iteration)][policy]``: per replicate, (judged gain, evals). Planner minus each baseline,
    bootstrapped over the recorded iterations (each the mean over its replicates)."""
    policies = sorted({p for by_policy in gains.values() for p in by_policy})
    out: dict[str, object] = {"episodes": len(gains)}
    means = {
        p: round(statistics.fmean(statistics.fmean(g for g, _ in by[p]) for by in gains.values() if p in by), 4)
        for p in policies
    }
    out["mean_gain"] = means
    paired = {}
    for base in policies:
        if base == "planner":
            continue
        per_episode = [
            statistics.fmean(p[0] - b[0] for p, b in zip(by["planner"], by[base], strict=True)) for by in gains.values()
        ]
        paired[base] = bootstrap([per_episode])
    out["planner_minus"] = paired
    return out


SHARES = ("parent", "parent_charged", "same")  # `Replay.identical`'s spends, reported as shares


def summarise_identical(
    spends: Mapping[str, Mapping[str, Sequence[Mapping[str, object]]]], budgets: Mapping[str, float]
) -> dict[str, object]:
    """``spends[run][policy]``: per replicate, `Replay.identical`. Per run and policy: the example-evaluations
    charged (mean) and each of ``SHARES`` as a share of the run's budget (``budgets[run]``, iterations >= 1) with
    its 95% interval over replicates, ``parent`` also as a share of what was charged (``parent_spent``); over the
    runs the same by the two-stage bootstrap (runs, then replicates; over replicates for one run), and the
    parent-identical spend by kind of revision (mean example-evaluations per run)."""
    runs: dict[str, dict[str, object]] = {}
    groups: dict[str, dict[str, list[list[float]]]] = {}
    kinds: dict[str, dict[str, float]] = {}
    for name, by_policy in spends.items():
        budget = budgets[name]
        runs[name] = {}
        for policy, rows in by_policy.items():
            values = {key: [float(r[key]) / budget for r in rows] for key in SHARES}  # type: ignore[arg-type]
            values["parent_spent"] = [
                float(r["parent"]) / float(r["charged"]) if r["charged"] else 0.0  # type: ignore[arg-type]
                for r in rows
            ]
            values["charged"] = [float(r["charged"]) for r in rows]  # type: ignore[arg-type]
            runs[name][policy] = {key: interval(v) for key, v in values.items()}
            for key, v in values.items():
                groups.setdefault(policy, {}).setdefault(key, []).append(v)
            for row in rows:
                for kind, evals in row["kinds"].items():  # type: ignore[attr-defined]
                    mine = kinds.setdefault(policy, {})
                    mine[kind] = mine.get(kind, 0.0) + evals / len(rows) / len(spends)
    over = {policy: {key: bootstrap(v) for key, v in by_key.items()} for policy, by_key in groups.items()}
    ranked = {p: {k: round(v, 2) for k, v in sorted(ks.items(), key=lambda kv: -kv[1])} for p, ks in kinds.items()}
    return {"budget": dict(budgets), "runs": runs, "over_runs": over, "kinds": ranked}


def summarise_bought(
    without: Mapping[str, Mapping[str, Sequence[Curve]]], with_: Mapping[str, Mapping[str, Sequence[Curve]]]
) -> dict[str, object]:
    """What the identity check changed, policy by policy, replicate by replicate (the same order and split): the
    judged score after the last iteration and the example-evaluations spent, with and without it, and with minus
    without with its 95% interval (per run over replicates; over runs by the two-stage bootstrap)."""
    runs: dict[str, dict[str, object]] = {}
    groups: dict[str, dict[str, list[list[float]]]] = {}
    for name, by_policy in with_.items():
        runs[name] = {}
        for policy, rows in by_policy.items():
            before = without[name][policy]
            values = {
                "judged": [a[-1][0] - b[-1][0] for a, b in zip(rows, before, strict=True)],
                "evals": [a[-1][1] - b[-1][1] for a, b in zip(rows, before, strict=True)],
            }
            runs[name][policy] = {key: interval(v) for key, v in values.items()}
            for key, v in values.items():
                groups.setdefault(policy, {}).setdefault(key, []).append(v)
    over = {policy: {key: bootstrap(v) for key, v in by_key.items()} for policy, by_key in groups.items()}
    return {"runs": runs, "over_runs": over}


# --- the command ------------------------------------------------------------------------------------------------
def _sequential_task(args: tuple[Recorded, str, int, float, float, bool]) -> tuple[Curve, dict[str, object]]:
    return sequential(*args)


def _episode_task(args: tuple[Recorded, str, int, float, float, int, bool]) -> tuple[float, float]:
    return episode(*args)


def _map(function, tasks: list, jobs: int) -> list:  # type: ignore[no-untyped-def]
    if jobs > 1:
        with multiprocessing.Pool(jobs) as pool:
            return pool.map(function, tasks, chunksize=2)
    return [function(task) for task in tasks]


def _check_runs(
    runs: Sequence[Recorded], cache: Path, data_dir: Path | None, jobs: int, described: dict[str, dict[str, object]]
) -> dict[str, object]:
    """`check_run` on every run (its verdicts set in ``run.free``, what it found in ``described[run]["checks"]``);
    returns the totals: sandbox seconds the checks took (when made), checks made now and this step's seconds."""
    started = time.perf_counter()
    found = _map(_check_task, [(run, cache, data_dir) for run in runs], jobs)
    for run, (summary, checked) in zip(runs, found, strict=True):
        run.free, run.checked = checked.free, checked.checked
        described[run.name]["checks"] = summary
    summaries = [summary for summary, _ in found]
    return {
        "candidates": sum(int(s["candidates"]) for s in summaries),  # type: ignore[call-overload]
        "model_free": sum(int(s["model_free"]) for s in summaries),  # type: ignore[call-overload]
        "partly_free": sum(int(s["partly_free"]) for s in summaries),  # type: ignore[call-overload]
        "free_examples": sum(int(s["free_examples"]) for s in summaries),  # type: ignore[call-overload]
        "mismatched": sum(int(s["mismatched"]) for s in summaries),  # type: ignore[call-overload]
        "mismatched_score": sum(int(s["mismatched_score"]) for s in summaries),  # type: ignore[call-overload]
        "sandbox_seconds": round(sum(float(s["sandbox_seconds"]) for s in summaries), 1),  # type: ignore[arg-type]
        "checked_now": sum(int(s["checked_now"]) for s in summaries),  # type: ignore[call-overload]
        "seconds_now": round(time.perf_counter() - started, 1),
    }


def _describe(run: Recorded) -> dict[str, object]:
    return {
        "examples": len(run.examples),
        "iterations": run.iterations,
        "candidates": len(run.candidates),
        "predicting": {str(t): spend.to_json() for t, spend in sorted(run.predicting.items())},
    }


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *USED], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() + (" (with local changes to the modules it runs)" if dirty.stdout.strip() else "")


def main(argv: Sequence[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="recorded run directories")
    parser.add_argument("--replicates", type=int, default=100, help="example orders and judge splits (default 100)")
    parser.add_argument("--judge", type=float, default=1 / 3, help="share of examples held out to judge (1/3)")
    parser.add_argument("--evals-per-iter", type=float, default=3.0, help="full evaluations' worth per iteration")
    parser.add_argument(
        "--policies",
        default=",".join(ARMS),
        help=f"comma-separated (default: every arm; also {BLIND_PLANNER}, the planner with predictions removed)",
    )
    parser.add_argument("--episodes", action="store_true", help="also replay every recorded iteration alone")
    parser.add_argument(
        "--identity",
        choices=("on", "off", "both"),
        default="on",
        help="the identity check: model-free examples scored with no model call, a stopped answer standing for a "
        "longer limit (on, the default); off reproduces the replays made before it; both replays each way and "
        "reports what it changed",
    )
    parser.add_argument(
        "--checks",
        type=Path,
        default=CHECKS,
        help="where the model-free checks' verdicts are kept and reused, one JSON per recorded run "
        "(default reports/replay/model-free-checks)",
    )
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="the tasks' data for the checks (else METAHARNESS_DATA_DIR)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--out", type=Path, default=None, help="write results.json and results.md here")
    parser.add_argument(
        "--rewrite",
        type=Path,
        default=None,
        help="replay nothing: re-read DIR/results.json, add what is derived from its mean curves, rewrite it and "
        "results.md",
    )
    args = parser.parse_args(argv)
    if args.rewrite is not None:
        return rewrite(args.rewrite)
    if not args.runs:
        parser.error("give one or more recorded run directories (or --rewrite DIR)")
    policies = [p for p in args.policies.split(",") if p]
    unknown = [p for p in policies if p not in (*ARMS, BLIND_PLANNER)]
    if unknown:
        raise SystemExit(f"unknown policies {', '.join(unknown)}: use {', '.join((*ARMS, BLIND_PLANNER))}")
    started = time.perf_counter()
    runs = [load(path) for path in args.runs]
    modes = {"on": (True,), "off": (False,), "both": (False, True)}[args.identity]
    results: dict[str, object] = {
        "commit": _commit(),
        "runs": {run.name: _describe(run) for run in runs},
        "replicates": args.replicates,
        "judge": args.judge,
        "evals_per_iter": args.evals_per_iter,
        "policies": policies,
        "identity": args.identity,
    }
    if True in modes:
        results["checks"] = _check_runs(runs, args.checks, args.data_dir, args.jobs, results["runs"])  # type: ignore[arg-type]
    replicates = range(args.replicates)
    budgets = {run.name: args.evals_per_iter * _order(run, 0, args.judge).share * run.iterations for run in runs}
    curves: dict[bool, dict[str, dict[str, list[Curve]]]] = {}
    identical: dict[str, object] = {}
    for identity in modes:
        tasks = [
            (run, p, k, args.judge, args.evals_per_iter, identity) for run in runs for p in policies for k in replicates
        ]
        done = iter(_map(_sequential_task, tasks, args.jobs))
        rows = {run.name: {p: [next(done) for _ in replicates] for p in policies} for run in runs}
        curves[identity] = {name: {p: [c for c, _ in r] for p, r in by.items()} for name, by in rows.items()}
        spends = {name: {p: [s for _, s in r] for p, r in by.items()} for name, by in rows.items()}
        identical["on" if identity else "off"] = summarise_identical(spends, budgets)
    main_mode = modes[-1]
    results["sequential"] = summarise(curves[main_mode])
    results["identical"] = identical
    if len(modes) == 2:
        results["without_identity"] = summarise(curves[False])
        results["bought"] = summarise_bought(curves[False], curves[True])
    if args.episodes:
        episodes = [(run, t) for run in runs for t in range(1, run.iterations + 1)]
        etasks = [
            (run, p, k, args.judge, args.evals_per_iter, t, main_mode)
            for run, t in episodes
            for p in policies
            for k in replicates
        ]
        edone = iter(_map(_episode_task, etasks, args.jobs))
        gains = {(run.name, t): {p: [next(edone) for _ in replicates] for p in policies} for run, t in episodes}
        results["episodes"] = summarise_episodes(gains)
    results["seconds"] = round(time.perf_counter() - started, 1)
    text = report(results)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
        (args.out / "results.md").write_text(text + "\n")
    return results


def rewrite(folder: Path) -> dict[str, object]:
    """An earlier replay's results with what this version derives from their stored mean curves (the pooled
    curves and reach), rewritten in place; the replay itself, and its ``commit``, are unchanged."""
    path = folder / "results.json"
    if not path.is_file():
        raise SystemExit(f"no results.json in {folder}: run the replay with --out {folder} first")
    results = json.loads(path.read_text())
    sequential = results["sequential"]
    sequential["pooled"] = _pooled(sequential["runs"])
    text = report(results)
    print(text)
    path.write_text(json.dumps(results, indent=1) + "\n")
    (folder / "results.md").write_text(text + "\n")
    return results


def _curves_table(curves: Mapping[str, Mapping[str, list[float]]], reaches: Mapping[str, object]) -> list[str]:
    """Each policy's judged score and example-evaluations by iteration, and where it reaches greedy's final score."""
    lines = [
        "| policy | judged by iteration | example-evaluations by iteration (predictions included) | reaches "
        "greedy's final judged score at |",
        "| --- | --- | --- | --- |",
    ]
    for policy, curve in curves.items():
        judged = " ".join(f"{x:.3f}" for x in curve["judged"])
        evals = " ".join(f"{x:.0f}" for x in curve["evals"])
        lines.append(f"| {policy} | {judged} | {evals} | {reaches.get(policy)} |")
    return lines


def report(results: Mapping[str, object]) -> str:
    """The results as Markdown tables."""
    judge = float(results["judge"])  # type: ignore[arg-type]
    lines = [
        f"Replay at {results['commit']}: {results['replicates']} replicates (orders and judge splits) per run, "
        f"{results['evals_per_iter']:g} full evaluations' worth per iteration, judge share {judge:.2f}; "
        f"{results['seconds']} s.",
        "",
    ]
    sequential = results["sequential"]
    assert isinstance(sequential, dict)
    for name, run in sequential["runs"].items():
        lines += [f"## {name}", "", *_curves_table(run["curves"], run["reach"]), ""]
        lines += [
            "Planner minus baseline, judged score after the last iteration, mean [95% interval over replicates: "
            "orders and splits of this run, conditional on its proposals]:",
            "",
        ]
        lines += [f"- {base}: {m:+.4f} [{lo:+.4f}, {hi:+.4f}]" for base, (m, lo, hi) in run["planner_minus"].items()]
        lines.append("")
    if sequential.get("over_runs"):
        lines += [
            "## Over the recorded runs",
            "",
            "Planner minus baseline, mean [95% two-stage bootstrap interval: runs, then replicates]:",
            "",
        ]
        lines += [f"- {b}: {m:+.4f} [{lo:+.4f}, {hi:+.4f}]" for b, (m, lo, hi) in sequential["over_runs"].items()]
        lines.append("")
    pooled = sequential.get("pooled")
    if pooled:
        lines += [
            "Mean over the runs (each run's mean curve averaged; greedy's final judged score on it: "
            f"{pooled['goal']:.4f}):",
            "",
            *_curves_table(pooled["curves"], pooled["reach"]),
            "",
            f"The planner reaches greedy's final judged score with at most half of greedy's example-evaluations on "
            f"{pooled['half']} of {pooled['of']} runs.",
            "",
        ]
    episodes = results.get("episodes")
    if isinstance(episodes, dict):
        gains = ", ".join(f"{p} {g:+.4f}" for p, g in episodes["mean_gain"].items())
        lines += [
            f"## Iterations alone ({episodes['episodes']} recorded iterations)",
            "",
            f"Mean judged gain per iteration: {gains}.",
            "",
            "Planner minus baseline, mean [95% bootstrap interval over the recorded iterations]:",
            "",
        ]
        lines += [f"- {b}: {m:+.4f} [{lo:+.4f}, {hi:+.4f}]" for b, (m, lo, hi) in episodes["planner_minus"].items()]
    more = _identity_report(results)
    if more:
        lines += ["", *more] if lines[-1] else more
    return "\n".join(lines)


def _identity_report(results: Mapping[str, object]) -> list[str]:
    """The identity check's sections: where the charged example-evaluations went, with and without it; what it
    changed; what the checks found and took. Nothing for a replay made before it."""
    identical = results.get("identical")
    if not isinstance(identical, dict):
        return []
    lines: list[str] = []
    budgets = next(iter(identical.values()))["budget"]
    for mode, summary in identical.items():
        with_or = "with" if mode == "on" else "without"
        lines += [
            f"## Spend on identical outputs, {with_or} the identity check",
            "",
            f"Example-evaluations charged in iterations 1-{_last_iteration(results)} (budget per run: "
            f"{', '.join(sorted({f'{b:g}' for b in budgets.values()}))}) that went to proposals whose outputs equal "
            "their parent's on every validation example, as a share of the budget and of what was charged; to "
            "proposals whose outputs equal their parent's on the examples charged to them; and to proposals whose "
            "outputs equal an earlier candidate's the replay had scored there. Mean [95% interval: two-stage "
            "bootstrap over runs, then replicates; over replicates for one run]:",
            "",
            "| policy | charged | parent-identical, of the budget | of what was charged | parent-identical on the "
            "charged examples, of the budget | identical to an earlier scored candidate, of the budget |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for policy, row in summary["over_runs"].items():
            lines.append(
                f"| {policy} | {row['charged'][0]:.1f} | {_share(row['parent'])} | {_share(row['parent_spent'])} | "
                f"{_share(row['parent_charged'])} | {_share(row['same'])} |"
            )
        lines.append("")
        kinds = {p: k for p, k in summary["kinds"].items() if k}
        if kinds:
            lines += ["Parent-identical spend by kind of revision (mean example-evaluations per run):", ""]
            lines += [f"- {p}: " + ", ".join(f"{k} {v:g}" for k, v in ks.items()) for p, ks in kinds.items()]
            lines.append("")
        policies = list(summary["over_runs"])
        lines += [
            "Per run, parent-identical share of the budget (mean over replicates):",
            "",
            "| run | " + " | ".join(policies) + " |",
            "| --- | " + " | ".join("---" for _ in policies) + " |",
        ]
        for name, by_policy in summary["runs"].items():
            cells = " | ".join(f"{by_policy[p]['parent'][0]:.0%}" for p in policies)
            lines.append(f"| {name} | {cells} |")
        lines.append("")
    bought = results.get("bought")
    if isinstance(bought, dict):
        before = results["without_identity"]["pooled"] or {}  # type: ignore[index]
        after = results["sequential"]["pooled"] or {}  # type: ignore[index]
        lines += [
            "## What the identity check changed",
            "",
            "Judged score after the last iteration and example-evaluations spent, without -> with the identity "
            "check (same orders and splits), and with minus without, mean [95% interval: runs, then replicates]; "
            "the example-evaluations at which the runs' mean curve reaches greedy's final judged score, without -> "
            "with:",
            "",
            "| policy | judged | judged, with minus without | example-evaluations | spent, with minus without | "
            "reaches greedy's final judged score at |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for policy, row in bought["over_runs"].items():
            curves = (before.get("curves", {}).get(policy), after.get("curves", {}).get(policy))
            judged = " -> ".join(f"{c['judged'][-1]:.3f}" for c in curves if c) if all(curves) else ""
            evals = " -> ".join(f"{c['evals'][-1]:.0f}" for c in curves if c) if all(curves) else ""
            reach = f"{before.get('reach', {}).get(policy)} -> {after.get('reach', {}).get(policy)}"
            (m, lo, hi), (e, elo, ehi) = row["judged"], row["evals"]
            lines.append(
                f"| {policy} | {judged} | {m:+.4f} [{lo:+.4f}, {hi:+.4f}] | {evals} | {e:+.1f} [{elo:+.1f}, "
                f"{ehi:+.1f}] | {reach} |"
            )
        lines.append("")
    checks = results.get("checks")
    if isinstance(checks, dict):
        lines += [
            "## The model-free checks",
            "",
            f"{checks['candidates']} candidates checked, each once on every validation example of its run: "
            f"{checks['model_free']} model-free, {checks['partly_free']} free on some examples, "
            f"{checks['free_examples']} free (candidate, example) pairs, of which {checks['mismatched']} have an "
            f"output in the check unlike the recorded one (the check was wrong there; the replay scores them as "
            f"the check did) and {checks['mismatched_score']} a score unlike it. Sandbox time when the verdicts "
            f"were made: {checks['sandbox_seconds']:g} s (no token, no example-evaluation); made in this replay: "
            f"{checks['checked_now']} ({checks['seconds_now']:g} s wall), the rest read from the cache.",
            "",
            "| run | candidates | model-free | free on some examples | free examples | output unlike the recorded "
            "one (score unlike it) | sandbox seconds |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name, run in results["runs"].items():  # type: ignore[attr-defined]
            c = run.get("checks")
            if c:
                lines.append(
                    f"| {name} | {c['candidates']} | {c['model_free']} | {c['partly_free']} | {c['free_examples']} | "
                    f"{c['mismatched']} ({c['mismatched_score']}) | {c['sandbox_seconds']:g} |"
                )
        lines.append("")
    return lines


def _share(values: Sequence[float]) -> str:
    m, lo, hi = values
    return f"{m:.1%} [{lo:.1%}, {hi:.1%}]"


def _last_iteration(results: Mapping[str, object]) -> int:
    return max(int(run["iterations"]) for run in results["runs"].values())  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
