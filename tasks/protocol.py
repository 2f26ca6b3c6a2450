"""The task seam: what the evaluator, the loop and the proposers may assume about a benchmark.

A ``Task`` is a set of named splits of ``Example`` rows plus the metric that scores a harness's answer.
The paper's text datasets implement it (``metaharness.tasks.text``); so does the probe's held-out view of a
train split (``metaharness.proposers.probe.HeldOutTask``). The whole contract:

- ``name``: a short identifier (``"lawbench"``), used in file names and records.
- ``description``: the task in words and the answer convention its metric parses (answer tags and the like), for
  proposer prompts; may be empty.
- ``load(split) -> list[Example]``: every example of ``split`` in a fixed order, the same on every call (ids are
  unique within a split). ``"train"`` is what a harness receives as ``train``; ``"val"`` and ``"test"`` are only
  scored. An unknown split raises ``InputError``; a split whose files are missing or
  corrupt raises another ``MetaharnessError`` that says how to get them.
- ``score(prediction, example) -> dict[str, float]``: the metric of one answer, with ``"primary"`` first (the
  number a search maximises: higher is better, in [0, 1]) and any secondary metrics after it. It never raises for
  a bad answer: a malformed or empty prediction scores 0 on every metric.
- ``metric_names() -> list[str]``: the keys ``score`` returns, in the same order (``"primary"`` first), so a
  failed example can be scored 0 on each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from metaharness.candidates.protocol import TrainItem


@dataclass(frozen=True)
class Example:
    """One row of a split: ``input`` is what a harness's ``predict`` receives (no instructions added), ``target``
    the gold answer in the form the metric reads, ``raw`` the row as stored."""

    id: str
    input: str
    target: str
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def as_train_item(self) -> TrainItem:
        """The shape harnesses receive in ``train``: ``{"id", "input", "target"}``."""
        return {"id": self.id, "input": self.input, "target": self.target}


@runtime_checkable
class Task(Protocol):
    """A benchmark: splits of examples and a metric (the module docstring is the contract)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    def load(self, split: str) -> list[Example]: ...

    def score(self, prediction: str, example: Example) -> dict[str, float]: ...

    def metric_names(self) -> list[str]: ...
