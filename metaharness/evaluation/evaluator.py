"""Run a harness on a split: sandboxed, many examples in flight, every model call traced.

Each example is one joblib job. A job borrows a sandbox (``Sandbox``)
holding an instance of the harness from a pool kept per evaluation, runs ``predict`` on its input while the proxy
answers the harness's model calls, and returns the example's record; the parent scores it with the task's metric.
Locally the jobs run on threads (``workers`` in flight, default 8), so the model endpoint is kept busy while the CPU
mostly waits. Under ``joblib.parallel_config(backend="dask")`` (or ``"ray"``, or any process-based backend) the same
jobs run on a cluster: each remote process keeps its own sandbox pools (the most recent ``MAX_POOLS``
evaluations), and its harnesses' model calls come back to this process through the proxy's TCP server
(``ProxyServer``), so the keys stay here and the run's ledger and caps count
every call. The records are the same as a local run's.

Failure rule (as in GEPA's adapter contract): one example's failure never raises. A harness that does not load,
raises, hangs, exhausts its memory or CPU, or returns something other than a string scores 0 on the affected
examples with the error in their records; the sandbox is restarted when it died. A harness slow on every example
(each within its own limit) meets the evaluation's time bound (``SandboxLimits.time_bound``: its own time in
``predict``, model time excluded, summed over the examples as they finish): past it the examples running are
stopped, none starts, and each left scores 0 with the bound in its record. Only systemic failures raise:
an unknown task or split, a missing harness file, a reached budget cap, a model that cannot be reached, a record
that cannot be written. When one does (or Ctrl-C interrupts), every sandbox of the evaluation is killed at once and
no job starts; the evaluation raises only once no job is left inside a model call (after Ctrl-C, at most
``INTERRUPTED_SECONDS``), so the process never exits, freeing the model, under a call.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from joblib import Parallel, delayed

from metaharness.candidates.protocol import TrainItem
from metaharness.errors import InputError, MetaharnessError
from metaharness.evaluation.confine import probe
from metaharness.evaluation.proxy import CallRecorder, ModelRef, RemoteRecorder
from metaharness.evaluation.records import EvalReport, ExampleRecord, LMReply, mean_scores, total_cost, write_records
from metaharness.evaluation.sandbox import LOAD_FAILED, STOPPED, CallHandler, Sandbox, SandboxFailure, SandboxLimits
from metaharness.evaluation.worker import MAX_EXAMPLES_PER_WORKER
from metaharness.json_types import JSONObject
from metaharness.models import connect
from metaharness.models.protocol import ModelClient, context_window
from metaharness.tasks import Example, Task, get_task

DEFAULT_WORKERS = 8
DEFAULT_CONTEXT_WINDOW = 8192
# Sandbox pools a process keeps: a remote worker never sees an evaluation end, so older pools are closed.
MAX_POOLS = 4
# After Ctrl-C, how long an evaluation waits for the model calls in flight before it lets the process go on.
INTERRUPTED_SECONDS = 30.0

ProgressCallback = Callable[[ExampleRecord, int, int], None]


class HarnessInvalid(MetaharnessError):
    """The harness file does not import or instantiate; the message holds its error (for the proposer)."""


@dataclass(frozen=True)
class _Job:
    pool_key: str
    source: str
    train: list[TrainItem]
    limits: SandboxLimits
    context_window: int
    model: ModelRef
    example: Example


class _Pool:
    """The sandboxes of one evaluation in this process: idle ones to reuse, busy ones to kill if the evaluation
    stops, and the jobs running (``stop`` then ``wait`` until none is left inside a model call). A harness that
    failed to load fails fast afterwards."""

    def __init__(self, job: _Job):
        self.job = job
        self.idle: list[Sandbox] = []
        self.busy: set[Sandbox] = set()
        self.load_error: str | None = None
        self.closed = False
        self.stopped = False
        self.running = 0
        self.owned = False  # the pool of an evaluation running in this process (see _pool_for)
        self.lock = threading.Condition()

    @contextlib.contextmanager
    def job_running(self) -> Iterator[None]:
        """Count a job as running for its whole life; a job of a stopped evaluation fails at once (``STOPPED``)."""
        with self.lock:
            if self.stopped:
                raise SandboxFailure(STOPPED, fatal=True)
            self.running += 1
        try:
            yield
        finally:
            with self.lock:
                self.running -= 1
                self.lock.notify_all()

    def _started(self, sandbox: Sandbox) -> None:
        with self.lock:
            self.busy.add(sandbox)
            if self.stopped:
                sandbox.kill()

    def acquire(self, recorder: CallRecorder | RemoteRecorder) -> Sandbox:
        with self.lock:
            if self.load_error is not None:
                raise SandboxFailure(self.load_error, fatal=True)
            sandbox = self.idle.pop() if self.idle else None
            if sandbox is not None:
                self.busy.add(sandbox)
        if sandbox is None:
            try:
                sandbox = Sandbox(
                    self.job.source,
                    self.job.train,
                    self.job.limits,
                    context_window=self.job.context_window,
                    on_call=recorder,
                    on_start=self._started,
                )
            except SandboxFailure as failure:
                with self.lock:
                    if not self.stopped:
                        self.load_error = str(failure)
                raise
        sandbox.on_call = recorder
        return sandbox

    def release(self, sandbox: Sandbox) -> None:
        with self.lock:
            self.busy.discard(sandbox)
            if not self.closed and sandbox.alive and sandbox.examples_run < MAX_EXAMPLES_PER_WORKER:
                self.idle.append(sandbox)
                return
        sandbox.close()

    def stop(self) -> None:
        """Stop the evaluation at once: no job starts, every sandbox is killed (a job inside a model call finishes
        that call, then fails with ``STOPPED``)."""
        with self.lock:
            self.stopped = True
            busy = list(self.busy)
        for sandbox in busy:
            sandbox.kill()
        self.close()

    def wait(self, seconds: float | None = None) -> None:
        """Return once no job of this evaluation is running (none is left inside a model call), or after
        ``seconds``."""
        with self.lock:
            self.lock.wait_for(lambda: self.running == 0, timeout=seconds)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
        for sandbox in idle:
            sandbox.close()


_POOLS: dict[str, _Pool] = {}
_POOLS_LOCK = threading.Lock()


def _pool_for(job: _Job, *, owned: bool = False) -> _Pool:
    """The pool of ``job``'s evaluation in this process (most recently used last; beyond MAX_POOLS the oldest go,
    but never the pool of an evaluation running in this process: ``owned``, closed when that evaluation ends)."""
    retired = []
    with _POOLS_LOCK:
        pool = _POOLS.pop(job.pool_key, None) or _Pool(job)
        pool.owned = pool.owned or owned
        _POOLS[job.pool_key] = pool
        while len(_POOLS) > MAX_POOLS and (oldest := next((k for k, p in _POOLS.items() if not p.owned), None)):
            retired.append(_POOLS.pop(oldest))
    for old in retired:
        old.close()  # sandboxes still running an example are closed when they are released
    return pool


def _close_pool(key: str) -> None:
    with _POOLS_LOCK:
        pool = _POOLS.pop(key, None)
    if pool is not None:
        pool.close()


@atexit.register
def _close_all_pools() -> None:
    """Remote joblib workers never see the end of an evaluation: their sandboxes go when the process does."""
    for key in list(_POOLS):
        _close_pool(key)


def _run_example(job: _Job) -> tuple[ExampleRecord, float]:
    """One example in a sandbox (the joblib job), and the seconds of the harness's own time its ``predict`` took
    (model time excluded). Never raises for the harness's failures."""
    example = job.example
    record = ExampleRecord(id=example.id, input=example.input, target=example.target)
    recorder = job.model.recorder()
    started = time.perf_counter()
    pool = _pool_for(job)
    sandbox = None
    own = 0.0
    try:
        with pool.job_running():
            try:
                sandbox = pool.acquire(recorder)
                record.prediction = sandbox.predict(example.input)
            except SandboxFailure:  # the harness's failure: a sandbox still alive (not ``fatal``) serves the next
                raise
            except BaseException:  # a systemic failure (budget, unreachable model): the sandbox is mid-call, discard it
                if sandbox is not None:
                    sandbox.close()
                raise
            finally:
                if sandbox is not None:
                    own = sandbox.harness_seconds
                    pool.release(sandbox)
    except SandboxFailure as failure:
        record.error = str(failure)
    record.calls = recorder.calls
    record.seconds = round(time.perf_counter() - started, 4)
    return record, own


