"""An iteration's plan (`plan_entries`): the candidates to commit for what the proposer returned, with fresh ids,
every parent before its children, a proposal's intermediate revisions as candidates of their own."""

from __future__ import annotations

import dataclasses

from metaharness.candidate import PlanEntry, Prediction, candidate_id
from metaharness.search.protocol import Proposal


def plan_entries(proposals: list[Proposal], first: int, realised: dict[str, str]) -> list[PlanEntry]:
    """An iteration's plan: one entry per candidate to commit, ids from ``c{first}`` on, every parent before its
    children.

    A proposal's ``intermediates`` become entries of their own (``"evaluate": false``) chained from the proposal's
    ``parent``, the proposal's entry revising the last of them. An intermediate whose ``node`` is already realised
    (``realised``: node -> committed candidate id; a candidate id names itself) or already planned is not
    planned again: the chain goes through that candidate. One whose node another proposal evaluates is that
    proposal (planned first, with its own chain). A proposal whose node is already committed evaluates that
    candidate's program again as its child (the node stays with the first candidate).
    """
    entries: list[PlanEntry] = []
    by_node = dict(realised)
    finals = {p.node: p for p in proposals if p.node is not None}
    planned: dict[int, str] = {}  # id(proposal) -> its entry's candidate id
    under_way: set[int] = set()

    def add(p: Proposal, parent: str | None, evaluate: bool) -> str:
        cid = candidate_id(first + len(entries))
        node = p.node if p.node is not None and p.node not in by_node else None
        if p.node is not None and node is None:
            parent = by_node[p.node]
        prediction = p.prediction or Prediction()
        if node is not None:
            prediction = dataclasses.replace(prediction, node=node)
            by_node[node] = cid
        kept = prediction if prediction.to_json() else None
        entries.append(PlanEntry(cid, parent, p.source, p.summary, p.hypothesis, kept, node, evaluate))
        return cid

    def plan(p: Proposal) -> str:
        if id(p) not in planned:
            under_way.add(id(p))
            parent = p.parent
            for step in p.intermediates:
                final = finals.get(step.node) if step.node is not None else None
                if step.node is not None and step.node in by_node:
                    parent = by_node[step.node]
                elif final is not None and final is not p and id(final) not in under_way:
                    parent = plan(final)
                else:
                    parent = add(step, parent, evaluate=False)
            planned[id(p)] = add(p, parent, evaluate=True)
        return planned[id(p)]

    for proposal in proposals:
        plan(proposal)
    return entries
