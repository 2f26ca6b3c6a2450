"""Tasks: data loading, splits, metrics and prompt conventions; agent environments (installed as ``metaharness.tasks``).

The text benchmarks of the Meta-Harness paper::

    from metaharness.tasks import get_task, TASK_NAMES   # ("lawbench", "symptom2disease", "uspto")
    task = get_task("symptom2disease", data_dir=None)    # data_dir / METAHARNESS_DATA_DIR, else pinned download
    examples = task.load("val")                          # list[Example(id, input, target, raw)]
    task.score("[DIAGNOSIS]dengue[/DIAGNOSIS]", examples[1])   # {"primary": 1.0}

See :mod:`metaharness.tasks.text` for the :class:`Task` contract, :mod:`metaharness.tasks.metrics` for the
scoring rules and :mod:`metaharness.tasks.data` for where the files come from and how they are verified.
"""

from metaharness.tasks.text import TEXT_TASK_NAMES as TASK_NAMES
from metaharness.tasks.text import Example
from metaharness.tasks.text import TextTask as Task
from metaharness.tasks.text import get_text_task as get_task

__all__ = ["TASK_NAMES", "Example", "Task", "get_task"]
