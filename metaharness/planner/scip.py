"""SCIP under a wall-clock deadline that holds whatever SCIP is doing (used by both ILPs).

SCIP's own time limit (``limits/time``) is checked only at certain points of its search, and its clock does not see
creating the transformed problem or freeing the model: on a loaded machine a 10 s limit ran to 10.4 s. So a limited
ILP runs its model building and SCIP in a worker thread, SCIP with the GIL released (``Model.optimizeNogil``), and
the caller's thread waits for the worker only until the deadline. An event handler (``watch``) hands every new
incumbent to the worker's record as SCIP finds it; when the deadline comes first, the caller takes the best plan
recorded so far and returns, and the worker interrupts SCIP at its next event (``Model.interruptSolve``) and frees
the model in the background. The return therefore waits on reading the record, never on SCIP. What can still delay it is
the worker holding the GIL: the cyclic garbage collector, which over a model of hundreds of thousands of variables
held it for up to 0.7 s at load 7, is paused while a limited solve runs (``pause_gc``; the interpreter's
switch, so other threads go without it for those seconds), and the caller leaves ``RETURN_MARGIN`` early.

What runs after the caller left still takes CPU, and freeing a large model holds the GIL for a good part of a
second: ``join_workers`` waits for it (benchmarks call it so that the next measurement does not pay for it).
Without a deadline the work runs in the caller's thread and frees the model before returning.
"""

from __future__ import annotations

import functools
import gc
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pyscipopt is imported on first use, as the ILPs import it
    from pyscipopt import Model
    from pyscipopt.scip import Event, Solution

# The caller's thread stops waiting this long before the deadline (at most a tenth of the limit): the time to wake
# and take the GIL on a loaded machine (up to 0.07 s measured at load 7 on 2 CPUs), read the record and check the plan.
RETURN_MARGIN = 0.1

_workers: set[threading.Thread] = set()
_workers_lock = threading.Lock()


class Job:
    """One limited solve: the worker's record (read by the caller under a lock) and the signals between the two.

    ``clock`` is the clock ``deadline`` is on (``time.perf_counter``). The worker calls ``record`` as it goes and
    ``late`` between units of work; the caller reads ``snapshot``.
    """

    def __init__(self, deadline: float, clock: Callable[[], float]) -> None:
        self.deadline = deadline
        self.clock = clock
        self.leaves = deadline  # when the caller stops waiting (run_until sets it)
        self.left = threading.Event()  # the caller has returned: stop as soon as possible, then free the model
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._models: list[Model] = []
        self._record: dict[str, Any] = {}
        self._lock = threading.Lock()

    def late(self) -> bool:
        """Whether the work should stop: the deadline has passed or the caller has left."""
        return self.left.is_set() or self.clock() > self.deadline

    def remaining(self) -> float:
        """Seconds until the caller stops waiting (SCIP's own limit, so that it usually stops by itself first)."""
        return max(0.0, self.leaves - self.clock())

    def record(self, **entries: Any) -> None:
        with self._lock:
            self._record.update(entries)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._record)

    def own(self, model: Model) -> None:
        """Free ``model`` when the work is over and the caller has read the record (freeing holds the GIL, so the
        caller must not be waiting for it)."""
        self._models.append(model)

    def _free(self) -> None:
        for model in self._models:
            if hasattr(model, "free"):  # pyscipopt 6; before, a model goes with its last reference
                model.free()
        self._models.clear()


