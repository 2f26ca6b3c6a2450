"""What both planning proposers share: the run's program graph as a planning task, calibration, selection, proposals.

The ``offline`` and ``tps`` proposers differ only in their stages (operators and probes vs. the proposer model);
both then hand the run's lasting program graph (``RunState.graph``, ``metaharness.planner.program``) to
``metaharness.planner.expand.grow`` and ``metaharness.planner.selection.select``. This module holds the
glue around those calls:

- ``recalibrated_graph``: the run's graph with every prediction re-predicted by ``calibrate`` (how far this
  run's predicted gains held, ``recalibrate``), so an old prediction is re-predicted as the calibration learns;
- ``grow_round``: one round of the four stages with the proposer's sampler and simulator and the shared merger
  (by behaviour key) and labeler (by predicted score), on the run as TPS's planning task (``planning_task``);
- ``choose``: the selection over the whole graph (old predictions included) within the iteration's budget;
- ``proposals``: every chosen node as a ``Proposal`` whose ``intermediates``
  are the unevaluated revisions on its chain, so each is committed on its own and git's parents are the revision edges.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from metaharness.candidate import Candidate, Prediction
from metaharness.planner.expand import Growth, grow
from metaharness.planner.graph import Node, NodeId, PlanGraph
from metaharness.planner.program import IMPLEMENTED, LIMITS, PREDICTED, chain, incumbent, nodes_with
from metaharness.planner.result import PlanResult
from metaharness.planner.selection import select
from metaharness.planner.subagents import KeyJudgeMerger, PlanningTask, PlanSampler, ScoreLabeler, StateSimulator
from metaharness.search.protocol import Proposal, RunState
from metaharness.store.program_graph import sync

MIN_STD = 0.03  # a probe of a dozen examples never pins a score down better than this
UNBOUNDED = 1e18  # a budget entry the run does not cap (the plan graph format wants finite numbers)


def selection_budget(state: RunState) -> dict[str, float]:
    """The selection budget in the program graph's limits: ``state.proposals`` programs to implement (how many
    validation examples each then gets is the loop's staged evaluation); tokens and dollars unbounded."""
    return {"evals": float(state.proposals), "tokens": UNBOUNDED, "usd": UNBOUNDED}


def run_graph(state: RunState) -> PlanGraph:
    """The run's lasting program graph; outside a run (``state.graph`` None) one built from the candidates alone."""
    if state.graph is None:
        state.graph = sync(None, state.candidates)
    return state.graph


def base_of(node: Node, candidates: Mapping[str, Candidate]) -> Candidate | None:
    """The evaluated candidate whose measured score and probe a prediction from ``node`` builds on: the node itself
    when it is evaluated, else the nearest evaluated ancestor (a predicted node's recorded ``base``; an implemented
    candidate's parents)."""
    cid = str(node.id) if str(node.id) in candidates else str(node.data.get("base", ""))
    while cid in candidates and not candidates[cid].evaluated:
        cid = candidates[cid].parent or ""
    return candidates.get(cid)


def planning_task(state: RunState, graph: PlanGraph) -> PlanningTask:
    """The run as a TPS planning task: the candidates so far (history), beating the best score (goal), the budget."""
    history = []
    for c in state.candidates:
        standing = f"failed: {(c.error or '')[:200]}" if c.failed else f"score {c.score:.3f}"
        history.append(f"{c.id} (parent {c.parent or 'none'}): {standing} - {c.summary[:200]}")
    goal = f"a harness that scores above {incumbent(graph):.3f} on validation"
    return PlanningTask.create(history, goal, selection_budget(state))


def node_namer(graph: PlanGraph, iteration: int) -> Callable[[], NodeId]:
    """Fresh ids ``p<iteration>.<k>`` for predicted nodes, skipping ids a resumed iteration already used."""
    counter = itertools.count()

    def new_id() -> NodeId:
        while True:
            candidate = f"p{iteration}.{next(counter)}"
            if candidate not in graph.nx:
                return candidate

    return new_id


