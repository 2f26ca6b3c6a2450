"""The search: the optimisation loop and what drives it, from a run's settings to its best candidate.

- ``.optimize``: ``optimize``, a whole search from settings (``metaharness optimize``; also
  ``from metaharness import optimize, run_config``);
- ``.settings``: the run's settings, resolved once from the given, the stored and the defaults;
- ``.loop``: the loop (propose -> check -> evaluate -> commit, crash-safe);
- ``.staging``: the evaluation policy that decides which candidates run on which examples;
- ``.protocol``: the proposer seam (``Proposer``, ``RunState``,
  ``Proposal``), which every proposer in ``metaharness.proposers`` implements.

This package imports nothing when it is imported, so a module of it can be reached without the rest.
"""
