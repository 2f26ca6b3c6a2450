"""The offline proposer: TPS over program space with no hosted model.

Every iteration is a round of TPS's four stages over the run's lasting program graph (``RunState.graph``), on the
planner's stage protocols (:func:`metaharness.planner.expand.grow`):

1. sampling (:class:`OperatorSampler`): revisions from the operator library (:mod:`.operators`) of the frontier
   (the best evaluated candidates that still have an untried revision), diverse across operators; then, level by
   level, revisions of the most promising predicted candidates anywhere in the graph (from this iteration or an
   earlier one), into chains of up to ``depth`` revisions (default 3);
2. simulation, by execution (:class:`ProbeSimulator`): each revised candidate runs on a few held-out training
   examples with the task model (:mod:`.probe`); its predicted validation score is its base's measured score plus
   the probe difference scaled by the run's calibration, its uncertainty grows with the probe examples that flip,
   its evaluation cost is the base's measured tokens scaled by the probe's, priced like the task model;
3. merging by behaviour: candidates of the same base with identical predictions on every probe example are one
   node (the planner's key merger, the key being base and behaviour);
4. labels: +1 predicted to beat the best score, -1 dead end (the probe mostly errors), 0 otherwise.

Predictions nobody chose stay in the graph and are re-predicted as the calibration learns. The planner's selection
(``solver``: ``auto`` by default; ``greedy``, ``random``, ``best_of_n`` as baselines) then chooses what the loop
evaluates on val, over the whole graph. Every proposal carries its full prediction (score, uncertainty, flips,
probe numbers, cost, chain). Nothing here reads the validation split.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from pathlib import Path

from metaharness.candidate import Candidate
from metaharness.errors import InputError
from metaharness.models.prices import FREE, Price, PriceTable
from metaharness.models.types import ModelClient, Usage
from metaharness.planner.graph import NodeId, PlanGraph
from metaharness.planner.program import IMPLEMENTED, PREDICTED, depth, nodes_with
from metaharness.planner.subagents import CandidatePlan, PlanningTask, SimulatedStep
from metaharness.proposal import Proposal, RunState
from metaharness.proposers.operators import Operator, answer_profile, applicable
from metaharness.proposers.probe import Prober, ProbeResult
from metaharness.proposers.program_search import (
    MIN_STD,
    Calibration,
    base_of,
    choose,
    grow_round,
    predicted_score,
    prepare,
    proposals,
)
from metaharness.tasks.task import Task


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
    """Plans revisions from the operator library, predicts them by probing, and lets the planner's selection choose.

    ``task``: the :class:`~metaharness.tasks.Task`; ``task_model``: a ModelClient or spec string (the fixed task
    model, used for the probe); ``selection``: a solver of :func:`metaharness.planner.selection.select` (``auto``,
    ``exact``, ``ilp``) or a baseline (``greedy``, ``random``, ``best_of_n``); ``plans``: revisions of the frontier
    sampled per iteration (M); ``extend``: how many of the most promising predicted candidates are extended at each
    level (``extensions`` revisions each); ``depth``: the longest revision chain from an implemented candidate;
    ``frontier``: how many top candidates are revised; ``probe_size``: held-out training examples per probe;
    ``operators``: restrict the library to these operator names; ``probe_tokens``: the iteration's budget of
    task-model prompt tokens for probing (a revision that changes the prompt costs about ``probe_size`` x its
    base's prompt size; one that only post-processes answers reuses cached calls and costs nothing). The defaults
    keep an iteration small enough for CPU-only runs of the embedded model.
    """

    def __init__(
        self,
        task: Task,
        task_model: ModelClient | str,
        *,
        selection: str = "auto",
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
        baseline = selection in ("greedy", "random", "best_of_n")
        self.name = f"offline-{selection.replace('_', '-')}" if baseline else "offline"
        self.task = task
        self.selection = selection
        self.plans, self.extend, self.extensions, self.frontier = plans, extend, extensions, frontier
        self.depth = max(1, depth)
        self.seed = seed
        self.prober = Prober(task, task_model, size=probe_size, seed=seed, workers=workers, folder=probe_dir)
        self.profile = answer_profile(self.prober.held_out.rest)
        self.operators = set(operators) if operators else None
        self.probe_tokens = probe_tokens
        self.price = task_model_price(task_model)
        self._exhausted: set[str] = set()  # digests of sources whose every revision is known

    def applicable(self, source: str) -> list[Operator]:
        ops = applicable(source, self.profile)
        return [op for op in ops if self.operators is None or op.name in self.operators]

    def untried(self, source: str, seen: set[str]) -> bool:
        """Whether some applicable revision of ``source`` is not known yet (remembered once exhausted: what is
        known only grows)."""
        digest = _digest(source)
        if digest in self._exhausted:
            return False
        if any(_digest(op.apply(source).source) not in seen for op in self.applicable(source)):
            return True
        self._exhausted.add(digest)
        return False

    def propose(self, state: RunState) -> list[Proposal]:
        evaluated = sorted(state.evaluated(), key=lambda c: -c.score)
        if not evaluated or state.proposals < 1:
            return []
        graph, calibration = prepare(state)
        rng = random.Random(self.seed * 1009 + state.iteration)
        sources = {c.id: c.source for c in state.candidates}
        seen = {_digest(s) for s in sources.values()}
        seen |= {_digest(n.data["source"]) for n in nodes_with(graph, PREDICTED) if n.data.get("source")}
        simulator = ProbeSimulator(self, graph, state, calibration, sources, seen)
        rounds: list[list[dict[str, object]]] = []
        record: dict[str, object] = {
            "iteration": state.iteration,
            "calibration": calibration.to_json(),
            "rounds": rounds,
        }

        # The frontier: the best evaluated candidates that still have an untried revision, so the search moves down
        # the ranking instead of idling once the top candidates' revisions are all known.
        starts: list[Candidate] = []
        for cand in evaluated:
            if len(starts) >= self.frontier:
                break
            if all(cand.source != s.source for s in starts) and self.untried(cand.source, seen):
                starts.append(cand)
        if starts:
            starts = [s for s in starts if simulator.afford_base(s)] or starts[:1]
            sampler = OperatorSampler(self, graph, [s.id for s in starts], sources, seen, rng, per_start=self.plans)
            growth = grow_round(
                state, graph, sampler=sampler, simulator=simulator, m=self.plans, depth_limit=self.depth
            )
            if not growth.added and not _choosable(graph):  # never an empty iteration for the probe budget's sake
                simulator.overdraw = True
                growth = grow_round(state, graph, sampler=sampler, simulator=simulator, m=1, depth_limit=self.depth)
            rounds.append(growth.stages)

        # Extensions: the most promising predicted (or implemented, unevaluated) candidates anywhere in the graph,
        # one level at a time.
        for _ in range(self.depth - 1):
            promising = [
                n.id
                for n in sorted(nodes_with(graph, PREDICTED, IMPLEMENTED), key=lambda n: -(n.score or 0.0))
                if not n.dead_end
                and n.data.get("probe", {}).get("errors", 1) == 0
                and depth(graph, n.id) < self.depth
                and self.untried(simulator.source(n.id), seen)
            ][: self.extend]
            if not promising:
                break
            sampler = OperatorSampler(self, graph, promising, sources, seen, rng, per_start=self.extensions)
            m = self.extensions * len(promising)
            growth = grow_round(state, graph, sampler=sampler, simulator=simulator, m=m, depth_limit=self.depth)
            rounds.append(growth.stages)
            if not growth.added:
                break

        result = choose(state, graph, self.selection, seed=self.seed * 1009 + state.iteration)
        if result is None:
            return []
        predicted = nodes_with(graph, PREDICTED)
        out = proposals(state, graph, result)
        for proposal in out:
            prediction = proposal.prediction if proposal.prediction is not None else {}
            prediction["candidates_considered"] = len(predicted)
            prediction["dead_ends"] = sum(1 for n in predicted if n.dead_end)
            prediction["probe_tokens"] = {
                "spent": round(simulator.spent),
                "budget": self.probe_tokens,
                "revisions_skipped": simulator.skipped,
            }
        record["selection"] = result.to_json()
        _write_record(state, record)
        return out[: state.proposals]


def _choosable(graph: PlanGraph) -> bool:
    return any(not n.dead_end for n in nodes_with(graph, PREDICTED))


def _write_record(state: RunState, record: dict[str, object]) -> None:
    """Every stage's input and output, per iteration, under the run's proposer folder (for reading, not resuming)."""
    if state.run_dir is None:
        return
    folder = Path(state.run_dir) / "proposer" / "planning"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"iteration-{state.iteration:03d}.json"
    path.write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")


class OperatorSampler:
    """Stage 1 (:class:`~metaharness.planner.subagents.PlanSampler`): one-revision plans from the operator library,
    round-robin over ``starts`` (graph nodes), at most ``per_start`` each, no operator already on a node's chain and
    no revision whose program is already known."""

    def __init__(
        self,
        proposer: OfflineProposer,
        graph: PlanGraph,
        starts: list[NodeId],
        sources: dict[str, str],
        seen: set[str],
        rng: random.Random,
        *,
        per_start: int,
    ) -> None:
        self.proposer, self.graph, self.starts = proposer, graph, starts
        self.sources, self.seen, self.rng, self.per_start = sources, seen, rng, per_start

    def sample(self, task: PlanningTask, m: int) -> list[CandidatePlan]:
        options: dict[NodeId, list[Operator]] = {}
        for start in self.starts:
            node = self.graph.node(start)
            source = self.sources.get(str(start)) or node.data.get("source", "")
            on_chain = set(node.data.get("chain_ops", []))
            ops = [
                op
                for op in self.proposer.applicable(source)
                if op.name not in on_chain and _digest(op.apply(source).source) not in self.seen
            ]
            self.rng.shuffle(ops)
            options[start] = ops[: self.per_start]
        plans: list[CandidatePlan] = []
        while len(plans) < m and any(options.values()):
            for start in self.starts:
                if options[start] and len(plans) < m:
                    plans.append(CandidatePlan((options[start].pop().name,), start=start))
        return plans


class ProbeSimulator:
    """Stage 2 (:class:`~metaharness.planner.subagents.StateSimulator`) by execution: apply each revision and run
    the result on the probe examples; the step's key is the base and the behaviour (so merging is by behaviour),
    its score the calibrated prediction. Revisions past the iteration's probe budget are not simulated."""

    def __init__(
        self,
        proposer: OfflineProposer,
        graph: PlanGraph,
        state: RunState,
        calibration: Calibration,
        sources: dict[str, str],
        seen: set[str],
    ) -> None:
        self.proposer, self.graph, self.state, self.calibration = proposer, graph, state, calibration
        self.sources, self.seen = sources, seen
        self.candidates = {c.id: c for c in state.candidates}
        self.spent = 0.0
        self.skipped = 0
        self.overdraw = False  # allow one probe beyond the budget (an iteration with nothing else to choose)

    def source(self, node_id: NodeId) -> str:
        return self.sources.get(str(node_id)) or self.graph.node(node_id).data.get("source", "")

    def _charge(self, base: Candidate, op: Operator | None, source: str) -> bool:
        if (op is not None and op.post_processing) or self.proposer.prober.known(source):
            return True
        cost = self.proposer.prober.size * (base.cost.get("context_tokens") or 1000.0)
        if self.spent + cost > self.proposer.probe_tokens and not self.overdraw:
            return False
        self.overdraw = False
        self.spent += cost
        return True

    def afford_base(self, base: Candidate) -> bool:
        return self._charge(base, None, base.source)

    def simulate(self, task: PlanningTask, plan: CandidatePlan) -> list[SimulatedStep]:
        start = self.graph.node(plan.start)  # type: ignore[arg-type]
        base = base_of(start, self.candidates)
        if base is None:
            return []
        base_probe = self.proposer.prober.run(base.source)
        source = self.source(start.id)
        chain = list(start.data.get("chain_ops", []))
        steps: list[SimulatedStep] = []
        for name in plan.subplans:
            op = next((o for o in self.proposer.applicable(source) if o.name == name), None)
            if op is None:
                break
            revision = op.apply(source)
            if _digest(revision.source) in self.seen:
                break
            if not self._charge(base, op, revision.source):
                self.skipped += 1
                break
            self.seen.add(_digest(revision.source))
            chain.append(name)
            steps.append(self._step(revision.summary, revision.source, base, base_probe, chain))
            source = revision.source
        return steps

    def _step(
        self, summary: str, source: str, base: Candidate, base_probe: ProbeResult, chain: list[str]
    ) -> SimulatedStep:
        result = self.proposer.prober.run(source)
        flips = result.flips(base_probe)
        n = max(1, len(result.correct))
        changed = len(flips["gained"]) + len(flips["lost"])
        raw_gain = result.score - base_probe.score
        raw_std = max(MIN_STD, math.sqrt(changed) / n)
        broken = len(result.errors) > n / 2
        # Evaluation cost: the base's measured tokens scaled by the probe's change, priced like the task model.
        ratio = result.tokens / base_probe.tokens if base_probe.tokens else 1.0
        usage = Usage(
            round(base.cost.get("input_tokens", 0.0) * ratio), round(base.cost.get("output_tokens", 0.0) * ratio)
        )
        tokens = float(usage.input_tokens + usage.output_tokens)
        signature = result.signature()[:16]
        return SimulatedStep(
            state=(
                f"probe {result.score:.2f} on {n} held-out training examples ({len(flips['gained'])} gained, "
                f"{len(flips['lost'])} lost vs {base.id}, {len(result.errors)} errors)"
            ),
            cost=(0.0, 0.0, 0.0),  # an operator writes the revision: implementing it costs no model call
            key=f"{base.id}|{signature}",
            score=None if broken else predicted_score(base.score, raw_gain, self.calibration),
            std=max(raw_std, self.calibration.residual),
            node_cost=(1.0, tokens, round(self.proposer.price.dollars(usage), 6)),
            data={
                "source": source,
                "summary": summary,
                "hypothesis": (
                    f"on {n} held-out training examples it gets {len(flips['gained'])} right that {base.id} missed "
                    f"and {len(flips['lost'])} wrong that {base.id} got right "
                    f"(probe {result.score:.2f} vs {base_probe.score:.2f})"
                ),
                "iteration": self.state.iteration,
                "base": base.id,
                "raw_gain": round(raw_gain, 6),
                "raw_std": round(raw_std, 6),
                "probe": {
                    "examples": n,
                    "score": round(result.score, 4),
                    "base_score": round(base_probe.score, 4),
                    "errors": len(result.errors),
                    "context_tokens": round(result.context_tokens, 1),
                },
                "flips": flips,
                "chain_ops": list(chain),
                "calibration": self.calibration.to_json(),
                "signature": signature,
                "same_as_base_on_probe": signature == base_probe.signature()[:16],
            },
        )
