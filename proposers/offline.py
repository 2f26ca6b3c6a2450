"""The offline proposer: TPS's stages over program space with no hosted model, many proposals with honest priors.

Every iteration grows the run's lasting program graph (``RunState.graph``) with the planner's stage protocols
(``metaharness.planner.expand.grow``) until it holds ``max(plans, state.proposals)`` new candidates (default 12),
or nothing is left to try:

1. sampling (`OperatorSampler`): revisions from the operator library (``.operators``, families of operators
   generated from parameter grids) of the frontier (the best evaluated candidates that still have an untried
   revision, ties in the seed's order), spread across operator families; then, level by level, revisions of the
   most promising predicted candidates anywhere in the graph, into chains of up to ``depth`` revisions
   (compositions of operators, each step its own node). Two-parent combinations (``operators.combine``) take
   ``COMBINE_PARTNERS`` second parents chosen per evaluated program by complementarity (``complementary_partners``:
   right where it is wrong on the examples both were scored on); a predicted program takes the best's. When the
   local edits are exhausted (all it made is known exactly, by replay or with no model call, to score no better
   than the best), it goes farther instead of offering nothing worth evaluating: past the simulation cap down the
   whole ranking (seeds included), then chains up to ``FARTHER_DEPTH`` revisions longer;
2. simulation (`metaharness.proposers.simulation.RevisionSimulator`), from the cheapest evidence there is: a
   chain that only post-processes answers is replayed on its base's validation examples through recorded calls
   (free and exact, and the loop keeps the replay as the candidate's first stage); with ``probe_size`` > 0 the
   others run on held-out training examples (a probe: task-model calls charged to the iteration's budget,
   ``RunState.predicting``); else their prior is what revisions of their operator family gained in this run;
3. merging by behaviour: revisions of one base with the same predictions on every replayed (or probed) example
   are one node (the planner's key merger, the key being base and behaviour); a revision that replays exactly
   like its base is kept in the graph (it can be extended) but not proposed: it is its base;
4. labels: +1 predicted to beat the best score, -1 dead end (most examples error), 0 otherwise.

The proposer does not choose what to evaluate: the loop allots evaluations. It returns up to ``state.proposals``
proposals in the order the revisions were generated (so "best of N" is "the first N"), those known exactly to be
no better than the best after the others, then, if this iteration made fewer, the run's earlier predictions nobody
took, oldest first. Every proposal carries its full prediction
(score, std, what predicted it, cost per example, repeat, chain). Nothing here evaluates on the validation split
(a replay only reads what the run's calls already answered), and nothing depends on ``PYTHONHASHSEED``: a different
``seed`` gives other probe examples, another operator order and other tie-breaks.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import json
import random
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from metaharness.candidate import Candidate, Prediction
from metaharness.errors import InputError
from metaharness.models.prices import FREE, Price, PriceTable
from metaharness.models.protocol import ModelClient
from metaharness.planner.graph import Node, NodeId, PlanGraph
from metaharness.planner.program import IMPLEMENTED, PREDICTED, depth, nodes_with
from metaharness.planner.result import PlanResult
from metaharness.planner.subagents import CandidatePlan, PlanningTask
from metaharness.planner.subagents.stage_io import StageRecord
from metaharness.proposers.operators import COMBINATIONS, Operator, Revision, answer_profile, applicable
from metaharness.proposers.operators.editing import parse
from metaharness.proposers.probe import ChangePrior, Prober, Spread
from metaharness.proposers.program_search import (
    GainCalibration,
    calibrate,
    grow_round,
    predicted_score,
    proposals,
    recalibrate,
    run_graph,
)
from metaharness.proposers.simulation import FamilyGains, RevisionSimulator, chain_ops, digest, family
from metaharness.search.protocol import Proposal, RunState
from metaharness.tasks.protocol import Task

GENERATED = "generation"  # the "selection" a proposal records: taken in the order it was generated
REVISIONS_KEPT = 64  # sources whose revisions are memoised (applying the whole library to one takes a while)
SIMULATED_PER_PROPOSAL = 4  # at most this many revisions simulated per wanted proposal (the rest merged or broke)
# While nothing proposable was made, simulating goes on up to this many times as far, over the whole ranking.
FARTHER = 3
FARTHER_DEPTH = 2  # and chains may grow this much longer than ``depth``
COMBINE_PARTNERS = 2  # second parents offered to each evaluated program (``operators.combine``, ``complementary``)


def task_model_price(model: ModelClient | str) -> Price:
    """What the task model's tokens cost (its ledger's price table, else the built-in one); free for local and
    self-hosted models, and for a model whose price is unknown (the prediction then says 0 dollars)."""
    ledger = getattr(model, "ledger", None)
    table = ledger.prices if ledger is not None else PriceTable()
    try:
        return table.lookup(model if isinstance(model, str) else model.spec) or FREE
    except InputError:  # not a provider spec (a stand-in model): nothing to price
        return FREE


class OfflineProposer:
    """Proposes many revisions from the operator library, each predicted by probing; the loop allots evaluations.

    ``task``: the ``Task``; ``task_model``: a ModelClient or spec string (the fixed task
    model, used for the probe); ``name``: how runs record it; ``plans``: the least number of new candidates made
    per iteration (more when the loop takes more, ``state.proposals``); ``extend``: how many of the most promising
    predicted candidates are extended at each level (``extensions`` revisions each); ``depth``: the longest
    revision chain from an implemented candidate; ``frontier``: how many top candidates are revised at a time;
    ``probe_size``: held-out training examples per probe (0: no probe, see the module docstring); ``operators``:
    restrict the library to these operator names; ``seed``: probe examples, operator order and tie-breaks.
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
        probe_size: int = 0,
        operators: list[str] | None = None,
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
        self.price = task_model_price(task_model)
        self._exhausted: set[str] = set()  # digests of sources whose every revision is known
        self._revisions: OrderedDict[str, list[tuple[Operator, Revision, str]]] = OrderedDict()
        # The second parents combinations take, as (id, source): per first parent's source digest (an evaluated
        # candidate's), else the best candidate's (``partners_for``).
        self.partners: dict[str, list[tuple[str, str]]] = {}
        self.default_partners: list[tuple[str, str]] = []

    def partners_for(self, source: str) -> list[tuple[str, str]]:
        """The (id, source) partners offered to combine with ``source``."""
        return self.partners.get(digest(source), self.default_partners)

    def _key(self, source: str) -> str:
        """What a source's revisions depend on: the source and the partners on offer."""
        return digest(source) + "|" + ",".join(name for name, _ in self.partners_for(source))

    def _operators(self, source: str) -> list[Operator]:
        """The (restricted) library's operators that apply to ``source``: one-parent ones, then every two-parent
        combination bound to each partner it can combine with."""
        ops = applicable(source, self.profile)
        ops += [
            combination.partner(name, other)
            for combination in COMBINATIONS
            if combination.fits(self.profile)
            for name, other in self.partners_for(source)
            if combination.combines(source, other)
        ]
        return [o for o in ops if self.operators is None or o.name.partition("+")[0] in self.operators]

    def revisions(self, source: str) -> list[tuple[Operator, Revision, str]]:
        """Every revision of ``source`` the (restricted) library makes: operator, revision and the digest of its
        source, in library order; the last sources' revisions are kept, since a pass revisits them."""
        key = self._key(source)
        if key not in self._revisions:
            made = [(op, op.apply(source)) for op in self._operators(source)]
            self._revisions[key] = [(op, rev, digest(rev.source)) for op, rev in made]
            while len(self._revisions) > REVISIONS_KEPT:
                self._revisions.popitem(last=False)
        self._revisions.move_to_end(key)
        return self._revisions[key]

    def untried(self, source: str, seen: set[str]) -> bool:
        """Whether some revision of ``source`` is not known yet (remembered once exhausted, for the same partners:
        what is known only grows). Revisions not memoised are made one at a time until one is new (usually the
        first): ranking the predicted graph asks this of every node, most of which are never revised."""
        key = self._key(source)
        if key in self._exhausted:
            return False
        known = self._revisions.get(key)
        if known is not None:
            digests: Iterable[str] = (d for _, _, d in known)
        else:
            digests = (digest(op.apply(source).source) for op in self._operators(source))
        if any(d not in seen for d in digests):
            return True
        self._exhausted.add(key)
        return False

    def propose(self, state: RunState) -> list[Proposal]:
        if not state.supported() or state.proposals < 1:
            return []
        with cyclic_collection_paused():
            return self._propose(state)

    def _propose(self, state: RunState) -> list[Proposal]:
        want = max(self.plans, state.proposals)
        rng = random.Random(self.seed * 1009 + state.iteration)
        self.prober.meter = state.predicting
        graph = run_graph(state)
        calibration = calibrate(state)
        prior = ChangePrior.fit(_probe_changes(graph))
        spread = Spread.fit(_misses(state, calibration))
        _rescale(graph, spread)
        recalibrate(graph, state, calibration)
        families = FamilyGains.fit(state.candidates)
        sources = {c.id: c.source for c in state.candidates}
        seen = {digest(s) for s in sources.values()}
        seen |= {digest(n.data["source"]) for n in nodes_with(graph, PREDICTED) if n.data.get("source")}
        simulator = RevisionSimulator(self, graph, state, calibration, sources, seen, prior, spread, families)
        ranking = _ranked(state.supported(), rng)
        self.partners = {
            digest(c.source): [(p.id, p.source) for p in complementary_partners(c, ranking, COMBINE_PARTNERS)]
            for c in ranking
        }
        self.default_partners = self.partners[digest(ranking[0].source)]
        made: list[NodeId] = []
        rounds: list[list[StageRecord]] = []

        def proposable(node_id: NodeId) -> bool:
            node = graph.node(node_id)
            exact = node.data.get("predicted_by") in ("replay", "model-free")
            return not node.dead_end and not (exact and node.data["same_as_base"])

        def live() -> int:
            return sum(1 for n in made if proposable(n))

        best = max(c.score for c in state.supported())

        def worth(node_id: NodeId) -> bool:
            """Proposable and not known exactly (a complete replay, or scored with no model call) to score no better
            than the best."""
            node = graph.node(node_id)
            how, replay = node.data.get("predicted_by"), node.data.get("replay")
            complete = how == "replay" and isinstance(replay, dict) and not replay.get("missed")
            known = complete or how == "model-free"
            return proposable(node_id) and (not known or (node.score or 0.0) > best)

        def hopeful() -> int:
            return sum(1 for n in made if worth(n))

        def grow(starts: list[NodeId], plans: int, per_start: int, depth_limit: int) -> bool:
            sampler = OperatorSampler(self, graph, starts, sources, seen, rng, per_start=per_start)
            growth = grow_round(
                state, graph, sampler=sampler, simulator=simulator, plans=plans, depth_limit=depth_limit
            )
            made.extend(growth.added)
            rounds.append(growth.stages)
            return bool(growth.added)

        # Passes until enough candidates: revisions of the frontier (the best evaluated candidates that still have
        # an untried revision, so the search moves down the ranking once the top ones are exhausted), keeping room
        # for extensions, then extensions of the most promising predictions, one level at a time. While nothing
        # hopeful was made (all it made is known exactly to be no better than the best), it goes
        # farther: past the simulation cap down the whole ranking (seeds included), then longer chains, until
        # something hopeful is made or nothing is left to try.
        cap = SIMULATED_PER_PROPOSAL * want
        depth_limit = self.depth
        exhausted = False  # a pass at the deepest chains found nothing left to try

        def more() -> bool:
            if not hopeful():
                return simulator.simulated < FARTHER * cap
            return live() < want and simulator.simulated < cap

        while more():
            need = want - live()
            simulated = simulator.simulated
            starts = list(itertools.islice((c for c in ranking if self.untried(c.source, seen)), self.frontier))
            starts = [s for s in starts if simulator.afford_base(s)] or starts[:1]
            reserve = min(need // 3, self.extend * self.extensions * (depth_limit - 1))
            if starts:
                m = need - reserve
                grow([s.id for s in starts], m, -(-m // len(starts)), depth_limit)
            for _level in range(depth_limit - 1):
                need = want - live()
                promising = self._promising(graph, simulator, seen, rng, depth_limit) if need > 0 else []
                if not promising or not grow(
                    promising, min(need, self.extensions * len(promising)), self.extensions, depth_limit
                ):
                    break
            if simulator.simulated == simulated:  # nothing left to try at this depth
                exhausted = depth_limit >= self.depth + FARTHER_DEPTH
                if hopeful() or exhausted:
                    break
                depth_limit += 1
        backlog = [n.id for n in nodes_with(graph, PREDICTED) if proposable(n.id) and n.id not in made]
        # Known exactly to be no better than the best: last, since the loop records it free anyway.
        fresh = [n for n in made if worth(n)] + [n for n in made if proposable(n) and not worth(n)]
        chosen = (fresh + backlog)[: state.proposals]
        out = proposals(state, graph, PlanResult("feasible", GENERATED, evaluate=chosen)) if chosen else []
        for proposal in out:  # an operator never writes a syntax error: made sure of here, for what is proposed only
            for step in (*proposal.intermediates, proposal):
                parse(step.source)
        predicted = nodes_with(graph, PREDICTED)
        record = {
            "spent": state.predicting.spent.to_json(),
            "allowed": state.predicting.allowance.to_json(),
            "simulated": simulator.simulated,
            "replayed": simulator.replayed,
            "probes_not_afforded": simulator.skipped,
        }
        for proposal in out:
            if proposal.prediction is not None:
                extra = {
                    **proposal.prediction.extra,
                    "candidates_considered": len(predicted),
                    "dead_ends": sum(1 for n in predicted if n.dead_end),
                    "predicting": record,
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
                "family_gains": families.to_json(),
                "made": [str(n) for n in made],
                "dead_ends": [str(n) for n in made if graph.node(n).dead_end],
                "proposed": [str(n) for n in chosen],
                "hopeful": [str(n) for n in made if worth(n)],
                # why making stopped: enough proposable revisions, the simulation cap, or nothing left to try
                "stopped": "enough" if live() >= want and hopeful() else "exhausted" if exhausted else "cap",
                "predicting": record,
                "rounds": rounds,
            },
        )
        return out

    def _promising(
        self, graph: PlanGraph, simulator: RevisionSimulator, seen: set[str], rng: random.Random, depth_limit: int
    ) -> list[NodeId]:
        """The ``extend`` most promising predicted (or implemented, unevaluated) candidates that can take one more
        revision within ``depth_limit``: highest predicted score first, ties in the seed's order."""
        nodes = [
            n
            for n in nodes_with(graph, PREDICTED, IMPLEMENTED)
            if not n.dead_end and _clean(n) and depth(graph, n.id) < depth_limit
        ]
        ties = {n.id: rng.random() for n in nodes}
        ranked = sorted(nodes, key=lambda n: (-(n.score or 0.0), ties[n.id]))
        open_ = (n.id for n in ranked if self.untried(simulator.source(n.id), seen))
        return list(itertools.islice(open_, self.extend))


@contextmanager
def cyclic_collection_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector: proposing parses and drops a thousand programs (syntax trees hold no
    cycles, reference counting frees them), which made the collector go over the whole heap again and again. It runs
    again once proposing is done, and collects what is left."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _ranked(evaluated: list[Candidate], rng: random.Random) -> list[Candidate]:
    """Evaluated candidates best first, one per distinct program, ties in the seed's order."""
    ties = [rng.random() for _ in evaluated]
    ranked = [c for _, c in sorted(zip(ties, evaluated, strict=True), key=lambda t: (-t[1].score, t[0]))]
    distinct: dict[str, Candidate] = {}
    for cand in ranked:
        distinct.setdefault(cand.source, cand)
    return list(distinct.values())


def complementary_partners(first: Candidate, ranking: list[Candidate], count: int) -> list[Candidate]:
    """The ``count`` partners to offer ``first`` for a combination, from ``ranking`` (best first, one per program):
    those right where ``first`` is wrong, on the validation examples both were scored on, by how much (the sum of
    their per-example scores above ``first``'s: all a combination of the two can gain there), then in ranking
    order those that share no scored example with it (nothing known against them). A candidate that shares
    scored examples with ``first`` and is better on none of them (a twin, or worse everywhere) is not offered:
    combined, the two could only lose there."""
    mine = _example_scores(first)
    gains: list[tuple[float, int, Candidate]] = []
    for rank, other in enumerate(ranking):
        if other.source == first.source:
            continue
        theirs = _example_scores(other)
        shared = mine.keys() & theirs.keys()
        if not shared:
            gains.append((0.0, rank, other))
            continue
        gain = sum(max(0.0, theirs[example] - mine[example]) for example in shared)
        if gain > 0:
            gains.append((gain, rank, other))
    gains.sort(key=lambda item: (-item[0], item[1]))
    return [other for _, _, other in gains[:count]]


def _example_scores(candidate: Candidate) -> dict[str, float]:
    """The candidate's primary score on each validation example it was scored on (none recorded: empty)."""
    evaluation = candidate.evaluation
    if evaluation is None or len(evaluation.example_ids) != len(evaluation.example_scores):
        return {}
    return dict(zip(evaluation.example_ids, evaluation.example_scores, strict=True))


def _clean(node: Node) -> bool:
    """Whether no example errored where the node was replayed or probed."""
    return all(
        not isinstance(node.data.get(kind), dict) or node.data[kind].get("errors", 0) == 0
        for kind in ("replay", "model_free", "probe")
    )


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
    scores = {c.id: c.score for c in state.supported()}
    misses = []
    for cand in state.supported():
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
        on_chain = {family(name) for name in chain_ops(node)}
        families: dict[str, list[Operator]] = {}
        digests: set[str] = set()
        for op, _, revised in self.proposer.revisions(source):
            if op.kind in on_chain or revised in self.seen or revised in digests:
                continue
            digests.add(revised)
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
