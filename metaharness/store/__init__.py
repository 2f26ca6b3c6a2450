"""The candidate store: every candidate a git commit with its scores, plus a crash-safe journal beside it.

See :mod:`metaharness.store.git_store` for the repository layout and :mod:`metaharness.store.run_dir` for the
run directory around it.
"""

from metaharness.store.git_store import BEST_REF, NOTES_REF, ROOT_REF, CandidateStore, StoredCandidate
from metaharness.store.record import EVALUATED, FAILED, CandidateRecord, Evaluation
from metaharness.store.run_dir import RunDirectory

__all__ = [
    "BEST_REF",
    "EVALUATED",
    "FAILED",
    "NOTES_REF",
    "ROOT_REF",
    "CandidateRecord",
    "CandidateStore",
    "Evaluation",
    "RunDirectory",
    "StoredCandidate",
]
