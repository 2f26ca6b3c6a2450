"""Your own task: a folder with a task file and its splits, or a dataset from the Hugging Face hub.

- ``.spec``: the task file (``task.toml``) and ``-T KEY=VALUE`` settings;
- ``.data``: reading the splits with the ``datasets`` library, carving a missing val split from train;
- ``.metrics``: the built-in metrics, the answer convention and a user's Python metric function;
- ``.task``: ``CustomTask``, the ``Task`` they make;
- ``example/``: the small working task ``metaharness init DIR`` copies.
"""

from metaharness.tasks.custom.task import CustomTask, open_dataset_task, open_task_folder

__all__ = ["CustomTask", "open_dataset_task", "open_task_folder"]
