"""Evaluate a harness on a task split: sandboxed, in parallel, with a full trace.

Public API::

    from metaharness.evaluation import evaluate, check_harness, EvalReport, HarnessInvalid

    report = evaluate(harness_path, task, split="val", *, model, limit=None, workers=None, trace_path=None,
                      progress=None, limits=None, data_dir=None) -> EvalReport
    check_harness(harness_path, task, *, model=None) -> None     # raises HarnessInvalid(error text)

- ``task``: a name from ``metaharness.tasks.TASK_NAMES`` or a ``Task``; ``model``: a ModelClient or spec string.
- ``EvalReport``: ``scores`` (mean per metric, ``"primary"`` = the paper's metric; failed examples count 0),
  ``records`` (:class:`ExampleRecord`: ``id, input, target, prediction, scores, calls, error, seconds``; each call
  has ``messages, options, response, parsed, input_tokens, output_tokens, latency_s, cached, usd, error``), ``cost``
  (``input_tokens, output_tokens, usd, context_tokens`` = mean prompt tokens per example, ``calls``,
  ``cached_calls``), ``errors``, ``seconds``; ``to_json()`` gives the summary, ``write(folder)`` writes
  ``summary.json`` + ``records.jsonl``.

The harness program (DESIGN.md): one Python file defining ``class Harness`` with ``__init__(self, lm, train)`` and
``predict(self, x: str) -> str``. ``train`` is a list of ``{"id", "input", "target"}`` dicts (the task's train
split); ``x`` is an example's raw input; ``lm`` is :class:`metaharness.evaluation.worker.LM`:
``lm(prompt_or_messages, *, system=None, max_tokens=512, temperature=0.0, stop=None) -> str``,
``lm.json(prompt_or_messages, schema, *, system=None, max_tokens=512) -> parsed JSON``, ``lm.context_window``.
A harness may define ``learn(self, results)``; the evaluator never calls it on a scored split (no gold answers
flow back into a harness during evaluation); a harness that wants memory builds it from ``train``.

Isolation (see :mod:`.sandbox` and :mod:`.confine`): each harness instance lives in its own process, confined by
Landlock (and, as root, an unprivileged uid) to a scratch folder, with address-space, CPU-time, wall-time and
model-call limits, an environment without secrets and no network; its model calls go through the parent's proxy
(:mod:`.proxy`), which owns the client and records every call.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from metaharness.evaluation.evaluator import HarnessInvalid, check_harness, evaluate
    from metaharness.evaluation.report import EvalReport, ExampleRecord
    from metaharness.evaluation.sandbox import SandboxLimits

# Exported lazily: every sandbox process imports this package to reach its worker module, and must start fast.
_EXPORTS = {
    "EvalReport": "report", "ExampleRecord": "report", "HarnessInvalid": "evaluator", "SandboxLimits": "sandbox",
    "check_harness": "evaluator", "evaluate": "evaluator",
}  # fmt: skip
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'metaharness.evaluation' has no attribute '{name}'")
    return getattr(importlib.import_module(f"metaharness.evaluation.{_EXPORTS[name]}"), name)
