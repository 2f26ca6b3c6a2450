"""The sandbox process: confines itself, loads one harness and answers ``predict`` requests (stdlib only).

Run by ``metaharness.evaluation.sandbox`` as ``python -s -B -P -m metaharness.evaluation.worker PARENT_PID`` with
a clean environment. It first has the kernel kill it when its parent dies (and exits if ``PARENT_PID`` is no longer
its parent). It speaks JSON lines with the parent: requests on stdin, replies on a private copy of stdout (the
harness's own ``print`` output goes to stderr, which the parent drains and keeps the tail of), so nothing a harness
prints can corrupt the protocol.

Parent -> worker: ``{"type": "init", "scratch", "limits", "isolation", "source", "train", "context_window"}``
once, then ``{"type": "predict", "input"}`` per example, and ``{"type": "response", "text"|"parsed"|"error"}``
answering each model call. Worker -> parent: ``{"type": "ready", "layers"}`` or ``{"type": "failed", "error"}``
after init, ``{"type": "call", "request"}`` per model call, ``{"type": "result", "prediction"|"error"}`` per
example. Predictions and errors are cut to the caps of ``.bounds`` before they are sent.

The worker's CPU limit is a hard limit for its whole life (``MAX_EXAMPLES_PER_WORKER`` examples); the
per-example CPU limit is enforced by the parent, which reads the worker's CPU time from outside.

The ``lm`` object a harness receives is ``metaharness.candidates.protocol.LM``, whose model calls go over this
pipe.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
import threading
import traceback
from collections.abc import Mapping
from typing import IO, Any

from metaharness.candidates.protocol import HARNESS_FILE, LM, Harness, LMReply, TrainItem
from metaharness.evaluation.bounds import MAX_ERROR_CHARS, MAX_PREDICTION_CHARS, cut
from metaharness.evaluation.confine import Limits, arm_parent_death, confine

# The CPU hard limit allows this many examples; the pool retires a worker then. Enough for a model-free check
# (every example asked 3 times) of 85 examples in one load: a harness that trains in ``__init__`` pays that once
# (benchmarks/model_free_loads.py).
MAX_EXAMPLES_PER_WORKER = 256


class _Channel:
    """JSON lines to and from the parent; a lock pairs each call with its response when a harness uses threads."""

    def __init__(self, reader: IO[bytes], writer: IO[bytes]):
        self._reader = reader
        self._writer = writer
        self._lock = threading.Lock()

    def send(self, message: Mapping[str, object]) -> None:
        self._writer.write(json.dumps(message).encode() + b"\n")  # ASCII: lone surrogates cannot break it
        self._writer.flush()

    def receive(self) -> dict[str, Any]:
        line = self._reader.readline()
        if not line:
            raise SystemExit(0)  # parent closed the pipe
        return json.loads(line)

    def call(self, request: Mapping[str, object]) -> LMReply:
        """The harness's ``lm`` (a ``ModelCall``): one call through the parent
        (its ``response`` line: the reply's keys beside ``type``)."""
        with self._lock:
            self.send({"type": "call", "request": request})
            response = self.receive()
        reply: LMReply = {}
        if isinstance(text := response.get("text"), str):
            reply["text"] = text
        if "parsed" in response:
            reply["parsed"] = response["parsed"]
        if isinstance(error := response.get("error"), str):
            reply["error"] = error
        return reply


def _error_text() -> str:
    kind, value, tb = sys.exc_info()
    frames = [f for f in traceback.extract_tb(tb) if f.filename.endswith(HARNESS_FILE)]
    where = f" (harness.py line {frames[-1].lineno})" if frames else ""
    try:
        words = str(value)
    except BaseException:  # noqa: BLE001 - the harness's exception cannot say what it is: still an error to report
        words = "<its str() failed>"
    headline = f"{kind.__name__ if kind else 'Error'}: {cut(words, MAX_ERROR_CHARS // 2)}{where}"
    return cut(f"{headline}\n{traceback.format_exc(limit=-8)}", MAX_ERROR_CHARS)


def _load_harness(scratch: str, source: str, lm: LM, train: list[TrainItem]) -> Harness:
    path = os.path.join(scratch, HARNESS_FILE)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(source)
    spec = importlib.util.spec_from_file_location("harness", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules["harness"] = module
    spec.loader.exec_module(module)
    harness_class = getattr(module, "Harness", None)
    if not isinstance(harness_class, type):
        raise TypeError(
            "the file defines no class named Harness (the harness contract: class Harness with "
            "__init__(self, lm, train) and predict(self, x) -> str)"
        )
    harness = harness_class(lm, train)
    if not callable(getattr(harness, "predict", None)):
        raise TypeError("Harness has no predict(self, x) method")
    return harness


def main() -> None:
    arm_parent_death()  # the parent is the evaluating process: killed in any way, it takes this sandbox with it
    if os.getppid() != int(sys.argv[1]):  # it died before the signal was armed
        return
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the harness's print() goes to the stderr log, never into the protocol
    channel = _Channel(sys.stdin.buffer, protocol_out)
    init = channel.receive()
    limits = Limits(**init["limits"])
    scratch = init["scratch"]
    lifetime = limits.cpu_seconds * (MAX_EXAMPLES_PER_WORKER + 1)
    layers = confine(scratch, dataclasses.replace(limits, cpu_seconds=lifetime), init["isolation"])
    os.chdir(scratch)
    try:
        harness = _load_harness(scratch, init["source"], LM(channel.call, init["context_window"]), init["train"])
    except BaseException:  # noqa: BLE001 - any failure of untrusted code is reported, including SystemExit
        channel.send({"type": "failed", "error": _error_text()})
        return
    channel.send({"type": "ready", "layers": layers})
    while True:
        message = channel.receive()
        if message.get("type") != "predict":
            continue
        try:
            prediction = harness.predict(message["input"])
        except BaseException:  # noqa: BLE001 - the example fails, the worker answers the next one
            channel.send({"type": "result", "error": _error_text()})
            continue
        if not isinstance(prediction, str):
            channel.send({"type": "result", "error": f"predict returned {type(prediction).__name__}, not str"})
        else:
            channel.send({"type": "result", "prediction": cut(prediction, MAX_PREDICTION_CHARS)})


if __name__ == "__main__":
    main()