def run_until(deadline: float, clock: Callable[[], float], work: Callable[[Job], None]) -> tuple[Job, bool]:
    """Run ``work(job)`` until it returns or ``deadline`` (on ``clock``) nears; returns the job and whether the work
    finished. An error the work raised is raised here when it finished in time. Without a finite deadline the work
    runs in the caller's thread."""
    job = Job(deadline, clock)
    if not math.isfinite(deadline):
        try:
            work(job)
        finally:
            job.done.set()
            job._free()
        return job, True

    def target() -> None:
        try:
            work(job)
        except BaseException as exc:  # handed to the caller if it is still waiting
            job.error = exc
        finally:
            job.done.set()
            job.left.wait()
            try:
                job._free()
            finally:
                resume_gc()
                with _workers_lock:
                    _workers.discard(thread)

    now = clock()  # before the worker runs: it may move an injected clock
    job.leaves = deadline - min(RETURN_MARGIN, 0.1 * max(0.0, deadline - now))
    wait = max(0.0, job.leaves - now)
    resume_gc = pause_gc()  # until the caller has left and the model is freed
    thread = threading.Thread(target=target, name="metaharness-scip", daemon=True)
    with _workers_lock:
        _workers.add(thread)
    try:
        thread.start()
    except BaseException:
        resume_gc()
        raise
    try:
        finished = job.done.wait(wait)
    finally:
        job.left.set()
    if finished and job.error is not None:
        raise job.error
    return job, finished


_paused = 0
_paused_lock = threading.Lock()
_collecting = True


def pause_gc() -> Callable[[], None]:
    """Pause the cyclic garbage collector while a limited solve runs (its model has hundreds of thousands of SCIP
    variables: a full collection then holds the GIL for up to 0.7 s on a loaded machine, and the caller could not
    leave in time); returns the function that resumes it (idempotent), which the worker calls once the caller has
    left. The switch is the interpreter's: paused while any limited solve runs, then restored as it was."""
    global _paused, _collecting
    with _paused_lock:
        if _paused == 0:
            _collecting = gc.isenabled()
            gc.disable()
        _paused += 1
    resumed = False

    def resume() -> None:
        global _paused
        nonlocal resumed
        with _paused_lock:
            if resumed:
                return
            resumed = True
            _paused -= 1
            if _paused == 0 and _collecting:
                gc.enable()

    return resume


def join_workers(timeout: float | None = None) -> None:
    """Wait until the workers of earlier limited solves have stopped and freed their models."""
    with _workers_lock:
        running = list(_workers)
    for thread in running:
        thread.join(timeout)


def watch(
    model: Model,
    job: Job,
    found: Callable[[Model, Solution], None],
    progress: Callable[[Model], None] | None = None,
) -> None:
    """Include in ``model`` an event handler that calls ``found(model, solution)`` for every new incumbent (and
    ``progress(model)``, if given, at every event) and interrupts SCIP once ``job.late()``. It listens to new
    incumbents, node focus, solved LPs and presolving rounds: the points where SCIP can stop."""
    handler = _incumbents_class()(job, found, progress)
    model.includeEventhdlr(handler, "metaharness-incumbents", "incumbents and the deadline")


@functools.cache
def _incumbents_class() -> type:
    from pyscipopt import SCIP_EVENTTYPE, Eventhdlr  # imported on first use, as the ILPs import pyscipopt

    kinds = (
        SCIP_EVENTTYPE.BESTSOLFOUND,
        SCIP_EVENTTYPE.NODEFOCUSED,
        SCIP_EVENTTYPE.LPSOLVED,
        SCIP_EVENTTYPE.PRESOLVEROUND,
    )

    class Incumbents(Eventhdlr):
        def __init__(
            self, job: Job, found: Callable[[Model, Solution], None], progress: Callable[[Model], None] | None
        ) -> None:
            self.job = job
            self.found = found
            self.progress = progress

        def eventinit(self) -> None:
            for kind in kinds:
                self.model.catchEvent(kind, self)

        def eventexec(self, event: Event) -> None:
            if event.getType() == SCIP_EVENTTYPE.BESTSOLFOUND:
                self.found(self.model, self.model.getBestSol())
            if self.progress is not None:
                self.progress(self.model)
            if self.job.late():
                self.model.interruptSolve()

    return Incumbents


def optimize(model: Model, job: Job) -> str:
    """Solve with SCIP's own limit set to the time left (wall clock) and the GIL released; SCIP's status."""
    if math.isfinite(job.deadline):
        model.setParam("timing/clocktype", 2)
        model.setParam("limits/time", job.remaining())
    model.optimizeNogil()
    return str(model.getStatus())
