"""metaharness: optimise LLM harnesses with a proposer model, TPS plan graphs and a budgeted solver.

The package is organised one concept per subpackage:

- ``metaharness.models``: one chat-completion interface over Anthropic, OpenAI-compatible servers and the
  embedded in-process model (cache, cost, retries, structured output).
- ``metaharness.planner``: the TPS planner core (plan graph, subagents, solvers, planning tool).
- ``metaharness.tasks`` / ``metaharness.candidates`` / ``metaharness.proposers``: the top-level folders of the
  repository, installed under this namespace.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("metaharness")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
