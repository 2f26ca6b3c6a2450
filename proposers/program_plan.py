"""From predicted candidates to proposals: the program graph of one iteration and the choice of what to evaluate.

Both planning proposers (``offline``, which predicts by probing, and ``tps``, whose subagents predict) end the same
way: the run's evaluated candidates are the existing nodes, every predicted candidate is a node reached from its
parent by one revision, a selection strategy (:mod:`.selection`) picks what to evaluate within the iteration's
budget, and each chosen node becomes a :class:`~metaharness.proposal.Proposal` whose parent is the nearest
existing ancestor and whose summary spells out the whole revision chain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from metaharness.proposal import Proposal, RunState
from metaharness.proposers.program_ilp import ProgramGraph, Selection
from metaharness.proposers.selection import choose

GOAL, NEUTRAL, DEAD_END = 1, 0, -1


@dataclass
class Predicted:
    """A predicted candidate: one revision (``summary``) of ``parent`` (an existing candidate id or another
    predicted key), with its predicted score, uncertainty, costs and TPS label; ``source`` once implemented."""

    key: str
    parent: str
    summary: str
    score: float
    std: float = 0.05
    label: int = NEUTRAL
    eval_cost: dict[str, float] = field(default_factory=dict)
    edit_cost: dict[str, float] = field(default_factory=dict)
    source: str | None = None
    hypothesis: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Calibration:
    """How far this run's predicted gains held: actual gain ~ ``slope`` x predicted gain, ``residual`` spread."""

    slope: float = 1.0
    residual: float = 0.0
    pairs: int = 0


def calibrate(state: RunState, *, prior: float = 0.02) -> Calibration:
    """Fit the slope of actual on predicted gain (gain over the candidate a prediction was made from) over the
    run's evaluated candidates that carry a prediction, shrunk towards 1 by ``prior`` (in squared score units,
    about two pairs of gain 0.1), clipped to [0, 1.5]. Probes of a dozen examples are noisy; this is how the
    proposer learns how much to trust them."""
    scores = {c.id: c.score for c in state.evaluated()}
    pairs = []
    for cand in state.evaluated():
        pred = cand.prediction or {}
        base = pred.get("base")
        if isinstance(pred.get("score"), (int, float)) and base in scores:
            pairs.append((float(pred["score"]) - scores[base], cand.score - scores[base]))
    if not pairs:
        return Calibration()
    slope = (sum(p * a for p, a in pairs) + prior) / (sum(p * p for p, _ in pairs) + prior)
    slope = min(1.5, max(0.0, slope))
    residual = (sum((a - slope * p) ** 2 for p, a in pairs) / len(pairs)) ** 0.5 if len(pairs) > 1 else 0.0
    return Calibration(round(slope, 4), round(residual, 4), len(pairs))


def label(score: float, best: float, *, dead: bool) -> int:
    """TPS reward labels: +1 predicted to beat the best measured score, -1 dead end, 0 otherwise."""
    if dead:
        return DEAD_END
    return GOAL if score > best else NEUTRAL


def iteration_budget(state: RunState) -> dict[str, float]:
    """The selection budget: ``evals_left`` evaluations plus any token or dollar cap the loop passes."""
    budget = {"evals": float(state.evals_left)}
    budget.update({k: float(v) for k, v in state.budget.items() if k in ("tokens", "usd")})
    return budget


@dataclass
class Plan:
    """What the solver chose: the selection itself, and for every node to evaluate its existing ancestor and the
    revision chain from it (through the revisions the solver used, when merged nodes have several)."""

    selection: Selection
    chains: list[tuple[str, list[Predicted]]]
    strategy: str


def plan(state: RunState, predicted: list[Predicted], strategy: str = "ilp", *, seed: int = 0) -> Plan:
    """Build the program graph of ``state`` + ``predicted`` and choose what to evaluate with ``strategy``."""
    graph = ProgramGraph()
    for cand in state.evaluated():
        graph.add_existing(cand.id, cand.score)
    by_key = {p.key: p for p in predicted}
    for p in predicted:
        if p.parent not in by_key and p.parent not in graph.graph:
            continue  # a revision of something unknown (e.g. a failed candidate): nothing to build on
        graph.add_predicted(
            p.key,
            p.parent,
            p.score,
            std=p.std,
            eval_cost=p.eval_cost,
            edit_cost=p.edit_cost,
            label=p.label,
            summary=p.summary,
        )
    if not any(not d.get("existing") for _, d in graph.graph.nodes(data=True)):
        return Plan(Selection("infeasible", [], [], [], 0.0), [], strategy)
    selection = choose(strategy, graph.graph, iteration_budget(state), seed=seed)
    used = {target: source for source, target in selection.edges}
    chains = []
    for node in selection.evaluate:
        chain = [by_key[node]]
        parent = used.get(node, chain[0].parent)
        while parent in by_key:
            chain.insert(0, by_key[parent])
            parent = used.get(parent, by_key[parent].parent)
        chains.append((parent, chain))
    return Plan(selection, chains, strategy)


def proposal_for(parent: str, chain: list[Predicted], plan_: Plan, rank: int) -> Proposal:
    """The proposal of a chosen chain (its last node must carry ``source``), with the full prediction recorded."""
    last = chain[-1]
    prediction = {
        "score": round(last.score, 4),
        "std": round(last.std, 4),
        "label": last.label,
        "chain": [p.summary for p in chain],
        "cost": last.eval_cost,
        "selection": plan_.strategy,
        "rank": rank,
        "selection_value": round(plan_.selection.value, 4),
        **last.details,
    }
    return Proposal(
        parent=parent,
        source=last.source or "",
        summary="; then ".join(p.summary for p in chain),
        hypothesis=last.hypothesis,
        prediction=prediction,
    )
