"""The runner: a whole search built from settings, the layer above the search loop (``metaharness.search``).

It picks and wires what the loop only uses through its seams: the task and its seed harnesses, the models, the
proposer, the evaluator, the run directory and the run's ledger.

- ``.settings``: what a user gave (``SettingsChange``) and the run's settings it resolves into once
  (``RunSettings``);
- ``.models``: the models a new run uses when it names none;
- ``.task``: where a run's task came from, opening it again, and its seed harnesses;
- ``.ledger``: the run's ledger, journaled into ``spend.jsonl`` and held to the run's money caps;
- ``.optimize``: ``optimize``, a whole search from settings (``metaharness optimize``; also
  ``from metaharness import optimize, run_config``).

This package imports nothing when it is imported, so a module of it can be reached without the rest.
"""
