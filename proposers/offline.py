"""The offline proposer: TPS over program space with no hosted model.

One iteration, as the four TPS stages plus the solver:

1. multi-plan sampling: revisions of the frontier (the best evaluated candidates) drawn from the operator library
   (:mod:`.operators`), diverse across operators;
2. state simulation, by execution: each predicted candidate runs on a few held-out training examples with the task
   model (:mod:`.probe`); its predicted validation score is its parent's measured score plus the probe difference,
   its uncertainty grows with the number of probe examples that flip, its cost is scaled from the parent's
   measured cost. The most promising predicted candidates are extended level by level, one revision at a time,
   into chains of up to ``depth`` revisions (default 3);
3. merging: candidates with identical predictions on every probe example are one node;
4. labels: +1 predicted to beat the best score, -1 dead end (the probe mostly errors), 0 otherwise.

The selection strategy (the ILP by default; ``greedy``, ``random``, ``best_of_n`` as baselines) then chooses what
the loop evaluates on val. Every proposal carries its full prediction (score, uncertainty, flips, probe numbers,
cost, chain) for the predicted-vs-actual study. Nothing here reads the validation split.
"""

from __future__ import annotations

import hashlib
import math
import random

from metaharness.candidate import Candidate
from metaharness.errors import InputError
from metaharness.models.prices import FREE, Price, PriceTable
from metaharness.models.types import ModelClient, Usage
from metaharness.proposal import Proposal, RunState
from metaharness.proposers.operators import Operator, answer_profile, applicable
from metaharness.proposers.probe import Prober, ProbeResult
from metaharness.proposers.program_plan import DEAD_END, Calibration, Predicted, calibrate, label, plan, proposal_for
from metaharness.tasks.task import Task

MIN_STD = 0.03  # a probe of a dozen examples never pins a score down better than this


def task_model_price(model: ModelClient | str) -> Price:
    """What the task model's tokens cost (its ledger's price table, else the built-in one); free for local and
    self-hosted models, and for a model whose price is unknown (the prediction then says 0 dollars)."""
    ledger = getattr(model, "ledger", None)
    table = ledger.prices if ledger is not None else PriceTable()
    try:
        return table.lookup(model if isinstance(model, str) else model.spec) or FREE
    except InputError:  # not a provider spec (a stand-in model): nothing to price
        return FREE


def _digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


