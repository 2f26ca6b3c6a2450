"""The offline proposer: TPS's stages over program space with no hosted model, many proposals with honest priors.

Every iteration grows the run's lasting program graph (``RunState.graph``) with the planner's stage protocols
(``metaharness.planner.expand.grow``) until it holds ``max(plans, state.proposals)`` new candidates (default
12), or nothing is left to try:

1. sampling (``OperatorSampler``): revisions from the operator library (``.operators``, families of
   operators generated from parameter grids) of the frontier (the best evaluated candidates that still have an
   untried revision, ties in the seed's order), spread across operator families; then, level by level, revisions
   of the most promising predicted candidates anywhere in the graph, into chains of up to ``depth`` revisions
   (compositions of operators, each step its own node);
2. simulation, by execution (``ProbeSimulator``): each revised candidate runs on held-out training examples
   with the task model (``.probe``). Its predicted validation score is its base's measured score plus the probe
   difference scaled by the run's calibration. Its ``std`` is the uncertainty of its true score (before the noise
   of measuring it on a few examples, which ``pair_variance`` gives per example): what the probe leaves open
   (``estimate_change``, with a prior fitted on the run's probes) times how far the run's predictions have
   landed (``Spread``), never below the calibration residual. Its cost per validation example when its calls
   are new (``tokens_per_example``, ``usd_per_example``) is its base's measured cost per example scaled by the
   probe's, priced like the task model; ``repeat`` is the share of its calls that repeat its base's (1.0 for a
   post-processing revision, which costs nothing on the examples its base was evaluated on);
3. merging by behaviour: candidates of the same base with identical predictions on every probe example are one
   node (the planner's key merger, the key being base and behaviour), unless the probe saw the revision change
   nothing from the program it revised: quiet probes are no evidence that two programs are the same;
4. labels: +1 predicted to beat the best score, -1 dead end (the probe mostly errors), 0 otherwise.

The probe's token budget scales with what is wanted: ``probe_tokens`` when set, else enough to probe every wanted
revision of the largest-prompt candidate (``want x probe examples x its prompt tokens``); revisions that leave the
prompts alone reuse their base's calls and cost nothing.

The proposer does not choose what to evaluate: the loop allots evaluations. It returns up to ``state.proposals``
proposals in the order the revisions were generated (so "best of N" is "the first N"), then, if this iteration
made fewer, the run's earlier predictions nobody took, oldest first. Every proposal carries its full prediction
(score, std, pair variance, flips, probe numbers, cost per example, repeat, chain). Nothing here reads the
validation split, and nothing depends on ``PYTHONHASHSEED``: a different ``seed`` gives other probe examples,
another operator order and other tie-breaks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import random
from collections import OrderedDict
from pathlib import Path

from metaharness.candidate import Candidate, Prediction
from metaharness.errors import InputError
from metaharness.models.prices import FREE, Price, PriceTable
from metaharness.models.protocol import ModelClient, Usage
from metaharness.planner.graph import Node, NodeId, PlanGraph
from metaharness.planner.program import IMPLEMENTED, PREDICTED, depth, nodes_with
from metaharness.planner.result import PlanResult
from metaharness.planner.subagents import CandidatePlan, PlanningTask, SimulatedStep
from metaharness.planner.subagents.stage_io import StageRecord
from metaharness.proposers.operators import Operator, Revision, answer_profile, applicable, get_operator
from metaharness.proposers.probe import ChangePrior, Prober, ProbeResult, Spread, estimate_change
from metaharness.proposers.program_search import (
    MIN_STD,
    GainCalibration,
    base_of,
    calibrate,
    grow_round,
    predicted_score,
    proposals,
    recalibrate,
    run_graph,
)
from metaharness.search.protocol import Proposal, RunState
from metaharness.tasks.protocol import Task

GENERATED = "generation"  # the "selection" a proposal records: taken in the order it was generated
REVISIONS_KEPT = 64  # sources whose revisions are memoised (applying the whole library to one takes a while)
PROBES_PER_PROPOSAL = 4  # at most this many revisions probed per wanted proposal (the rest merged or broke)


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
    """Proposes many revisions from the operator library, each predicted by probing; the loop allots evaluations.

    ``task``: the ``Task``; ``task_model``: a ModelClient or spec string (the fixed task
    model, used for the probe); ``name``: how runs record it; ``plans``: the least number of new candidates made
    per iteration (more when the loop takes more, ``state.proposals``); ``extend``: how many of the most promising
    predicted candidates are extended at each level (``extensions`` revisions each); ``depth``: the longest
    revision chain from an implemented candidate; ``frontier``: how many top candidates are revised at a time;
    ``probe_size``: held-out training examples per probe; ``operators``: restrict the library to these operator
    names; ``probe_tokens``: a cap on the iteration's new probe tokens (default: scaled to what is wanted, see
    the module docstring); ``seed``: probe examples, operator order and tie-breaks.
    """

    def __init__(
        self,
        task: Task,
        task_model: ModelClient | str,
        *,
        name: str = "offline",
        plans: int = 12,
        extend: int = 2,
        extensions: int = 1,
        depth: int = 3,
        frontier: int = 2,
        probe_size: int = 8,
        operators: list[str] | None = None,
        probe_tokens: float | None = None,
        seed: int = 0,
        workers: int | None = None,
        probe_dir: str | None = None,
    ) -> None:
        self.name = name
        self.task = task
        self.plans, self.extend, self.extensions, self.frontier = plans, extend, extensions, frontier
        self.depth = max(1, depth)
        self.seed = seed
        self.prober = Prober(task, task_model, size=probe_size, seed=seed, workers=workers, folder=probe_dir)
        self.profile = answer_profile(self.prober.held_out.rest)
        self.operators = set(operators) if operators else None
        self.probe_tokens = probe_tokens
        self.price = task_model_price(task_model)
        self._exhausted: set[str] = set()  # digests of sources whose every revision is known
        self._revisions: OrderedDict[str, list[tuple[Operator, Revision, str]]] = OrderedDict()

    def revisions(self, source: str) -> list[tuple[Operator, Revision, str]]:
        """Every revision of ``source`` the (restricted) library makes: operator, revision and the digest of its
        source, in library order; the last sources' revisions are kept, since a pass revisits them."""
        key = _digest(source)
        if key not in self._revisions:
            ops = [o for o in applicable(source, self.profile) if self.operators is None or o.name in self.operators]
            made = [(op, op.apply(source)) for op in ops]
            self._revisions[key] = [(op, rev, _digest(rev.source)) for op, rev in made]
            while len(self._revisions) > REVISIONS_KEPT:
                self._revisions.popitem(last=False)
        self._revisions.move_to_end(key)
        return self._revisions[key]

    def untried(self, source: str, seen: set[str]) -> bool:
        """Whether some revision of ``source`` is not known yet (remembered once exhausted: what is known only
        grows)."""
        digest = _digest(source)
        if digest in self._exhausted:
            return False
        if any(d not in seen for _, _, d in self.revisions(source)):
            return True
        self._exhausted.add(digest)
        return False

    def propose(self, state: RunState) -> list[Proposal]:
        if not state.evaluated() or state.proposals < 1:
            return []
        want = max(self.plans, state.proposals)
        rng = random.Random(self.seed * 1009 + state.iteration)
        graph = run_graph(state)
        calibration = calibrate(state)
        prior = ChangePrior.fit(_probe_changes(graph))
        spread = Spread.fit(_misses(state, calibration))
        _rescale(graph, spread)
        recalibrate(graph, state, calibration)
        sources = {c.id: c.source for c in state.candidates}
        seen = {_digest(s) for s in sources.values()}
        seen |= {_digest(n.data["source"]) for n in nodes_with(graph, PREDICTED) if n.data.get("source")}
        budget = self.probe_tokens or want * self.prober.size * _largest_prompt(state)
        simulator = ProbeSimulator(self, graph, state, calibration, sources, seen, prior, spread, budget)
        ranking = _ranked(state.evaluated(), rng)
        made: list[NodeId] = []
        rounds: list[list[StageRecord]] = []

        def live() -> int:
            return sum(1 for n in made if not graph.node(n).dead_end)

        def grow(starts: list[NodeId], plans: int, per_start: int) -> bool:
            sampler = OperatorSampler(self, graph, starts, sources, seen, rng, per_start=per_start)
            growth = grow_round(state, graph, sampler=sampler, simulator=simulator, plans=plans, depth_limit=self.depth)
            made.extend(growth.added)
            rounds.append(growth.stages)
            return bool(growth.added)

        # Passes until enough candidates: revisions of the frontier (the best evaluated candidates that still have
        # an untried revision, so the search moves down the ranking once the top ones are exhausted), keeping room
        # for extensions, then extensions of the most promising predictions, one level at a time.
        while live() < want and simulator.probed < PROBES_PER_PROPOSAL * want:
            need = want - live()
            probed = simulator.probed
            starts = list(itertools.islice((c for c in ranking if self.untried(c.source, seen)), self.frontier))
            starts = [s for s in starts if simulator.afford_base(s)] or starts[:1]
            reserve = min(need // 3, self.extend * self.extensions * (self.depth - 1))
            if starts:
                m = need - reserve
                grow([s.id for s in starts], m, per_start=-(-m // len(starts)))
            for _level in range(self.depth - 1):
                need = want - live()
                promising = self._promising(graph, simulator, seen, rng) if need > 0 else []
                if not promising or not grow(promising, min(need, self.extensions * len(promising)), self.extensions):
                    break
            if simulator.probed == probed:  # nothing left to try within the probe budget
                break
        backlog = [n.id for n in nodes_with(graph, PREDICTED) if not n.dead_end and n.id not in made]
        if not live() and not backlog and simulator.skipped and ranking:
            simulator.overdraw = True  # never an empty iteration for the probe budget's sake
            grow([ranking[0].id], 1, per_start=1)
        fresh = [n for n in made if not graph.node(n).dead_end]
        chosen = (fresh + backlog)[: state.proposals]
        out = proposals(state, graph, PlanResult("feasible", GENERATED, evaluate=chosen)) if chosen else []
        predicted = nodes_with(graph, PREDICTED)
        tokens = {"spent": round(simulator.spent), "budget": round(budget), "revisions_skipped": simulator.skipped}
        for proposal in out:
            if proposal.prediction is not None:
                extra = {
                    **proposal.prediction.extra,
                    "candidates_considered": len(predicted),
                    "dead_ends": sum(1 for n in predicted if n.dead_end),
                    "probe_tokens": tokens,
                }
                proposal.prediction = dataclasses.replace(proposal.prediction, extra=extra)
        _write_record(
            state,
            {
                "iteration": state.iteration,
                "want": want,
                "calibration": calibration.to_json(),
                "change_prior": prior.to_json(),
                "spread": spread.to_json(),
                "made": [str(n) for n in made],
                "dead_ends": [str(n) for n in made if graph.node(n).dead_end],
                "proposed": [str(n) for n in chosen],
                "probes": simulator.probed,
                "probe_tokens": {**tokens, "all": round(simulator.tokens)},
                "rounds": rounds,
            },
        )
        return out

    def _promising(
        self, graph: PlanGraph, simulator: ProbeSimulator, seen: set[str], rng: random.Random
    ) -> list[NodeId]:
        """The ``extend`` most promising predicted (or implemented, unevaluated) candidates that can take one more
        revision: highest predicted score first, ties in the seed's order."""
        nodes = [
            n
            for n in nodes_with(graph, PREDICTED, IMPLEMENTED)
            if not n.dead_end and n.data.get("probe", {}).get("errors", 1) == 0 and depth(graph, n.id) < self.depth
        ]
        ties = {n.id: rng.random() for n in nodes}
        ranked = sorted(nodes, key=lambda n: (-(n.score or 0.0), ties[n.id]))
        open_ = (n.id for n in ranked if self.untried(simulator.source(n.id), seen))
        return list(itertools.islice(open_, self.extend))


def _ranked(evaluated: list[Candidate], rng: random.Random) -> list[Candidate]:
    """Evaluated candidates best first, one per distinct program, ties in the seed's order."""
    ties = [rng.random() for _ in evaluated]
    ranked = [c for _, c in sorted(zip(ties, evaluated, strict=True), key=lambda t: (-t[1].score, t[0]))]
    distinct: dict[str, Candidate] = {}
    for cand in ranked:
        distinct.setdefault(cand.source, cand)
    return list(distinct.values())


def _largest_prompt(state: RunState) -> float:
    """The largest measured prompt (tokens per validation example) of the run's evaluated candidates."""
    return max((c.cost.get("context_tokens") or 1000.0 for c in state.evaluated()), default=1000.0)


def _probe_changes(graph: PlanGraph) -> list[tuple[float, int]]:
    """(flipped examples, probe examples) of every probed revision in the graph, for ``ChangePrior``."""
    rows = []
    for node in graph.nodes:
        flips, probe = node.data.get("flips"), node.data.get("probe")
        if isinstance(flips, dict) and isinstance(probe, dict) and probe.get("examples"):
            rows.append((float(len(flips.get("gained", [])) + len(flips.get("lost", []))), int(probe["examples"])))
    return rows


def _misses(state: RunState, calibration: GainCalibration) -> list[tuple[float, float, float]]:
    """(actual - predicted score, probe std, sampling variance of the actual) of every evaluated candidate
    predicted by a probe, re-predicted with today's calibration, for ``Spread``."""
    scores = {c.id: c.score for c in state.evaluated()}
    misses = []
    for cand in state.evaluated():
        pred = cand.prediction or Prediction()
        base, gain, std = pred.base, pred.raw_gain, pred.probe_std
        if base is not None and base in scores and gain is not None and std is not None:
            examples = cand.evaluation.examples if cand.evaluation else 0
            sampling = float(pred.pair_variance or 0.0) / examples if examples else 0.0
            misses.append((cand.score - predicted_score(scores[base], gain, calibration), float(std), sampling))
    return misses


def _rescale(graph: PlanGraph, spread: Spread) -> None:
    """Every prediction's ``raw_std`` (what ``recalibrate`` keeps) as its probe std times today's spread."""
    for node in nodes_with(graph, PREDICTED):
        std = node.data.get("probe_std")
        if isinstance(std, (int, float)):
            graph.update_node(node.id, data={**node.data, "raw_std": round(std * spread.scale, 6)})


def _write_record(state: RunState, record: dict[str, object]) -> None:
    """Every stage's input and output, per iteration, under the run's proposer folder (for reading, not resuming)."""
    if state.run_dir is None:
        return
    folder = Path(state.run_dir) / "proposer" / "planning"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"iteration-{state.iteration:03d}.json"
    path.write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")


def _kind(name: str) -> str:
    """The family of the operator ``name`` (the name itself for an operator no longer in the library)."""
    try:
        return get_operator(name).kind
    except InputError:
        return name


def _chain_ops(node: Node) -> list[str]:
    """The operators on a predicted node's chain since its nearest implemented ancestor ([] for a program that
    exists: its revisions start a new chain)."""
    return list(node.data.get("chain_ops", [])) if node.status == PREDICTED else []


class OperatorSampler:
    """Stage 1 (``PlanSampler``): one-revision plans from the operator library,
    round-robin over ``starts`` (graph nodes), at most ``per_start`` each. Per start, the operator families come in
    the seed's order and take turns, so one parameter grid does not fill the plans; no family already on a
    predicted node's chain (tuning one setting twice in a row), no revision whose program is already known."""

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

    def options(self, start: NodeId) -> list[Operator]:
        node = self.graph.node(start)
        source = self.sources.get(str(start)) or node.data.get("source", "")
        on_chain = {_kind(name) for name in _chain_ops(node)}
        families: dict[str, list[Operator]] = {}
        digests: set[str] = set()
        for op, _, digest in self.proposer.revisions(source):
            if op.kind in on_chain or digest in self.seen or digest in digests:
                continue
            digests.add(digest)
            families.setdefault(op.kind, []).append(op)
        groups = list(families.values())
        self.rng.shuffle(groups)
        for group in groups:
            self.rng.shuffle(group)
        ordered = [group[i] for i in range(max(map(len, groups), default=0)) for group in groups if i < len(group)]
        return ordered[: self.per_start]

    def sample(self, task: PlanningTask, plans: int) -> list[CandidatePlan]:
        options = {start: self.options(start) for start in self.starts}
        chosen: list[CandidatePlan] = []
        while len(chosen) < plans and any(options.values()):
            for start in self.starts:
                if options[start] and len(chosen) < plans:
                    chosen.append(CandidatePlan((options[start].pop(0).name,), start=start))
        return chosen


class ProbeSimulator:
    """Stage 2 (``StateSimulator``) by execution: apply each revision and run
    the result on the probe examples; the step's key is the base and the behaviour (so merging is by behaviour),
    its score the calibrated prediction. A revision is not simulated when its estimated new probe tokens would
    pass ``budget`` (``skipped`` counts them); ``spent`` counts the probes' new tokens, ``tokens`` all of them."""

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
        budget: float,
    ) -> None:
        self.proposer, self.graph, self.state, self.calibration = proposer, graph, state, calibration
        self.sources, self.seen, self.prior, self.spread, self.budget = sources, seen, prior, spread, budget
        self.candidates = {c.id: c for c in state.candidates}
        self.spent = 0.0
        self.tokens = 0.0
        self.skipped = 0
        self.probed = 0  # revisions simulated
        self.overdraw = False  # allow one probe beyond the budget (an iteration with nothing else to choose)

    def source(self, node_id: NodeId) -> str:
        return self.sources.get(str(node_id)) or self.graph.node(node_id).data.get("source", "")

    def _affordable(self, base: Candidate, op: Operator | None, source: str) -> bool:
        """Whether probing ``source`` fits the budget: free when it only post-processes or was probed before, else
        estimated as the probe examples times the base's prompt."""
        if (op is not None and op.post_processing) or self.proposer.prober.known(source):
            return True
        cost = self.proposer.prober.size * (base.cost.get("context_tokens") or 1000.0)
        if self.spent + cost > self.budget and not self.overdraw:
            return False
        self.overdraw = False
        return True

    def run(self, source: str) -> ProbeResult:
        known = self.proposer.prober.known(source)
        result = self.proposer.prober.run(source)
        if not known:
            self.spent += result.new_tokens
            self.tokens += result.tokens
        return result

    def afford_base(self, base: Candidate) -> bool:
        if not self._affordable(base, None, base.source):
            return False
        self.run(base.source)
        return True

    def simulate(self, task: PlanningTask, plan: CandidatePlan) -> list[SimulatedStep]:
        start = self.graph.node(plan.start)  # type: ignore[arg-type]
        base = base_of(start, self.candidates)
        if base is None:
            return []
        base_probe = self.run(base.source)
        source = self.source(start.id)
        chain = _chain_ops(start)
        behaviour = self.run(source).signature()[:16] if start.status == PREDICTED else base_probe.signature()[:16]
        steps: list[SimulatedStep] = []
        for name in plan.subplans:
            found = next(((o, r, d) for o, r, d in self.proposer.revisions(source) if o.name == name), None)
            if found is None or found[2] in self.seen:
                break
            op, revision, digest = found
            if not self._affordable(base, op, revision.source):
                self.skipped += 1
                break
            self.seen.add(digest)
            self.probed += 1
            chain.append(name)
            steps.append(self._step(revision.summary, revision.source, base, base_probe, chain, behaviour))
            source, behaviour = revision.source, steps[-1].data["signature"]
        return steps

    def _step(
        self, summary: str, source: str, base: Candidate, base_probe: ProbeResult, chain: list[str], before: str
    ) -> SimulatedStep:
        """The prediction for ``source``, a revision of a program whose probe behaviour was ``before``."""
        result = self.run(source)
        flips = result.flips(base_probe)
        n = max(1, len(result.correct))
        raw_gain = result.score - base_probe.score
        change = estimate_change(result.differences(base_probe), self.prior)
        raw_std = change.std * self.spread.scale
        broken = len(result.errors) > n / 2
        # Cost per validation example when its calls are new: the base's measured tokens per example scaled by the
        # probe's change, priced like the task model.
        ratio = result.tokens / base_probe.tokens if base_probe.tokens else 1.0
        examples = max(1, base.evaluation.examples if base.evaluation else 0)
        usage = Usage(
            round(base.cost.get("input_tokens", 0.0) * ratio / examples),
            round(base.cost.get("output_tokens", 0.0) * ratio / examples),
        )
        per_example = float(usage.input_tokens + usage.output_tokens)
        usd_per_example = self.proposer.price.dollars(usage)
        signature = result.signature()[:16]
        # Merge key: base and behaviour, where the probe saw the revision change something; a revision the probe
        # saw change nothing is no evidence of being the same program as another quiet one, so it keeps its own.
        key = f"{base.id}|{signature}" + (f"|{_digest(source)[:16]}" if signature == before else "")
        return SimulatedStep(
            state=(
                f"probe {result.score:.2f} on {n} held-out training examples ({len(flips['gained'])} gained, "
                f"{len(flips['lost'])} lost vs {base.id}, {len(result.errors)} errors)"
            ),
            cost=(0.0, 0.0, 0.0),  # an operator writes the revision: implementing it costs no model call
            key=key,
            score=None if broken else predicted_score(base.score, raw_gain, self.calibration),
            std=max(MIN_STD, raw_std, self.calibration.residual),
            node_cost=(1.0, per_example * examples, round(usd_per_example * examples, 6)),
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
                "probe_std": round(change.std, 6),
                "raw_std": round(raw_std, 6),
                "pair_variance": round(change.pair_variance, 6),
                "tokens_per_example": round(per_example, 1),
                "usd_per_example": round(usd_per_example, 9),
                "repeat": round(result.repeat(base_probe), 4),
                "probe": {
                    "examples": n,
                    "score": round(result.score, 4),
                    "base_score": round(base_probe.score, 4),
                    "errors": len(result.errors),
                    "context_tokens": round(result.context_tokens, 1),
                    "tokens": round(result.tokens),
                    "new_tokens": round(result.new_tokens),
                },
                "flips": flips,
                "chain_ops": list(chain),
                "calibration": self.calibration.to_json(),
                "change_prior": self.prior.to_json(),
                "spread": self.spread.to_json(),
                "signature": signature,
                "same_as_base_on_probe": signature == base_probe.signature()[:16],
            },
        )