class _TimeBound:
    """The harness time an evaluation of ``examples`` examples may use (``SandboxLimits.time_bound``), counted as
    examples finish; once it is passed the evaluation stops and the examples left fail with ``reason``."""

    def __init__(self, limits: SandboxLimits, examples: int) -> None:
        self.limits = limits
        self.examples = examples
        self.seconds = limits.time_bound(examples)
        self.used = 0.0

    def add(self, seconds: float) -> bool:
        """Count an example's harness time; True once the bound is passed."""
        self.used += seconds
        return self.used > self.seconds

    def reason(self) -> str:
        limits = self.limits
        return (
            f"not scored, past this evaluation's time bound: the harness had used {self.used:.0f} s of its own time "
            f"(model time excluded) on the examples before, more than the {self.seconds:.0f} s it may use here "
            f"({limits.average_seconds:g} s per example on average over {self.examples} examples, at least "
            f"{limits.wall_seconds:g} s; --harness-seconds), so this example was stopped or not started"
        )


def _parallel(parallel: type[Parallel], n_jobs: int) -> Parallel:
    """joblib's Parallel yielding records as they finish; a backend without result generators (Ray's) returns
    them all at the end, so progress then comes at once."""
    try:
        return parallel(n_jobs=n_jobs, prefer="threads", return_as="generator_unordered")
    except ValueError as exc:
        if "return_as" not in str(exc):
            raise
        return parallel(n_jobs=n_jobs, prefer="threads")