@dataclass(frozen=True)
class GainCalibration:
    """How far this run's predicted gains held: actual gain ~ ``slope`` x predicted gain, ``residual`` spread."""

    slope: float = 1.0
    residual: float = 0.0
    pairs: int = 0

    def to_json(self) -> dict[str, float]:
        return {"slope": self.slope, "residual": self.residual, "pairs": self.pairs}


def calibrate(state: RunState, *, prior: float = 0.02) -> GainCalibration:
    """Fit the slope of actual on predicted raw gain (over the candidate a prediction was made from) across the
    run's evaluated candidates that carry a prediction, shrunk towards 1 by ``prior`` (in squared score units,
    about two pairs of gain 0.1), clipped to [0, 1.5]. Probes of a dozen examples are noisy; this is how the
    proposer learns how much to trust them."""
    scores = {c.id: c.score for c in state.supported()}
    pairs = []
    for cand in state.supported():
        pred = cand.prediction or Prediction()
        base = pred.base
        if base is None or base not in scores:
            continue
        gain = pred.raw_gain
        if gain is None and pred.score is not None:
            gain = float(pred.score) - scores[base]
        if gain is not None:
            pairs.append((float(gain), cand.score - scores[base]))
    if not pairs:
        return GainCalibration()
    slope = (sum(p * a for p, a in pairs) + prior) / (sum(p * p for p, _ in pairs) + prior)
    slope = min(1.5, max(0.0, slope))
    residual = (sum((a - slope * p) ** 2 for p, a in pairs) / len(pairs)) ** 0.5 if len(pairs) > 1 else 0.0
    return GainCalibration(round(slope, 4), round(residual, 4), len(pairs))


def predicted_score(base_score: float, raw_gain: float, calibration: GainCalibration) -> float:
    return min(1.0, max(0.0, base_score + calibration.slope * raw_gain))


def recalibrate(graph: PlanGraph, state: RunState, calibration: GainCalibration) -> int:
    """Re-predict every predicted node from its recorded raw gain over its evaluated base with ``calibration``;
    returns how many predictions changed."""
    scores = {c.id: c.score for c in state.supported()}
    changed = 0
    for node in nodes_with(graph, PREDICTED):
        base, gain = node.data.get("base"), node.data.get("raw_gain")
        if base not in scores or not isinstance(gain, (int, float)):
            continue
        score = round(predicted_score(scores[base], gain, calibration), 6)
        std = round(max(MIN_STD, float(node.data.get("raw_std", node.std)), calibration.residual), 6)
        if (score, std) != (node.score, node.std):
            graph.update_node(node.id, score=score, std=std, data={**node.data, "calibration": calibration.to_json()})
            changed += 1
    return changed


def recalibrated_graph(state: RunState) -> tuple[PlanGraph, GainCalibration]:
    """The run's lasting graph, its predictions re-predicted with the calibration learnt so far."""
    graph = run_graph(state)
    calibration = calibrate(state)
    recalibrate(graph, state, calibration)
    return graph, calibration


def grow_round(
    state: RunState,
    graph: PlanGraph,
    *,
    sampler: PlanSampler,
    simulator: StateSimulator,
    plans: int,
    depth_limit: int,
) -> Growth:
    """One round of TPS's stages over ``graph``: the proposer's sampler and simulator, merging by behaviour key
    (the planner's key merger, no model), labels by predicted score against the best measured one."""
    best = max((c.score for c in state.supported()), default=0.0)
    return grow(
        graph,
        planning_task(state, graph),
        sampler=sampler,
        simulator=simulator,
        merger=KeyJudgeMerger(),
        labeler=ScoreLabeler(best),
        plans=plans,
        depth_limit=depth_limit,
        new_id=node_namer(graph, state.iteration),
    )


