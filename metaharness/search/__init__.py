"""The search: the optimisation loop and what it decides with, from a run's search settings to its best candidate.

- ``.loop``: the loop (propose -> check -> evaluate -> commit, crash-safe);
- ``.staging``: the evaluation policy that decides which candidates run on which examples;
- ``.settings``: what the loop reads of the run's settings (``SearchSettings``, with the run's ``SearchBudget``);
- ``.replay``: free evidence, a program scored on the calls the run already made;
- ``.protocol``: the proposer seam (``Proposer``, ``RunState``, ``Proposal``), which every proposer in
  ``metaharness.proposers`` implements.

The layer above (``metaharness.runner``) builds a search from settings: the task, the models, the proposer. This
package imports nothing from it, nor from the proposers, the tasks' implementations, the report or the command line.
This package imports nothing when it is imported, so a module of it can be reached without the rest.
"""