def _resolve_task(task: str | Task, data_dir: str | Path | None) -> Task:
    return get_task(task, data_dir=data_dir) if isinstance(task, str) else task


def _read_source(harness_path: str | Path) -> str:
    path = Path(harness_path)
    if not path.is_file():
        raise InputError(f"Harness file {path} does not exist: pass a .py file defining class Harness.")
    return path.read_text(encoding="utf-8")


def _context_window(client: ModelClient) -> int:
    return context_window(client) or DEFAULT_CONTEXT_WINDOW


def _connect(model: ModelClient | str) -> ModelClient:
    if isinstance(model, str):
        return connect(model)
    return model


def evaluate(
    harness_path: str | Path,
    task: str | Task,
    split: str = "val",
    *,
    model: ModelClient | str,
    limit: int | None = None,
    ids: Sequence[str] | None = None,
    workers: int | None = None,
    trace_path: str | Path | None = None,
    progress: ProgressCallback | None = None,
    limits: SandboxLimits | None = None,
    data_dir: str | Path | None = None,
) -> EvalReport:
    """Evaluate the harness file on ``split`` of ``task`` (training examples come from its train split).

    ``model``: a ModelClient or a spec string (``local:smollm2-135m``, ``openai:M@URL``, ...). ``limit``: the first
    N examples; ``ids``: only the examples with these ids, in this order (an unknown id is an InputError).
    ``workers``: examples in flight (default 8). ``trace_path``: also write the records as JSONL there.
    ``progress(record, done, total)`` is called as each example finishes. ``limits``: per-example sandbox limits.

    >>> report = evaluate("candidates/symptom2disease/zero_shot.py", "symptom2disease", "val",
    ...                   model="local:smollm2-135m", limit=5)  # doctest: +SKIP
    >>> report.scores["primary"], report.cost["context_tokens"]  # doctest: +SKIP
    >>> report.records[0].calls[0]["response"]  # doctest: +SKIP
    """
    started = time.perf_counter()
    task_obj = _resolve_task(task, data_dir)
    source = _read_source(harness_path)
    examples = task_obj.load(split)
    if limit is not None:
        if limit < 1:
            raise InputError(f"--limit must be at least 1, got {limit}.")
        examples = examples[:limit]
    if ids is not None:
        known = {example.id: example for example in examples}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise InputError(
                f"No example(s) {', '.join(map(str, unknown[:5]))} in the {split} split of {task_obj.name}."
            )
        examples = [known[i] for i in ids]
    train = [example.as_train_item() for example in task_obj.load("train")]
    client = _connect(model)
    limits = limits or SandboxLimits()
    pool_key = uuid.uuid4().hex
    model_ref = ModelRef(client)
    jobs = [_Job(pool_key, source, train, limits, _context_window(client), model_ref, example) for example in examples]
    n_jobs = max(1, min(workers or DEFAULT_WORKERS, len(jobs) or 1))
    metric_names = task_obj.metric_names()
    by_id: dict[str, ExampleRecord] = {}
    examples_by_id = {example.id: example for example in examples}
    pool = _pool_for(jobs[0], owned=True) if jobs else None
    interrupted = False
    bound = _TimeBound(limits, len(jobs))
    results = _parallel(Parallel, n_jobs)(delayed(_run_example)(job) for job in jobs)
    try:
        for done, (record, own) in zip(itertools.count(1), results):
            if record.error is None and record.prediction is not None:
                record.scores = task_obj.score(record.prediction, examples_by_id[record.id])
            else:
                record.scores = {name: 0.0 for name in metric_names}
            by_id[record.id] = record
            if progress is not None:
                progress(record, done, len(jobs))
            if bound.add(own) and len(by_id) < len(jobs):
                if pool is not None:
                    pool.stop()  # the examples running are stopped, none starts: each scores 0 below
                break
    except BaseException as exc:  # a systemic failure, or Ctrl-C: stop every sandbox of this evaluation now
        if pool is not None:
            pool.stop()
        interrupted = isinstance(exc, KeyboardInterrupt)
        raise
    finally:
        if isinstance(results, Generator):
            results.close()  # no job is started any more
        if pool is not None:
            # Return (or let the process exit, freeing the model) only once no job is inside a model call; after
            # Ctrl-C, at most INTERRUPTED_SECONDS (a hosted model's call may be retrying for minutes).
            pool.wait(INTERRUPTED_SECONDS if interrupted else None)
        _close_pool(pool_key)
        model_ref.close()
    for example in examples:  # stopped by the time bound
        if example.id not in by_id:
            left = ExampleRecord(example.id, example.input, example.target, error=bound.reason())
            left.scores = {name: 0.0 for name in metric_names}
            by_id[example.id] = left
    records = [by_id[example.id] for example in examples]
    if trace_path is not None:
        write_records(records, trace_path)
    return EvalReport(
        task=task_obj.name,
        split=split,
        harness=str(harness_path),
        harness_sha256=hashlib.sha256(source.encode()).hexdigest(),
        model=client.spec,
        scores=mean_scores(records, metric_names),
        records=records,
        cost=total_cost(records),
        errors=sum(1 for r in records if r.error is not None),
        seconds=round(time.perf_counter() - started, 3),
        sandbox={"limits": asdict(limits), "workers": n_jobs, "write_barrier": probe()["write_barrier"]},
        load_error=next((r.error for r in records if r.error and r.error.startswith(LOAD_FAILED)), None),
    )


