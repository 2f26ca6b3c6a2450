"""Agent environments: step-budgeted puzzles with exact oracles, and ToolWorld's long tool plans.

- ``.puzzle``: the ``PuzzleEnv`` protocol and the oracle helpers every benchmark metric uses;
  ``.sokoban`` and ``.blocksworld`` implement it; ``.puzzle_instances`` holds the versioned instance sets
  (``instances/*.json``) and their generator.
- ``.toolworld``: long plans over a generated 1,216-tool library (``.toolworld_library``) with a
  deterministic simulator, and BM25 retrieval of candidate tools per step (``.toolworld_retrieval``).
"""
