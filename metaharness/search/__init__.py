"""The search: the optimisation loop and what drives it, from settings to the best candidate.

- :mod:`.protocol`: the proposer seam (:class:`~.protocol.Proposer`, :class:`~.protocol.RunState`,
  :class:`~.protocol.Proposal`).

This package imports nothing when it is imported, so a module of it can be reached without the rest.
"""
