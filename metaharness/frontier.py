"""The search frontier: the best candidate (the one a run returns), and the Pareto set of score against context size
and cost.

Only *supported* candidates count (scored on every example of the search's share; see
``metaharness.candidate.Candidate.supported``): a candidate scored on a few examples so far is not compared on
a score those examples cannot support. A candidate is on the Pareto front when no other supported candidate is at
least as good on every objective (higher validation score, fewer prompt tokens per example, fewer dollars) and
strictly better on one. Failed candidates are never on it.

>>> from metaharness.candidate import Candidate, Evaluation
>>> def cand(cid, score, ctx):
...     return Candidate(cid, None, 0, "", evaluation=Evaluation("val", {"primary": score}, {"context_tokens": ctx}))
>>> [c.id for c in pareto_front([cand("c001", 0.3, 100), cand("c002", 0.5, 900), cand("c003", 0.2, 500)])]
['c001', 'c002']
"""

from __future__ import annotations

from collections.abc import Iterable

from metaharness.candidate import Candidate


def objectives(record: Candidate) -> tuple[float, float, float]:
    """The record's objectives, each oriented so that larger is better."""
    cost = record.evaluation.cost if record.evaluation else {}
    return (record.score, -float(cost.get("context_tokens", 0.0)), -float(cost.get("usd", 0.0)))


def dominates(a: Candidate, b: Candidate) -> bool:
    oa, ob = objectives(a), objectives(b)
    return all(x >= y for x, y in zip(oa, ob, strict=False)) and oa != ob


def evaluated(records: Iterable[Candidate]) -> list[Candidate]:
    """The supported candidates (see the module docstring)."""
    return [r for r in records if r.supported]


def evidence(record: Candidate) -> float:
    """Every score the candidate has, pooled by example count: its validation score, its held-out confirm score and
    a model-free candidate's training-fold score (``metaharness.search.train_folds``); what picks the contenders the
    held-out confirm examples choose among, and breaks a tie between them. The folds, two hundred training examples
    where the search has a few dozen, outweigh the search's score, the most flattered (it chose among many
    programs); the confirm examples then decide, being drawn from the validation split, which the folds are not."""
    ev = record.evaluation
    if ev is None:
        return record.score
    parts = [(ev.primary, ev.examples)] + [(s.primary, s.examples) for s in (ev.confirm, ev.folds) if s is not None]
    count = sum(n for _, n in parts)
    return sum(score * n for score, n in parts) / count if count else record.score


def rank(record: Candidate) -> tuple[bool, float, float, float]:
    """What the best maximises: a candidate confirmed on held-out examples before one that is not, then the
    confirmed score (held-out examples of the task's own distribution decide between the contenders), then all its
    evidence pooled (``evidence``), then the validation score; see ``best``."""
    ev = record.evaluation
    confirm = ev.confirm if ev is not None else None
    primary = confirm.primary if confirm is not None else 0.0
    return (confirm is not None, primary, evidence(record), record.score)


def best(records: Iterable[Candidate]) -> Candidate | None:
    """The candidate the run returns among supported candidates: when some were confirmed on the held-out examples
    that choose it (the search's best contenders, ``metaharness.search.held_out``), the highest confirmed score, ties
    by the pooled validation, confirm and training-fold scores (``evidence``); else the highest pooled score. The
    earliest wins a tie (as the store's ``best`` ref does)."""
    done = evaluated(records)
    return max(done, key=rank) if done else None


def pareto_front(records: Iterable[Candidate]) -> list[Candidate]:
    """Non-dominated supported candidates, in the order given (duplicates in every objective all stay)."""
    done = evaluated(records)
    return [r for r in done if not any(dominates(o, r) for o in done)]
