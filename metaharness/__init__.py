"""metaharness: optimise LLM harnesses with a proposer model, TPS plan graphs and a budgeted solver.

Where things are (the README's "Architecture" section has the whole tree):

- ``metaharness.optimize``: a whole search from settings; ``metaharness.loop``: the loop it runs.
- ``metaharness.candidates.protocol``, ``metaharness.candidate``, ``metaharness.search.protocol``: the harness
  program contract, the candidate model, the proposer seam.
- ``metaharness.models``: one chat-completion interface over Anthropic, OpenAI-compatible servers and the
  embedded in-process model (cache, cost, retries, structured output).
- ``metaharness.planner``: the TPS planner core (plan graph, subagents, solvers, planning tool), usable alone.
- ``metaharness.evaluation``, ``metaharness.store``, ``metaharness.report``: the sandboxed evaluator, the git
  store of a run, its summaries.
- ``metaharness.tasks`` / ``metaharness.candidates`` / ``metaharness.proposers``: the top-level folders of the
  repository, installed under this namespace.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("metaharness")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
