"""Evaluate a harness on a task split: sandboxed, in parallel, with a full trace.

Public API::

    from metaharness.evaluation import evaluate, check_harness, EvalReport, HarnessInvalid

    report = evaluate(harness_path, task, split="val", *, model, limit=None, workers=None, trace_path=None,
                      progress=None, limits=None, data_dir=None) -> EvalReport
    check_harness(harness_path, task, *, model=None) -> None     # raises HarnessInvalid(error text)

- ``task``: a name from ``metaharness.tasks.TASK_NAMES`` or a ``Task``; ``model``: a
  ModelClient or a model spec string.
- ``EvalReport`` (``.records``): ``scores`` (mean per metric, ``"primary"`` = the paper's metric; failed
  examples count 0), ``records`` (one ``ExampleRecord`` per example: ``id, input, target, prediction, scores,
  calls, error, seconds``; each call has ``messages, options, response, parsed, input_tokens, output_tokens,
  latency_s, cached, usd, error``), ``cost`` (``input_tokens, output_tokens, usd, context_tokens`` = mean prompt
  tokens per example, ``calls``, ``cached_calls``), ``errors``, ``seconds``, ``load_error``; ``to_json()`` gives
  the summary, ``write(folder)`` writes ``summary.json`` + ``records.jsonl``.
- The loop reaches all this through the evaluator seam (``.protocol``; the real one is ``.task_evaluator``).

The harness program and its ``lm`` are specified in ``metaharness.candidates.protocol``. Isolation (``.sandbox``,
``.confine``, ``.namespaces``, ``.syscall_filter``): each harness instance lives in its own process, in
its own network, PID and mount namespaces with a file system holding only Python, the system libraries and a
scratch folder, as an unprivileged uid, under a seccomp filter that refuses every socket and under Landlock, with
address-space, CPU-time, process, file-size, wall-time and model-call limits it cannot raise, an environment
without secrets, and bounded output (``.bounds``); its model calls go through the parent's proxy
(``.proxy``), which owns the client and records every call; ``.worker`` is the sandbox process's side.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from metaharness.evaluation.evaluator import HarnessInvalid, check_harness, evaluate
    from metaharness.evaluation.records import EvalReport, ExampleRecord
    from metaharness.evaluation.sandbox import SandboxLimits

# Exported lazily: every sandbox process imports this package to reach its worker module, and must start fast.
_EXPORTS = {
    "EvalReport": "records",
    "ExampleRecord": "records",
    "HarnessInvalid": "evaluator",
    "SandboxLimits": "sandbox",
    "check_harness": "evaluator",
    "evaluate": "evaluator",
}
__all__ = ["EvalReport", "ExampleRecord", "HarnessInvalid", "SandboxLimits", "check_harness", "evaluate"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'metaharness.evaluation' has no attribute '{name}'")
    return getattr(importlib.import_module(f"metaharness.evaluation.{_EXPORTS[name]}"), name)