class OfflineProposer:
    """Plans revisions from the operator library, predicts them by probing, and lets the solver choose.

    ``task``: the :class:`~metaharness.tasks.Task`; ``task_model``: a ModelClient or spec string (the fixed task
    model, used for the probe); ``selection``: ``ilp`` | ``greedy`` | ``random`` | ``best_of_n``; ``plans``: depth-1
    revisions sampled per iteration (M); ``extend``: how many of the best are extended at each level
    (``extensions`` each); ``depth``: the longest revision chain; ``frontier``: how many top candidates are
    revised; ``probe_size``: held-out training examples per probe; ``operators``: restrict the library to these
    operator names; ``probe_tokens``: the iteration's budget of task-model prompt tokens for probing (a revision
    that changes the prompt costs about ``probe_size`` x its parent's prompt size; one that only post-processes
    answers reuses its parent's cached calls and costs nothing). The defaults keep an iteration small enough for
    CPU-only runs of the embedded model.
    """

    def __init__(
        self,
        task: Task,
        task_model: ModelClient | str,
        *,
        selection: str = "ilp",
        plans: int = 6,
        extend: int = 2,
        extensions: int = 1,
        depth: int = 3,
        frontier: int = 2,
        probe_size: int = 8,
        operators: list[str] | None = None,
        probe_tokens: float = 40_000,
        seed: int = 0,
        workers: int | None = None,
        probe_dir: str | None = None,
    ) -> None:
        self.name = "offline" if selection == "ilp" else f"offline-{selection.replace('_', '-')}"
        self.task = task
        self.selection = selection
        self.plans, self.extend, self.extensions, self.frontier = plans, extend, extensions, frontier
        self.depth = max(1, depth)
        self.seed = seed
        self.prober = Prober(task, task_model, size=probe_size, seed=seed, workers=workers, folder=probe_dir)
        self.profile = answer_profile(self.prober.held_out.rest)
        self.operators = set(operators) if operators else None
        self.probe_tokens = probe_tokens
        self._spent = 0.0
        self.price = task_model_price(task_model)
        self._exhausted: set[str] = set()  # digests of sources whose every revision is a known candidate

    def _afford(self, parent: Candidate, op: Operator | None) -> bool:
        """Charge the probe of a revision of ``parent`` by ``op`` (``None``: the parent itself) if the budget allows."""
        if op is not None and op.post_processing:
            return True
        if op is None and self.prober.known(parent.source):
            return True
        cost = self.prober.size * (parent.cost.get("context_tokens") or 1000.0)
        if self._spent + cost > self.probe_tokens:
            return False
        self._spent += cost
        return True

    def _untried(self, source: str, known: set[str]) -> bool:
        """Whether some applicable revision of ``source`` is not a known candidate (remembered once exhausted:
        known candidates only grow)."""
        digest = _digest(source)
        if digest in self._exhausted:
            return False
        if any(_digest(op.apply(source).source) not in known for op in self._applicable(source)):
            return True
        self._exhausted.add(digest)
        return False

    def _applicable(self, source: str) -> list[Operator]:
        ops = applicable(source, self.profile)
        return [op for op in ops if self.operators is None or op.name in self.operators]

    # ------------------------------------------------------------------ stages

    def _sample_revisions(self, parents: list[Candidate], rng: random.Random) -> list[tuple[Candidate, Operator]]:
        """Stage 1: up to ``plans`` (parent, operator) pairs, round-robin over parents, no operator twice in a row."""
        options = {p.id: self._applicable(p.source) for p in parents}
        for ops in options.values():
            rng.shuffle(ops)
        picked: list[tuple[Candidate, Operator]] = []
        while len(picked) < self.plans and any(options.values()):
            for parent in parents:
                if options[parent.id] and len(picked) < self.plans:
                    picked.append((parent, options[parent.id].pop()))
        return picked

    def _predict(
        self,
        key: str,
        parent_key: str,
        summary: str,
        source: str,
        base: Candidate,
        base_probe: ProbeResult,
        calibration: Calibration,
    ) -> Predicted:
        """Stage 2: probe the candidate and turn the result into a predicted val score, uncertainty and cost: the
        base's measured score plus the probe difference, scaled by how well earlier predictions held."""
        result = self.prober.run(source)
        flips = result.flips(base_probe)
        n = max(1, len(result.correct))
        changed = len(flips["gained"]) + len(flips["lost"])
        score = min(1.0, max(0.0, base.score + calibration.slope * (result.score - base_probe.score)))
        # Evaluation cost: the base's measured tokens scaled by the probe's change, priced like the task model.
        ratio = result.tokens / base_probe.tokens if base_probe.tokens else 1.0
        usage = Usage(
            round(base.cost.get("input_tokens", 0.0) * ratio), round(base.cost.get("output_tokens", 0.0) * ratio)
        )
        tokens = usage.input_tokens + usage.output_tokens
        return Predicted(
            key=key,
            parent=parent_key,
            summary=summary,
            score=score,
            std=max(MIN_STD, math.sqrt(changed) / n, calibration.residual),
            eval_cost={"tokens": float(tokens), "usd": round(self.price.dollars(usage), 6)},
            source=source,
            hypothesis=(
                f"on {n} held-out training examples it gets {len(flips['gained'])} right that {base.id} missed and "
                f"{len(flips['lost'])} wrong that {base.id} got right "
                f"(probe {result.score:.2f} vs {base_probe.score:.2f})"
            ),
            details={
                "base": base.id,
                "probe": {
                    "examples": n,
                    "score": round(result.score, 4),
                    "base_score": round(base_probe.score, 4),
                    "errors": len(result.errors),
                    "context_tokens": round(result.context_tokens, 1),
                },
                "flips": flips,
                "calibration": {
                    "slope": calibration.slope,
                    "residual": calibration.residual,
                    "pairs": calibration.pairs,
                },
                "signature": result.signature()[:16],
            },
        )

    def _merge(self, predicted: list[Predicted], probes: dict[str, ProbeResult]) -> list[Predicted]:
        """Stage 3: one node per behaviour. A candidate that behaves like an earlier one on every probe example is
        folded into it (its operator chain is recorded under ``merged``); the shorter chain is kept."""
        kept: dict[str, Predicted] = {}
        alias: dict[str, str] = {}
        out = []
        for p in sorted(predicted, key=lambda q: len(q.details["chain_ops"])):  # parents before their extensions
            p.parent = alias.get(p.parent, p.parent)
            signature = p.details["signature"]
            same = kept.get(signature)
            if same is not None and same.details["base"] == p.details["base"]:
                same.details.setdefault("merged", []).append(" -> ".join(p.details["chain_ops"]))
                alias[p.key] = same.key
                continue
            p.details["same_as_base_on_probe"] = signature == probes[p.details["base"]].signature()[:16]
            kept[signature] = p
            out.append(p)
        return out

    # ------------------------------------------------------------------ the iteration

    def propose(self, state: RunState) -> list[Proposal]:
        evaluated = sorted(state.evaluated(), key=lambda c: -c.score)
        if not evaluated or state.evals_left < 1:
            return []
        rng = random.Random(self.seed * 1009 + state.iteration)
        known = {_digest(c.source) for c in state.candidates}
        # The frontier: the best evaluated candidates that still have a revision nobody has tried, so the search
        # moves down the ranking instead of idling once the top candidates' revisions are all known.
        parents: list[Candidate] = []
        for cand in evaluated:
            if len(parents) >= self.frontier:
                break
            if all(_digest(cand.source) != _digest(p.source) for p in parents) and self._untried(cand.source, known):
                parents.append(cand)
        if not parents:
            return []
        self._spent = 0.0
        parents = [p for p in parents if self._afford(p, None)] or parents[:1]
        probes = {p.id: self.prober.run(p.source) for p in parents}
        best = evaluated[0].score
        calibration = calibrate(state)

        predicted: list[Predicted] = []
        seen = set(known)
        skipped = 0

        def add(parent_key: str, base: Candidate, source: str, op: Operator, chain: list[str]) -> bool:
            """Predict ``op`` applied to ``source`` (``chain``: its operators so far) unless the result is known."""
            revision = op.apply(source)
            digest = _digest(revision.source)
            if digest in seen:
                return False
            seen.add(digest)
            node = self._predict(
                f"~{len(predicted)}", parent_key, revision.summary, revision.source, base, probes[base.id], calibration
            )
            node.details["chain_ops"] = [*chain, op.name]
            predicted.append(node)
            return True

        over_budget: list[tuple[Candidate, Operator]] = []
        for parent, op in self._sample_revisions(parents, rng):
            if not self._afford(parent, op):
                skipped += 1
                over_budget.append((parent, op))
                continue
            add(parent.id, parent, parent.source, op, [])
        # An iteration is never left empty for the probe budget's sake: then one revision is probed beyond it.
        for parent, op in over_budget:
            if predicted:
                break
            self._spent += self.prober.size * (parent.cost.get("context_tokens") or 1000.0)
            skipped -= add(parent.id, parent, parent.source, op, [])

        # Stage 2b: extend the most promising predicted candidates, level by level, up to ``depth`` revisions.
        level = list(predicted)
        for _ in range(self.depth - 1):
            promising = sorted((p for p in level if p.details["probe"]["errors"] == 0), key=lambda p: -p.score)
            level = []
            for first in promising[: self.extend]:
                base = next(c for c in parents if c.id == first.details["base"])
                source = first.source
                if source is None:
                    continue
                ops = [op for op in self._applicable(source) if op.name not in first.details["chain_ops"]]
                rng.shuffle(ops)
                added = 0
                for op in ops:
                    if added >= self.extensions or not self._afford(base, op):
                        continue
                    if add(first.key, base, source, op, first.details["chain_ops"]):
                        added += 1
                        level.append(predicted[-1])

        predicted = self._merge(predicted, probes)
        for p in predicted:  # Stage 4: labels
            p.label = label(p.score, best, dead=p.details["probe"]["errors"] > p.details["probe"]["examples"] / 2)
        chosen = plan(state, predicted, self.selection, seed=self.seed * 1009 + state.iteration)
        proposals = []
        for rank, (ancestor, chain) in enumerate(chosen.chains):
            proposal = proposal_for(ancestor, chain, chosen, rank)
            proposal.prediction = prediction = dict(proposal.prediction or {})
            prediction["candidates_considered"] = len(predicted)
            prediction["dead_ends"] = sum(1 for p in predicted if p.label == DEAD_END)
            prediction["probe_tokens"] = {
                "spent": round(self._spent),
                "budget": self.probe_tokens,
                "revisions_skipped": skipped,
            }
            proposals.append(proposal)
        return proposals[: state.evals_left]
