"""The agent benchmarks, apart from the harness pipeline: the agents, the worlds they act in, and EGB.

- ``.environments``: Sokoban and BlocksWorld under a step budget (exact oracles) and ToolWorld (long tool plans);
- ``puzzle_*``: ReAct, Plan-and-Act, ReAct + TPS and TAPE on the puzzles (``.puzzle_bench`` runs them);
- ``.branching``: entropy-guided branching (EGB), which executes a given tool plan step by step, with the
  ``PlanEnvironment`` and ``ToolChooser`` it needs; ``tool_*``: its model chooser,
  baselines and benchmark (``.tool_bench``).
"""
