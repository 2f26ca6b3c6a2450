"""The paper's three text datasets (LawBench, Symptom2Disease, USPTO-50k) as tasks.

``.benchmarks`` defines them (rows to examples, descriptions, metrics), ``.splits`` finds and verifies the
split files (a local folder, or the paper's pinned commit), ``.metrics`` is the paper's scorer.
"""

from metaharness.tasks.text.benchmarks import TEXT_TASK_NAMES, TextTask, get_text_task

__all__ = ["TEXT_TASK_NAMES", "TextTask", "get_text_task"]
