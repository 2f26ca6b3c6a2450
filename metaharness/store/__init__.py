"""The run's storage: every candidate a git commit with its scores, plus a crash-safe journal beside it.

The loop talks to it through ``RunStore`` (``.protocol``, the contract: a ``CandidateStore`` and a
``RunJournal``); ``RunDirectory`` (``.run_dir``) implements it with a ``GitStore``
(``.git_store``, the repository layout), a journal (``.journal``) and the log (``.log``, its lines).
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
