"""The run's storage: every candidate a git commit with its scores, plus a crash-safe journal beside it.

The loop talks to it through :class:`RunStore` (:mod:`.protocol`, the contract: a :class:`CandidateStore` and a
:class:`RunJournal`); :class:`RunDirectory` (:mod:`.run_dir`) implements it with a :class:`GitStore`
(:mod:`.git_store`, the repository layout), a journal (:mod:`.journal`) and the log (:mod:`.log`, its lines).
``docs/run-directory.md`` describes the run directory and its git layout for users.
"""

from metaharness.store.git_store import BEST_REF, NOTES_REF, ROOT_REF, GitStore, StoredCandidate
from metaharness.store.protocol import CandidateStore, RunJournal, RunStore
from metaharness.store.run_dir import RunDirectory

__all__ = [
    "BEST_REF",
    "NOTES_REF",
    "ROOT_REF",
    "CandidateStore",
    "GitStore",
    "RunDirectory",
    "RunJournal",
    "RunStore",
    "StoredCandidate",
]
