"""The paired evidence staged evaluation reads off the candidates: each one's scores by example, its paired
differences over another, the reference it is measured against, its nearest evaluated ancestor and its outputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from metaharness.candidate import Candidate
from metaharness.search.model_free import record_outputs
from metaharness.store.files import read_jsonl


def reference(candidates: Sequence[Candidate]) -> Candidate | None:
    """The supported candidate with the highest score (ties: the earlier): what gains are measured against."""
    supported = [c for c in candidates if c.supported]
    return max(supported, key=lambda c: c.score) if supported else None


def scores_of(candidate: Candidate) -> dict[str, float]:
    """Example id -> the candidate's primary score there, for every validation example it was scored on."""
    ev = candidate.evaluation
    return dict(zip(ev.example_ids, ev.example_scores, strict=False)) if ev else {}


def paired(candidate: Candidate, ref: Candidate) -> list[float]:
    """The candidate's score minus the reference's on every example both scored, in the candidate's order."""
    ref_scores = scores_of(ref)
    return [s - ref_scores[i] for i, s in scores_of(candidate).items() if i in ref_scores]


def evaluated_ancestor(
    candidate: Candidate, by_id: Mapping[str, Candidate], *, supported: bool = False
) -> Candidate | None:
    """The nearest ancestor of ``candidate`` (itself excluded) scored on validation examples, supported (scored on
    its whole share) when ``supported``: from its prediction's base when that is a candidate in ``by_id``, else from
    its parent, up the parents. What its prior and its costs are read from, and whose recorded calls its replay
    reuses (also what `benchmarks/replay_study.py` replays from)."""
    seen: set[str] = set()
    base = candidate.prediction.base if candidate.prediction is not None else None
    cid = base if base in by_id else candidate.parent
    while cid is not None and cid in by_id and cid not in seen:
        seen.add(cid)
        found = by_id[cid]
        if found.supported or (found.evaluated and not supported):
            return found
        cid = found.parent
    return None


def sample_variance(values: Sequence[float]) -> float:
    """The unbiased sample variance of two or more values."""
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def trace_outputs(path: Path) -> dict[str, str]:
    """Example id -> the harness's output of every record of a candidate's trace file (`record_outputs`), for
    `Standing`'s ``outputs``; a torn line is skipped."""
    return record_outputs(read_jsonl(path))
