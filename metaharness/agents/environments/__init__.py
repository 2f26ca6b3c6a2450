"""Agent environments: step-budgeted puzzles with exact oracles, and ToolWorld's long tool plans.

- :mod:`.puzzle`: the :class:`~.puzzle.PuzzleEnv` protocol and the oracle helpers every benchmark metric uses;
  :mod:`.sokoban` and :mod:`.blocksworld` implement it; :mod:`.puzzle_instances` holds the versioned instance sets
  (``instances/*.json``) and their generator.
- :mod:`.toolworld`: long plans over a generated 1,216-tool library (:mod:`.toolworld_library`) with a
  deterministic simulator, and BM25 retrieval of candidate tools per step (:mod:`.toolworld_retrieval`).
"""
