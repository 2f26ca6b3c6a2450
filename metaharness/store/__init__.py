"""The candidate store: every candidate a git commit with its scores, plus a crash-safe journal beside it.

The loop talks to it through :class:`RunStore` (:mod:`.protocol`, the contract); :class:`RunDirectory`
(:mod:`.run_dir`) implements it with a :class:`CandidateStore` (:mod:`.git_store`, the repository layout) and a
journal (:mod:`.journal`). ``docs/run-directory.md`` describes the run directory and its git layout for users.
"""

from metaharness.store.git_store import BEST_REF, NOTES_REF, ROOT_REF, CandidateStore, StoredCandidate
from metaharness.store.protocol import RunStore
from metaharness.store.run_dir import RunDirectory

__all__ = ["BEST_REF", "NOTES_REF", "ROOT_REF", "CandidateStore", "RunDirectory", "RunStore", "StoredCandidate"]
