"""Free evidence (`FreeEvidence`): what the loop scores of a new candidate before any policy decides, at no cost.

A candidate whose outputs do not depend on the model's answers is scored with no model call
(``metaharness.search.model_free``: its whole share when it is model-free, else the examples where its outputs
ignore the answers); otherwise it is replayed (``metaharness.search.replay``) on the examples its nearest evaluated
ancestor was scored on, through a model that answers only calls the run already made, and the examples whose
every call was recorded become its first stage. A revision that only post-processes answers is so scored on its
parent's whole share, and no policy pays for it.

The model-free check loads the program, so it is also the new candidate's load check: the loop commits a candidate
it will check here without loading it first (a load of a label block's harness trains its classifiers: it was half
of a LawBench iteration's time to do it twice), and only a program that does not load over the stand-in is loaded
again with the real model (``check``), and recorded failed when that fails too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from metaharness.candidate import Candidate
from metaharness.search.events import LoopEvents
from metaharness.search.model_free import ModelFree, ModelFreeCheck
from metaharness.search.protocol import ReplayFunction
from metaharness.search.stages import FreeFacts, StagedEvaluation
from metaharness.search.staging import evaluated_ancestor
from metaharness.store.crash import crash_point
from metaharness.store.files import atomic_write_text, read_jsonl
from metaharness.store.log import FreeChecks
from metaharness.store.protocol import RunStore


class FreeEvidence:
    """Scores new candidates for free (module docstring) through ``stages`` (which records each as a stage), with
    ``model_free`` and ``replay`` when given; counts what it scored and what its checks cost, for the record.
    ``check(candidate, iteration)``: the candidate's load error with the real model, or None (what it spent is
    logged by the caller); asked only of a candidate the model-free check could not load."""

    def __init__(
        self,
        store: RunStore,
        stages: StagedEvaluation,
        events: LoopEvents,
        model_free: ModelFreeCheck | None,
        replay: ReplayFunction | None,
        check_stop: Callable[[], None],
        check: Callable[[Candidate, int], str | None],
    ) -> None:
        self.store, self.stages, self.events, self.check_stop = store, stages, events, check_stop
        self.model_free, self.replay, self.check = model_free, replay, check
        self._replayed: dict[str, int] = {}  # candidate -> examples its replay scored (this session)
        self._model_free: dict[str, int] = {}  # candidate -> examples scored with no model call (this session)
        self._checks: dict[int, FreeChecks] = {}  # iteration -> what its model-free checks cost

    def score(self, iteration: int, planned: list[str]) -> None:
        """Score what can be scored for free before any policy decides: each candidate of ``planned`` (the
        iteration's, intermediates of a chain too) not scored yet, with no model call when its outputs do not
        depend on the model's answers (its whole share), else on the recorded calls it repeats (a rerun after a kill
        does what is left). The model-free checks run first, one per CPU."""
        if self.model_free is not None:
            by_id = {c.id: c for c in self.store.candidates()}
            new = [by_id[cid] for cid in planned if cid in by_id and not (by_id[cid].failed or by_id[cid].evaluated)]
            self.model_free.prefetch([(c.source, self.stages.order.search) for c in new])
        for cid in planned:
            self.check_stop()
            by_id = {c.id: c for c in self.store.candidates()}
            candidate = by_id.get(cid)
            if candidate is None or candidate.failed or candidate.evaluated:
                continue
            found = self._model_free_evidence(candidate, iteration)
            if found is not None and found.model_free:
                continue
            if found is not None and found.load_error is not None:
                error = self.check(candidate, iteration)
                if error is not None:
                    self.stages.record_failure(candidate, error)
                    continue
            self._replay_evidence(candidate, iteration)

    def learn(self) -> None:
        """Give the stand-ins every response the run's traces hold; asked when an iteration starts, so that the
        proposer's checks of its revisions and the loop's checks of the candidates they become ask with the same
        answers (the second is the first's result, at no cost)."""
        if self.model_free is not None:
            self.model_free.learn(self._recorded_responses())

    def facts(self, iteration: int) -> FreeFacts:
        """What the free evidence did this session to ``iteration``'s candidates, and its checks, for the
        iteration's line."""
        mine = {c.id for c in self.store.candidates() if c.iteration == iteration}
        replayed = {cid: n for cid, n in self._replayed.items() if cid in mine}
        model_free = {cid: n for cid, n in self._model_free.items() if cid in mine}
        return FreeFacts(replayed, model_free, self._checks.get(iteration, FreeChecks()))

    def _recorded_responses(self) -> list[str]:
        """The task model's responses in the run's traces, in candidate order (forms of answer the harnesses were
        written to read: what the model-free check's stand-ins answer with)."""
        out: list[str] = []
        for c in self.store.candidates():
            if c.trace is None or c.evaluation is None or c.evaluation.model_free:
                continue
            for record in read_jsonl(self.store.path / c.trace):
                calls = record.get("calls")
                for call in calls if isinstance(calls, list) else []:
                    if isinstance(call, dict) and isinstance(call.get("response"), str):
                        out.append(call["response"])
        return out

    def _model_free_evidence(self, candidate: Candidate, iteration: int) -> ModelFree | None:
        """Record, with no model call, the candidate's search examples whose outputs do not depend on the model's
        answers (``metaharness.search.model_free``); what the check found (None without a check)."""
        if self.model_free is None:
            return None
        found = self.model_free(candidate.source, list(self.stages.order.search))
        checks = self._checks.setdefault(iteration, FreeChecks())
        self._checks[iteration] = checks.add(found.seconds, found.runs, found.model_free)
        if found.evaluation is None or found.trace is None:
            return found
        crash_point("candidate:evaluated")
        what = "model-free" if found.model_free else "their outputs ignore the model's answers"
        self.events.candidate_started(
            candidate.id, f"val +{found.evaluation.examples} ({what}: no model call)", candidate.summary
        )
        part = self.store.trace_path(candidate.id, "val").with_name(f"{candidate.id}.val.part.jsonl")
        atomic_write_text(part, found.trace.read_text(encoding="utf-8"))
        self.stages.record(candidate, found.evaluation, part, iteration)
        self._model_free[candidate.id] = found.evaluation.examples
        return found

    def _replay_evidence(self, candidate: Candidate, iteration: int) -> None:
        """Record, at no cost, the candidate's scores on the search examples its nearest evaluated ancestor was
        scored on, and it is not yet, wherever every call it makes there is one the run already made (the module
        docstring)."""
        if self.replay is None:
            return
        by_id = {c.id: c for c in self.store.candidates()}
        candidate = by_id.get(candidate.id, candidate)
        base = evaluated_ancestor(candidate, by_id)
        if base is None or base.evaluation is None:
            return
        search = set(self.stages.order.search)
        scored = set(candidate.evaluation.example_ids) if candidate.evaluation else set()
        ids = [i for i in base.evaluation.example_ids if i in search and i not in scored]
        replay = self.replay(candidate.source, ids)
        if replay.evaluation is None or replay.trace is None:
            return
        self.events.candidate_started(candidate.id, f"val +{replay.evaluation.examples} (replayed)", candidate.summary)
        part = self.store.trace_path(candidate.id, "val").with_name(f"{candidate.id}.val.part.jsonl")
        atomic_write_text(part, replay.trace.read_text(encoding="utf-8"))
        self.stages.record(candidate, dataclasses.replace(replay.evaluation), part, iteration)
        self._replayed[candidate.id] = replay.evaluation.examples
