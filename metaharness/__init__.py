"""metaharness: optimise LLM harnesses with a proposer model, TPS plan graphs and a budgeted solver.

``from metaharness import optimize, run_config``: a whole search from settings (``metaharness.runner.optimize``,
the library behind ``metaharness optimize``). Where things are (docs/architecture.md has the whole
tree; each stage's seam is its ``protocol.py``):

- ``metaharness.runner``: a whole search built from settings (``optimize``; the run's settings, resolved once from
  what the user gave; the task, the models, the proposer and the run's ledger wired together).
- ``metaharness.search``: the search loop (``loop``), the evaluation policy (``staging``), the settings the loop
  reads and the proposer seam (``protocol``).
- ``metaharness.candidate``, ``metaharness.budget``, ``metaharness.frontier``, ``metaharness.errors``: the candidate
  record, the budget, the best candidate and the error base, which every layer (the planner and the store included)
  shares.
- ``metaharness.models``: one chat-completion interface over Anthropic, OpenAI-compatible servers and the
  embedded in-process model (cache, cost, retries, structured output).
- ``metaharness.planner``: the TPS planner core (plan graph, subagents, solvers, planning tool), usable alone.
- ``metaharness.evaluation``, ``metaharness.store``, ``metaharness.report``: the sandboxed evaluator, the git
  store of a run, its summaries.
- ``metaharness.agents``: the agent benchmarks, their environments and entropy-guided branching.
- ``metaharness.tasks`` / ``metaharness.candidates`` / ``metaharness.proposers``: the top-level folders of the
  repository, installed under this namespace.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from metaharness.runner.optimize import optimize, run_config

__all__ = ["__version__", "optimize", "run_config"]


def __getattr__(name: str) -> Any:
    # Exported lazily: every sandbox process and every CLI call imports this package, and must start fast (reading
    # the installed version costs a sandbox process half of its start-up imports).
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("metaharness")
        except PackageNotFoundError:  # running from a source tree that was never installed
            return "0+unknown"
    if name in ("optimize", "run_config"):
        return getattr(importlib.import_module("metaharness.runner.optimize"), name)
    raise AttributeError(f"module 'metaharness' has no attribute '{name}'")
