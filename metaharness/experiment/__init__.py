"""Experiments: a grid of searches (dataset x proposer x seed) as ordinary run directories under one folder.

- ``.grid``: plan, run and resume the grid (``experiment.json``, ``cells.jsonl``, one run directory per cell),
  and the rough cost estimate shown before it starts;
- ``.results``: the per-run figures and the tables over seeds and datasets, read back from the run directories
  (``results.json``, ``RESULTS.md``), and ``.page`` the self-contained HTML page with the curves
  (``write_results`` writes all three).
"""

from metaharness.experiment.grid import (
    Cell,
    CellRecord,
    CostEstimate,
    ExperimentSpec,
    GridProgress,
    estimate_cost,
    experiment_spec,
    plan_grid,
    read_cells,
    run_experiment,
)

__all__ = [
    "Cell",
    "CellRecord",
    "CostEstimate",
    "ExperimentSpec",
    "GridProgress",
    "estimate_cost",
    "experiment_spec",
    "plan_grid",
    "read_cells",
    "run_experiment",
]
