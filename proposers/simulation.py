"""How the offline proposer predicts one revision (TPS's state simulation), from the cheapest evidence that exists.

Four sources, tried in order of what they cost:

1. **replay** (free, exact): a chain of revisions that only post-process answers makes its base's calls, so it is
   run on the validation examples its base was scored on through recorded calls (``RunState.replay``). Where
   every example replays, its score there is not predicted but known, and two revisions with the same predictions on
   every example are one program for the search (the merge key is the base and that behaviour). The loop records
   the replay as the committed candidate's first stage, so nobody pays to measure it again.
2. **model-free** (free, exact): a revision of a base whose outputs do not depend on the model's answers is run on
   the base's validation examples with no model call (``RunState.model_free``); when it is model-free too, its
   score there is known, and one whose outputs equal its base's is its base (not proposed).
3. **probe** (``probe_size`` > 0; costs task-model calls, charged to the iteration's budget through
   ``RunState.predicting``): the revision runs on held-out *training* examples and its gain over its base's probe
   is estimated with a prior fitted on the run's probes (``metaharness.proposers.probe``).
4. **prior** (free): what revisions of the same operator family gained over their base in this run, measured on
   paired validation examples (`FamilyGains`); before any was measured, no gain with the default spread.

A prediction says which it came from (``data["predicted_by"]``); its ``repeat`` (the share of its calls that repeat
its base's) is 1.0 after a complete replay, the replayed share after a partial one, and 0.0 otherwise (the loop
then does not try to replay it).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from metaharness.candidate import Candidate
from metaharness.errors import InputError
from metaharness.models.protocol import Usage
from metaharness.planner.graph import Node, NodeId, PlanGraph
from metaharness.planner.program import PREDICTED
from metaharness.planner.subagents import CandidatePlan, PlanningTask, SimulatedStep
from metaharness.proposers.operators import Operator, get_operator
from metaharness.proposers.probe import ChangePrior, PredictionBudgetSpent, ProbeResult, Spread, estimate_change
from metaharness.proposers.program_search import MIN_STD, GainCalibration, base_of, predicted_score
from metaharness.search.model_free import record_outputs
from metaharness.search.protocol import RunState
from metaharness.search.replay import Replay
from metaharness.store.files import read_jsonl

if TYPE_CHECKING:
    from metaharness.proposers.offline import OfflineProposer

DEFAULT_GAIN_SD = 0.1  # the spread of a revision's gain before the run has measured any
FAMILY_WEIGHT = 3.0  # a family's mean gain is shrunk towards the run's as if the run's were this many revisions


def digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def family(name: str) -> str:
    """The family of the operator ``name`` (the name itself for an operator no longer in the library)."""
    try:
        return get_operator(name).kind
    except InputError:
        return name


def chain_ops(node: Node) -> list[str]:
    """The operators on a predicted node's chain since its nearest implemented ancestor ([] for a program that
    exists: its revisions start a new chain)."""
    return list(node.data.get("chain_ops", [])) if node.status == PREDICTED else []


def _scores(candidate: Candidate) -> dict[str, float]:
    ev = candidate.evaluation
    return dict(zip(ev.example_ids, ev.example_scores, strict=False)) if ev else {}


@dataclass(frozen=True)
class FamilyGains:
    """What this run's revisions gained over their base, by operator family, measured on paired validation
    examples: ``means`` per family, shrunk towards no gain with the weight of `FAMILY_WEIGHT` revisions (a family
    the run has not measured is expected to change nothing: the revisions measured so far are the ones that were
    free or chosen, no sample of the rest), and ``sd``, the typical size of a single revision's gain
    (`DEFAULT_GAIN_SD` before 3 were measured). The prior of a revision nothing cheaper predicts."""

    means: Mapping[str, float]
    sd: float = DEFAULT_GAIN_SD
    revisions: int = 0

    @classmethod
    def fit(cls, candidates: Iterable[Candidate]) -> FamilyGains:
        """From every scored candidate whose prediction names its base and the one operator it applied."""
        by_id = {c.id: c for c in candidates}
        gains: dict[str, list[float]] = {}
        for c in by_id.values():
            prediction = c.prediction
            ops = prediction.extra.get("chain_ops") if prediction is not None else None
            base = by_id.get(prediction.base or "") if prediction is not None else None
            if not c.evaluated or base is None or not isinstance(ops, list) or len(ops) != 1:
                continue
            theirs = _scores(base)
            diffs = [s - theirs[i] for i, s in _scores(c).items() if i in theirs]
            if len(diffs) >= 3:
                gains.setdefault(family(str(ops[0])), []).append(sum(diffs) / len(diffs))
        every = [g for values in gains.values() for g in values]
        means = {name: sum(values) / (len(values) + FAMILY_WEIGHT) for name, values in sorted(gains.items())}
        sd = math.sqrt(sum(g * g for g in every) / len(every)) if len(every) >= 3 else DEFAULT_GAIN_SD
        return cls(means, max(MIN_STD, sd), len(every))

    def prior(self, name: str) -> tuple[float, float]:
        """(mean gain, sd) of a revision of the family ``name``."""
        return self.means.get(name, 0.0), self.sd

    def to_json(self) -> dict[str, object]:
        return {
            "means": {k: round(v, 4) for k, v in self.means.items()},
            "sd": round(self.sd, 4),
            "revisions": self.revisions,
        }


class RevisionSimulator:
    """Stage 2 (``StateSimulator``) of the offline proposer: apply each revision and predict it by replay, probe or
    prior (the module docstring). ``simulated`` counts the revisions predicted, ``replayed`` those a complete replay
    scored, ``skipped`` those whose probe the iteration's budget could not afford."""

    def __init__(
        self,
        proposer: OfflineProposer,
        graph: PlanGraph,
        state: RunState,
        calibration: GainCalibration,
        sources: dict[str, str],
        seen: set[str],
        prior: ChangePrior,
        spread: Spread,
        families: FamilyGains,
    ) -> None:
        self.proposer, self.graph, self.state, self.calibration = proposer, graph, state, calibration
        self.sources, self.seen, self.prior, self.spread, self.families = sources, seen, prior, spread, families
        self.candidates = {c.id: c for c in state.candidates}
        self.probing = state.predictions and proposer.prober.size > 0
        self.simulated = 0
        self.replayed = 0
        self.skipped = 0

    def source(self, node_id: NodeId) -> str:
        return self.sources.get(str(node_id)) or self.graph.node(node_id).data.get("source", "")

    def afford_base(self, base: Candidate) -> bool:
        """Whether ``base``'s revisions can be predicted: always without probes; with probes, when its own probe is
        known or affordable (it is run now)."""
        if not self.probing:
            return True
        if not self.proposer.prober.affords(base.source):
            return False
        self.proposer.prober.run(base.source)
        return True

    def simulate(self, task: PlanningTask, plan: CandidatePlan) -> list[SimulatedStep]:
        start = self.graph.node(plan.start)  # type: ignore[arg-type]
        base = base_of(start, self.candidates)
        if base is None:
            return []
        source = self.source(start.id)
        chain = chain_ops(start)
        steps: list[SimulatedStep] = []
        for name in plan.subplans:
            found = next(((o, r, d) for o, r, d in self.proposer.revisions(source) if o.name == name), None)
            if found is None or found[2] in self.seen:
                break
            op, revision, revised = found
            chain = [*chain, name]
            replayable = self.state.replay is not None and all(get_operator(n).post_processing for n in chain)
            free = self.state.model_free is not None and base.evaluation is not None and base.evaluation.model_free
            if replayable:
                step = self._replayed(revision.summary, revision.source, base, chain)
            elif free and (checked := self._model_free(revision.summary, revision.source, base, chain)) is not None:
                step = checked
            else:
                step = self._probed_or_prior(revision.summary, revision.source, base, chain, source, op)
            self.seen.add(revised)
            self.simulated += 1
            steps.append(step)
            source = revision.source
        return steps

    # -- the three sources ------------------------------------------------------------------------------------

    def _common(self, source: str, summary: str, base: Candidate, chain: list[str], how: str) -> dict[str, object]:
        return {
            "source": source,
            "summary": summary,
            "iteration": self.state.iteration,
            "base": base.id,
            "chain_ops": list(chain),
            "family": family(chain[-1]),
            "predicted_by": how,
        }

    def _replayed(self, summary: str, source: str, base: Candidate, chain: list[str]) -> SimulatedStep:
        """A post-processing chain on the base's examples, through recorded calls: exact where it replayed."""
        assert self.state.replay is not None and base.evaluation is not None
        ids = list(base.evaluation.example_ids)
        replay = self.state.replay(source, ids)
        theirs = _scores(base)
        n = max(1, len(ids))
        if replay.evaluation is None:  # nothing replayed (the harness did not load, or changed its calls)
            return self._prior(summary, source, base, chain, get_operator(chain[-1]))
        mean, sd = self.families.prior(family(chain[-1]))
        missed = [i for i in ids if i in set(replay.missed)]
        known = sum(replay.evaluation.example_scores)
        guess = sum(min(1.0, max(0.0, theirs.get(i, base.score) + mean)) for i in missed)
        score = (known + guess) / n
        broken = replay.evaluation.errors > replay.evaluation.examples / 2
        same = replay.complete and _outputs(base, self.state) == replay.outputs
        if replay.complete:
            self.replayed += 1
        key = f"{base.id}|{replay.signature()}" if replay.complete else f"{base.id}|{digest(source)[:16]}"
        share = replay.evaluation.examples / n
        per_example = _per_example(base)
        data = {
            **self._common(source, summary, base, chain, "replay"),
            "hypothesis": _replay_hypothesis(replay, base, n),
            "replay": {
                "examples": replay.evaluation.examples,
                "missed": len(missed),
                "score": round(replay.score, 4),
                "errors": replay.evaluation.errors,
            },
            "same_as_base": same,
            "tokens_per_example": round(per_example.input_tokens + per_example.output_tokens, 1),
            "usd_per_example": round(self.proposer.price.dollars(per_example), 9),
            "repeat": round(share, 4),
            "signature": replay.signature(),
        }
        return SimulatedStep(
            state=f"replayed on {replay.evaluation.examples} of {n} of {base.id}'s examples: {replay.score:.2f}",
            cost=(0.0, 0.0, 0.0),  # an operator writes the revision: implementing it costs no model call
            key=key,
            score=None if broken else round(score, 6),
            std=round(sd * len(missed) / n, 6),
            node_cost=(1.0, 0.0, 0.0),
            data=data,
        )

    def _model_free(self, summary: str, source: str, base: Candidate, chain: list[str]) -> SimulatedStep | None:
        """A revision of a model-free base, scored with no model call on the base's examples when it is model-free
        too (exact, like a complete replay); None when it reads the model's answers on any of them (it is predicted
        otherwise: a score on the free examples alone would stand for all of them at no cost)."""
        assert self.state.model_free is not None and base.evaluation is not None
        ids = list(base.evaluation.example_ids)
        found = self.state.model_free(source, ids)
        if found.evaluation is None or found.trace is None or not found.model_free:
            return None
        outputs = record_outputs(read_jsonl(found.trace))
        before = _outputs(base, self.state)
        same = before is not None and all(json.dumps(before.get(i)) == outputs.get(i) for i in ids)
        signature = hashlib.sha256(json.dumps(sorted(outputs.items())).encode()).hexdigest()[:16]
        self.replayed += 1
        score = found.evaluation.primary
        data = {
            **self._common(source, summary, base, chain, "model-free"),
            "hypothesis": (
                f"its outputs do not depend on the model's answers: scored {score:.3f} on all {len(ids)} of "
                f"{base.id}'s examples with no model call ({base.id}: {base.score:.3f})"
            ),
            "model_free": {
                "examples": found.evaluation.examples,
                "score": round(score, 4),
                "errors": found.evaluation.errors,
                "runs": found.runs,
            },
            "same_as_base": same,
            "tokens_per_example": 0.0,
            "usd_per_example": 0.0,
            "repeat": 1.0,
            "signature": signature,
        }
        broken = found.evaluation.errors > found.evaluation.examples / 2
        return SimulatedStep(
            state=f"model-free: {score:.2f} on {len(ids)} of {base.id}'s examples, no model call",
            cost=(0.0, 0.0, 0.0),
            key=f"{base.id}|{signature}",
            score=None if broken else round(score, 6),
            std=0.0,
            node_cost=(1.0, 0.0, 0.0),
            data=data,
        )

    def _probed_or_prior(
        self, summary: str, source: str, base: Candidate, chain: list[str], before: str, op: Operator
    ) -> SimulatedStep:
        """A probe when probing is on and the iteration's budget affords it (else counted ``skipped``), else the
        prior."""
        if self.probing:
            try:
                return self._probed(summary, source, base, chain, before)
            except PredictionBudgetSpent:
                self.skipped += 1
        return self._prior(summary, source, base, chain, op)

    def _prior(self, summary: str, source: str, base: Candidate, chain: list[str], op: Operator) -> SimulatedStep:
        """No evidence for this program yet: its base's score plus what revisions of its family gained here."""
        mean, sd = self.families.prior(op.kind)
        per_example = _per_example(base)
        examples = max(1, base.evaluation.examples if base.evaluation else 0)
        data = {
            **self._common(source, summary, base, chain, "prior"),
            "hypothesis": (
                f"{op.kind} revisions gained {mean:+.3f} on average over their base in this run (sd {sd:.3f}); "
                f"{base.id} scored {base.score:.3f}"
            ),
            "tokens_per_example": round(per_example.input_tokens + per_example.output_tokens, 1),
            "usd_per_example": round(self.proposer.price.dollars(per_example), 9),
            "repeat": 0.0,
        }
        tokens = float(per_example.input_tokens + per_example.output_tokens) * examples
        return SimulatedStep(
            state=f"not measured: {base.id}'s {base.score:.2f} and its family's mean gain {mean:+.3f}",
            cost=(0.0, 0.0, 0.0),
            key=f"{base.id}|{digest(source)[:16]}",
            score=round(min(1.0, max(0.0, base.score + mean)), 6),
            std=round(sd, 6),
            node_cost=(1.0, tokens, round(self.proposer.price.dollars(per_example) * examples, 6)),
            data=data,
        )

    def _probed(self, summary: str, source: str, base: Candidate, chain: list[str], before: str) -> SimulatedStep:
        """The probe's estimate of the gain over the base's probe (``before`` is the program the revision edits)."""
        prober = self.proposer.prober
        base_probe = prober.run(base.source)
        result = prober.run(source)
        # What the program it edits did on the probe (its base's behaviour when that one was not probed).
        was = (prober.run(before) if prober.known(before) else base_probe).signature()[:16]
        flips = result.flips(base_probe)
        n = max(1, len(result.correct))
        raw_gain = result.score - base_probe.score
        change = estimate_change(result.differences(base_probe), self.prior)
        raw_std = change.std * self.spread.scale
        broken = len(result.errors) > n / 2
        # Cost per validation example when its calls are new: the base's measured tokens per example scaled by the
        # probe's change, priced like the task model.
        ratio = result.tokens / base_probe.tokens if base_probe.tokens else 1.0
        per_example = _per_example(base, ratio)
        examples = max(1, base.evaluation.examples if base.evaluation else 0)
        tokens = float(per_example.input_tokens + per_example.output_tokens)
        usd = self.proposer.price.dollars(per_example)
        signature = result.signature()[:16]
        # Merge key: base and behaviour, where the probe saw the revision change something; a revision the probe
        # saw change nothing is no evidence of being the same program as another quiet one, so it keeps its own.
        key = f"{base.id}|{signature}" + (f"|{digest(source)[:16]}" if signature == was else "")
        return SimulatedStep(
            state=(
                f"probe {result.score:.2f} on {n} held-out training examples ({len(flips['gained'])} gained, "
                f"{len(flips['lost'])} lost vs {base.id}, {len(result.errors)} errors)"
            ),
            cost=(0.0, 0.0, 0.0),
            key=key,
            score=None if broken else predicted_score(base.score, raw_gain, self.calibration),
            std=max(MIN_STD, raw_std, self.calibration.residual),
            node_cost=(1.0, tokens * examples, round(usd * examples, 6)),
            data={
                **self._common(source, summary, base, chain, "probe"),
                "hypothesis": (
                    f"on {n} held-out training examples it gets {len(flips['gained'])} right that {base.id} missed "
                    f"and {len(flips['lost'])} wrong that {base.id} got right "
                    f"(probe {result.score:.2f} vs {base_probe.score:.2f})"
                ),
                "raw_gain": round(raw_gain, 6),
                "probe_std": round(change.std, 6),
                "raw_std": round(raw_std, 6),
                "pair_variance": round(change.pair_variance, 6),
                "tokens_per_example": round(tokens, 1),
                "usd_per_example": round(usd, 9),
                "repeat": round(result.repeat(base_probe), 4),
                "probe": _probe_record(result, base_probe, n),
                "flips": flips,
                "calibration": self.calibration.to_json(),
                "change_prior": self.prior.to_json(),
                "spread": self.spread.to_json(),
                "signature": signature,
                "same_as_base": signature == base_probe.signature()[:16],
            },
        )


