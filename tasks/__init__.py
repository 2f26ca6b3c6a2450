"""Tasks: data loading, splits, metrics and prompt conventions; agent environments (installed as ``metaharness.tasks``)."""
