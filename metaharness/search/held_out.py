"""The examples no proposer has seen (`HeldOutJudge`): once the last iteration is done they choose the candidate
the run returns among the search's best contenders (``confirm`` examples), score it (``judge`` examples) and judge
it against the best seed and the no-model baseline (a ``judgement`` line, ``metaharness.search.judgement``). Only
the final contenders are worth confirming: choosing after every iteration paid for contenders a later iteration
beat (in the main job, a third of its held-out spend). A held-out score is scored with no model call where the
outputs ignore the model's answers, and is never shown to a proposer."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from metaharness import frontier
from metaharness.candidate import Candidate, Evaluation
from metaharness.evaluation.protocol import CandidateEvaluator
from metaharness.search.events import LoopEvents
from metaharness.search.judgement import Judged, comparisons
from metaharness.search.model_free import ModelFreeCheck
from metaharness.search.staging import ExampleOrder, paired, sample_variance, trace_outputs
from metaharness.search.traces import merge_trace
from metaharness.search.train_folds import TrainFolds
from metaharness.store.files import atomic_write_text
from metaharness.store.log import JudgementLine, SplitLine
from metaharness.store.protocol import RunStore

# How many of the search's best the held-out confirm examples choose the returned candidate among.
CONTENDERS = 2
# How many model-free candidates in the running are scored on the training folds (each costs a build and three
# predictions per training example in the sandbox, no token).
FOLDED = 8

# The no-model baseline on validation examples: their primary scores (in the order asked) and its settings.
Baseline = Callable[[Sequence[str]], tuple[list[float], dict[str, object]]]


class HeldOutJudge:
    """Chooses and judges on ``order``'s held-out examples (module docstring): ``evaluator`` scores what
    ``model_free`` (when given) cannot score with no model call, ``baseline`` (when given) is the no-model baseline
    of the judgement, ``check_stop`` raises at a safe point when the user asked to stop, ``progress`` is told of
    every example scored; ``train_folds`` orders tied model-free contenders by training folds (`contenders`)."""

    def __init__(
        self,
        store: RunStore,
        evaluator: CandidateEvaluator,
        events: LoopEvents,
        order: ExampleOrder,
        model_free: ModelFreeCheck | None,
        baseline: Baseline | None,
        check_stop: Callable[[], None],
        progress: Callable[[int, int], None],
        *,
        train_folds: bool = False,
    ) -> None:
        self.store, self.evaluator, self.events, self.order = store, evaluator, events, order
        self.model_free, self.baseline, self.check_stop, self.progress = model_free, baseline, check_stop, progress
        self.train_folds = train_folds
        self.folds: TrainFolds | None = None

    def choose(self) -> None:
        """Choose the candidate the run returns and score it on examples no proposer has seen (when the run holds
        some out): the search's best contenders (`contenders`) not confirmed yet are scored on the held-out
        ``confirm`` examples, which makes the best the highest confirmed score (``metaharness.frontier.best``), and
        the best, once chosen, on the ``judge`` examples (once per candidate, saved as its ``holdout`` result)."""
        if not self.order.confirm and not self.order.judge:
            return
        for candidate in self.contenders() if self.order.confirm else []:  # a holdout of 1 or 2 has no confirm third
            self.check_stop()
            assert candidate.evaluation is not None
            confirm = self.score(candidate, "confirm", self.order.confirm)
            evaluation = dataclasses.replace(candidate.evaluation, confirm=confirm)  # and its folds, if scored
            self.store.record_confirmation(dataclasses.replace(candidate, evaluation=evaluation))
        best = frontier.best(self.store.candidates())
        if best is None or not self.order.judge or self.store.split_result(best.id, "holdout") is not None:
            return
        self.check_stop()
        self.store.save_split_result(best.id, "holdout", self.score(best, "holdout", self.order.judge))

    def contenders(self) -> list[Candidate]:
        """The supported candidates the held-out examples must choose among, not confirmed yet: the ``CONTENDERS``
        best with distinct outputs (a candidate whose outputs equal a better one's is that one), leaving out any
        whose paired deficit to the top on the validation examples is more than two standard errors (no contender on
        this evidence). With ``train_folds``, the model-free candidates among them are first scored by
        cross-validation on the training examples (``metaharness.search.train_folds``), which they then carry
        (``Evaluation.folds``), and the candidates are ordered by all their evidence pooled
        (``metaharness.frontier.evidence``)."""
        ranked = sorted((c for c in self.store.candidates() if c.supported), key=lambda c: -c.score)
        near: list[Candidate] = []
        for candidate in ranked:
            behind = paired(ranked[0], candidate)  # the top's paired lead, example by example
            lead = sum(behind) / len(behind) if behind else 0.0
            spread = math.sqrt(sample_variance(behind) / len(behind)) if len(behind) > 1 else 0.0
            if lead <= 2 * spread + 1e-12:
                near.append(candidate)
        outputs = {c.id: self._outputs(c) for c in near}
        chosen = sorted(self._with_folds(_distinct(near, outputs)), key=frontier.evidence, reverse=True)[:CONTENDERS]
        return [c for c in chosen if c.evaluation is not None and c.evaluation.confirm is None]

    def _outputs(self, candidate: Candidate) -> dict[str, str]:
        path = self.store.path / candidate.trace if candidate.trace is not None else None
        return trace_outputs(path) if path is not None else {}

    def _with_folds(self, near: list[Candidate]) -> list[Candidate]:
        """``near`` (distinct outputs, best validation score first) with training-fold scores for its ``FOLDED`` best
        model-free candidates; the model-free ones after those leave the running, since a validation score alone
        would be weighed against the others' pooled evidence. Each program is scored once, a ``"folds"`` line
        logged, and one that carries a score keeps it."""
        if not self.train_folds or self.model_free is None:
            return near
        model_free = [c for c in near if c.evaluation is not None and c.evaluation.model_free]
        left = {c.id for c in model_free[FOLDED:]}
        near = [c for c in near if c.id not in left]
        asked = [c for c in model_free[:FOLDED] if c.evaluation is not None and c.evaluation.folds is None]
        if not asked:
            return near
        self.check_stop()
        if self.folds is None:  # made once the stand-ins have learnt the run's answers
            self.folds = TrainFolds(self.model_free)
        for candidate in asked:
            self.events.candidate_started(candidate.id, f"training folds x{len(self.folds.folds)}", candidate.summary)
        scored = dict(zip((c.id for c in asked), self.folds.scores([c.source for c in asked]), strict=True))
        for cid, folds in scored.items():
            if folds is not None:
                self.store.log(SplitLine("folds", cid, folds))
        return [
            dataclasses.replace(c, evaluation=dataclasses.replace(c.evaluation, folds=scored[c.id]))
            if c.id in scored and c.evaluation is not None
            else c
            for c in near
        ]

    def score(self, candidate: Candidate, split: str, ids: Sequence[str]) -> Evaluation:
        """``candidate`` scored on the held-out examples ``ids`` (its records under ``split``): with no model call
        on those whose outputs ignore the model's answers (all of them for a model-free candidate, checked again
        here), by the evaluator on the rest."""
        self.events.candidate_started(candidate.id, f"{split} +{len(ids)}", candidate.summary)
        trace = self.store.trace_path(candidate.id, split)
        found = self.model_free(candidate.source, ids) if self.model_free is not None else None
        free = found.evaluation if found is not None and found.trace is not None else None
        rest = [i for i in ids if free is None or i not in free.example_ids]
        if free is not None and found is not None and found.trace is not None:
            atomic_write_text(trace, found.trace.read_text(encoding="utf-8"))
        if not rest:
            assert free is not None
            return dataclasses.replace(free, split=split)
        part = trace.with_name(f"{candidate.id}.{split}.part.jsonl")
        harness = self.store.work_file(candidate.id, candidate.source)
        paid = self.evaluator.evaluate(harness, "val", trace_path=part, progress=self.progress, examples=rest)
        merge_trace(trace, part, keep=list(free.example_ids) if free is not None else [])
        evaluation = free.merge(paid) if free is not None else paid
        return dataclasses.replace(evaluation, split=split, model_free=False)

    def judgement(self) -> None:
        """Once the last iteration is done: the returned candidate, the best seed and the baseline on the judge
        examples, paired, logged as a ``JudgementLine`` (not again while the last one judged the same candidate)."""
        judge = list(self.order.judge)
        candidates = self.store.candidates()
        returned = frontier.best(candidates)
        if not judge or returned is None:
            return
        done = [line.get("scores") for line in self.store.log_records(JudgementLine.kind)]
        if any(isinstance(d, dict) and d.get("returned", {}).get("id") == returned.id for d in done[-1:]):
            return  # judged already (a rerun of a finished run)
        seed = frontier.best([c for c in candidates if c.iteration == 0])
        judged = [self._judged("returned", returned, judge)]
        if seed is not None:
            judged.append(self._judged("best seed", seed, judge))
        settings: dict[str, object] = {}
        if self.baseline is not None:
            scores, settings = self.baseline(judge)
            judged.append(Judged("baseline", None, tuple(scores)))
        self.store.log(
            JudgementLine(
                max(self.store.completed_iterations(), default=0),
                len(judge),
                {j.name: {"id": j.id, "score": round(j.score, 4)} for j in judged},
                comparisons(judged[0], judged[1:]),
                settings,
            )
        )

    def _judged(self, name: str, candidate: Candidate, judge: list[str]) -> Judged:
        """``candidate``'s scores on the judge examples, in their order (scored and saved once, if not yet)."""
        evaluation = self.store.split_result(candidate.id, "holdout")
        if evaluation is None:
            self.check_stop()
            evaluation = self.score(candidate, "holdout", judge)
            self.store.save_split_result(candidate.id, "holdout", evaluation)
        scores = dict(zip(evaluation.example_ids, evaluation.example_scores, strict=False))
        return Judged(name, candidate.id, tuple(scores.get(i, 0.0) for i in judge))

    def judged_score(self, best: Candidate | None) -> float | None:
        """``best``'s score on the judge examples, once saved."""
        judged = self.store.split_result(best.id, "holdout") if best is not None else None
        return judged.primary if judged is not None else None


def _distinct(candidates: list[Candidate], outputs: dict[str, dict[str, str]]) -> list[Candidate]:
    """``candidates`` without any whose outputs equal an earlier one's."""
    kept: list[Candidate] = []
    for candidate in candidates:
        if not any(outputs[candidate.id] == outputs[k.id] for k in kept):
            kept.append(candidate)
    return kept