def _per_example(base: Candidate, ratio: float = 1.0) -> Usage:
    """The base's measured task-model usage per validation example, scaled by ``ratio``."""
    examples = max(1, base.evaluation.examples if base.evaluation else 0)
    return Usage(
        round(base.cost.get("input_tokens", 0.0) * ratio / examples),
        round(base.cost.get("output_tokens", 0.0) * ratio / examples),
    )


def _probe_record(result: ProbeResult, base_probe: ProbeResult, n: int) -> dict[str, object]:
    return {
        "examples": n,
        "score": round(result.score, 4),
        "base_score": round(base_probe.score, 4),
        "errors": len(result.errors),
        "context_tokens": round(result.context_tokens, 1),
        "tokens": round(result.tokens),
        "new_tokens": round(result.new_tokens),
    }


def _outputs(base: Candidate, state: RunState) -> dict[str, str | None] | None:
    """The base's predictions on its scored validation examples, from its trace (None when it has none)."""
    path = state.trace_path(base)
    if path is None or not path.exists():
        return None
    out: dict[str, str | None] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("id"), str):
            prediction = record.get("prediction")
            out[record["id"]] = prediction if isinstance(prediction, str) else None
    return out


def _replay_hypothesis(replay: Replay, base: Candidate, n: int) -> str:
    assert replay.evaluation is not None
    if replay.complete:
        return (
            f"scored {replay.score:.3f} on all {n} of {base.id}'s examples from recorded calls "
            f"({base.id}: {base.score:.3f})"
        )
    return (
        f"scored {replay.score:.3f} on the {replay.evaluation.examples} of {base.id}'s {n} examples whose calls were "
        "recorded; the rest make new calls"
    )
