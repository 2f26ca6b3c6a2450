"""Tasks, installed as ``metaharness.tasks``: what a harness is optimised for.

Two kinds (the agent benchmarks' environments are in ``metaharness.agents.environments``):

- ``.text``: the text benchmarks of the Meta-Harness paper, each a ``Task`` (``.protocol`` is the contract
  the evaluator, the loop and the proposers rely on)::

      from metaharness.tasks import get_task, TASK_NAMES   # ("lawbench", "symptom2disease", "uspto")
      task = get_task("symptom2disease", data_dir=None)    # data_dir / METAHARNESS_DATA_DIR, else pinned download
      examples = task.load("val")                          # list[Example(id, input, target, raw)]
      task.score("[DIAGNOSIS]dengue[/DIAGNOSIS]", examples[1])   # {"primary": 1.0}

- ``.custom``: your own task, a folder with ``task.toml`` or a dataset ``hf:OWNER/NAME``; ``open_task``
  takes any of the three references (``.registry``)::

      task = open_task("mytask")                           # the folder mytask/ (metaharness init mytask)
      task = open_task("hf:openai/gsm8k", settings={"data.config": "main", "metric.name": "numeric"})
"""

from metaharness.tasks.custom import CustomTask
from metaharness.tasks.protocol import Example, Task
from metaharness.tasks.registry import open_task, reopen_task, task_origin
from metaharness.tasks.text import TEXT_TASK_NAMES as TASK_NAMES
from metaharness.tasks.text import get_text_task as get_task

__all__ = ["TASK_NAMES", "CustomTask", "Example", "Task", "get_task", "open_task", "reopen_task", "task_origin"]