def choose(state: RunState, graph: PlanGraph, solver: str, *, seed: int) -> PlanResult | None:
    """The selection over the whole lasting graph within the iteration's budget (None: nothing to choose).

    An implemented candidate may be chosen for evaluation as it is, once: after a child with its very program was
    evaluated it is left out (in the solver's copy of the graph, not in the run's)."""
    sources = {c.id: c.source for c in state.candidates}
    evaluated_again = {c.parent for c in state.candidates if c.parent in sources and c.source == sources[c.parent]}
    done = [n.id for n in nodes_with(graph, IMPLEMENTED) if n.id in evaluated_again]
    if done:
        graph = copy.deepcopy(graph)
        for node in done:
            graph.update_node(node, dead_end=True)
    if not any(not n.dead_end for n in nodes_with(graph, PREDICTED, IMPLEMENTED)):
        return None
    return select(graph, selection_budget(state), solver=solver, seed=seed)  # type: ignore[arg-type]


def proposals(
    state: RunState, graph: PlanGraph, result: PlanResult, *, source_of: Callable[[NodeId], str] | None = None
) -> list[Proposal]:
    """One proposal per node to evaluate, in the solver's order, with the unevaluated revisions of its chain as
    ``intermediates`` (through the in-edges the solver used). ``source_of`` gives a node's source when the graph's
    ``data["source"]`` does not (the ``tps`` agent writes sources after selection). An implemented candidate chosen
    as it is becomes a proposal of its own program (the loop evaluates it as that candidate's child)."""
    sources = {c.id: c.source for c in state.candidates}
    used = {graph.edge(e).target: e for e in result.path}
    out = []
    for rank, node_id in enumerate(result.evaluate):
        edges = chain(graph, node_id, via=used)
        if not edges:
            node = graph.node(node_id)
            again = _proposal(graph, node_id, "", None, rank, result)
            again.parent, again.source = str(node_id), sources.get(str(node_id), "")
            again.summary = f"{node_id} evaluated as implemented ({node.data.get('summary') or 'no summary'})"
            out.append(again)
            continue
        steps = [_proposal(graph, edge.target, edge.action, source_of, rank, result) for edge in edges]
        for step, edge in zip(steps, edges, strict=True):
            if step.prediction is not None:  # what writing the revision is predicted to cost
                edit_cost = dict(zip(LIMITS[1:], edge.cost[1:], strict=False))
                step.prediction = dataclasses.replace(step.prediction, edit_cost=edit_cost)
        final = steps[-1]
        summaries = [s.summary for s in steps]
        final.parent = str(edges[0].source)
        final.intermediates = steps[:-1]
        # Committed after its intermediates, the program's own revision is what changed from its parent.
        final.summary = summaries[-1] if final.intermediates else "; then ".join(summaries)
        if final.prediction is not None:
            final.prediction = dataclasses.replace(
                final.prediction, extra={**final.prediction.extra, "chain": summaries}
            )
        out.append(final)
    return out


def _proposal(
    graph: PlanGraph,
    node_id: NodeId,
    summary: str,
    source_of: Callable[[NodeId], str] | None,
    rank: int,
    result: PlanResult,
) -> Proposal:
    node = graph.node(node_id)
    data = dict(node.data)
    source = data.pop("source", None) or (source_of(node_id) if source_of else "")
    prediction: dict[str, object] = {
        "node": str(node_id),
        "score": round(node.score or 0.0, 4),
        "std": round(node.std, 4),
        "label": int(node.reward),
        "cost": dict(zip(LIMITS, node.cost, strict=False)),
        "selection": result.solver,
        "rank": rank,
        "selection_value": round(result.value or 0.0, 4),
        **{k: v for k, v in data.items() if k not in ("summary", "hypothesis")},
    }
    return Proposal(
        parent=None,
        source=source,
        summary=str(data.get("summary") or summary),
        hypothesis=str(data.get("hypothesis", "")),
        prediction=Prediction.from_json(prediction),
        node=str(node_id),
    )
