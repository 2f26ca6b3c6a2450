"""The evaluator seam: how the optimisation loop measures a candidate, and the real evaluator behind it.

The loop never runs harness code itself; it asks a ``CandidateEvaluator``. The whole contract:

- ``check(harness) -> str | None``: import and instantiate the harness file in isolation (with the task's training
  examples); return the error text a proposer can act on, or ``None`` when it loads.
- ``examples(split) -> list[str]``: the ids of the examples ``evaluate`` would run on ``split``, in split order
  (for ``"val"``, after any limit the evaluator applies). The loop orders and shares them
  (``metaharness.search.staging``).
- ``evaluate(harness, split, *, trace_path, progress=None, examples=None) -> Evaluation``: run it on every example
  of ``split`` (``"val"``, or ``"test"`` at the end of a run), or only on the ids in ``examples`` (in that order),
  write one JSON line per example to ``trace_path`` (input, prediction, target, scores, every model call, error;
  the file is replaced) and return the aggregates: mean ``scores`` with ``"primary"`` (higher is better), ``cost``
  (``input_tokens``, ``output_tokens``, ``usd``, ``context_tokens`` per example, and what the run was charged:
  ``charged_examples``, ``charged_tokens``), the number of ``examples`` and of ``errors``, ``example_ids`` (the
  ids run, in order) and ``example_scores`` (each one's primary score). ``progress(done, total)`` is called as
  examples finish.
- Error rule (as in GEPA's adapter): one example's failure never raises; it scores 0 and its error goes into the
  trace. Raise ``CandidateFailed`` when the candidate as a whole cannot run (its harness does not load), so
  the loop records it as failed with that error. Raise a ``MetaharnessError`` for
  systemic failures (a reached cost cap, an unreachable model, a missing split), which stop the run.
- ``split_unavailable(split) -> str | None``: why ``split`` cannot be evaluated here (for example the test split is
  not in the local data folder), or ``None`` when it can.

``TaskEvaluator`` is the real one: the sandboxed parallel evaluator of
``metaharness.evaluation`` on one task with the fixed task model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from metaharness.candidate import Evaluation

Progress = Callable[[int, int], None]


class CandidateFailed(Exception):
    """The candidate itself cannot run (not the evaluator, not the model); the message is its error."""


class CandidateEvaluator(Protocol):
    """How the loop measures candidates (the module docstring is the contract)."""

    def check(self, harness: Path) -> str | None: ...

    def examples(self, split: str) -> list[str]: ...

    def evaluate(
        self,
        harness: Path,
        split: str,
        *,
        trace_path: Path,
        progress: Progress | None = None,
        examples: Sequence[str] | None = None,
    ) -> Evaluation: ...

    def split_unavailable(self, split: str) -> str | None: ...