def _no_model(request: JSONObject) -> LMReply:
    """The answer to every model call a harness makes while ``check_harness`` has no model."""
    return {"error": "no task model in check_harness"}


def check_harness(
    harness_path: str | Path,
    task: str | Task,
    *,
    model: ModelClient | str | None = None,
    limits: SandboxLimits | None = None,
    data_dir: str | Path | None = None,
    trace_path: str | Path | None = None,
) -> None:
    """Load and instantiate the harness in a sandbox with the task's training examples; raise
    ``HarnessInvalid`` (message: the harness's error) when that fails. Without ``model``, model calls made
    while constructing the harness fail with an error the harness sees. ``trace_path``: where to write the model
    calls made while loading (one record, id ``"check"``, with the load error if any), as every call is traced."""
    task_obj = _resolve_task(task, data_dir)
    source = _read_source(harness_path)
    train = [example.as_train_item() for example in task_obj.load("train")]
    on_call: CallHandler
    recorder: CallRecorder | None = None
    if model is None:
        on_call, window = _no_model, DEFAULT_CONTEXT_WINDOW
    else:
        client = _connect(model)
        recorder = CallRecorder(ModelRef(client))
        on_call, window = recorder, _context_window(client)
    record = ExampleRecord(id="check", input="", target="")
    try:
        Sandbox(source, train, limits or SandboxLimits(), context_window=window, on_call=on_call).close()
    except SandboxFailure as failure:
        record.error = str(failure)
    finally:
        if trace_path is not None and recorder is not None and recorder.calls:
            record.calls = recorder.calls
            write_records([record], trace_path)
    if record.error is not None:
        raise HarnessInvalid(f"{harness_path}: {record.error}")
