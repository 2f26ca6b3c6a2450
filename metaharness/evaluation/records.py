"""What an evaluation produces: one record per example and the aggregate report.

``EvalReport.to_json()`` is the summary (no records); ``EvalReport.write(folder)`` writes ``summary.json`` and
``records.jsonl`` (one ``ExampleRecord`` per line, in split order), the trace a proposer reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypedDict

from metaharness.candidates.protocol import LMReply
from metaharness.errors import space_for
from metaharness.json_types import JSONObject, JSONValue
from metaharness.text import json_text

CallHandler = Callable[[JSONObject], LMReply]
"""Answers one ``lm()`` call of a harness: its payload (the JSON object the harness passed) to the reply."""


class TracedMessage(TypedDict):
    role: str
    content: str


class CallRecord(TypedDict, total=False):
    """One task-model call in an example's trace (``ExampleRecord``). Every key is written for a call made
    now; a record read from an older trace may lack some, so readers use ``.get``."""

    # The messages as the trace keeps them (``metaharness.evaluation.proxy.traced``): cut to a size, a
    # message that was not an object kept as its text; the text of whatever a rejected call sent instead of a list.
    messages: list[TracedMessage | str] | str | None
    options: JSONObject
    response: str | None
    parsed: JSONValue
    input_tokens: int
    output_tokens: int
    latency_s: float
    cached: bool
    charged: bool
    usd: float
    error: str | None


@dataclass
class ExampleRecord:
    """One example: what went in, what came out, how it scored, every model call, and the error if any.

    ``calls`` holds one dict per task-model call: ``messages``, ``options`` (``max_tokens``, ``temperature``,
    ``stop``, ``json_schema`` as the harness passed them), ``response`` (text), ``parsed`` (JSON-schema calls),
    ``input_tokens``, ``output_tokens``, ``latency_s``, ``cached`` (the response cache answered), ``charged`` (the
    run's ledger counted it as spent: the run had not made it before), ``usd`` (0 unless charged), ``error``.
    A failed example has ``error`` set, ``prediction`` None and every score 0.
    """

    id: str
    input: str
    target: str
    prediction: str | None = None
    scores: dict[str, float] = field(default_factory=dict)
    calls: list[CallRecord] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def input_tokens(self) -> int:
        return sum(int(call.get("input_tokens") or 0) for call in self.calls)

    def to_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class EvalReport:
    """A harness on one split: mean ``scores`` (``"primary"`` first; errors count 0), per-example ``records``,
    ``cost`` (``input_tokens``, ``output_tokens``, ``usd``, ``context_tokens`` = mean prompt tokens per example,
    ``calls``, ``cached_calls``), number of ``errors``, wall ``seconds``. ``load_error`` is set when the harness
    could not be loaded (its examples then failed with that error)."""

    task: str
    split: str
    harness: str
    harness_sha256: str
    model: str
    scores: dict[str, float]
    records: list[ExampleRecord]
    cost: dict[str, float]
    errors: int
    seconds: float
    sandbox: dict[str, object] = field(default_factory=dict)
    load_error: str | None = None

    @property
    def primary(self) -> float:
        return self.scores.get("primary", 0.0)

    def to_json(self) -> dict[str, object]:
        """The summary as JSON data (records excluded: see ``write``)."""
        data = asdict(self)
        data.pop("records")
        data["examples"] = len(self.records)
        return data

    def write(self, folder: str | Path) -> tuple[Path, Path]:
        """Write ``summary.json`` and ``records.jsonl`` into ``folder``; returns both paths."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        summary = folder / "summary.json"
        summary.write_bytes((json_text(self.to_json(), indent=2) + "\n").encode("utf-8"))
        return summary, write_records(self.records, folder / "records.jsonl")


def write_records(records: list[ExampleRecord], path: str | Path) -> Path:
    """Write ``records`` as JSON lines to ``path`` (replaced); a full disk is ``StorageFailure``. Every text a harness
    wrote reads back as it was (``metaharness.text.json_text``: lone surrogates and control characters escaped)."""
    path = Path(path)
    with space_for(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as handle:
            for record in records:
                handle.write((json_text(record.to_json()) + "\n").encode("utf-8"))
    return path


def mean_scores(records: list[ExampleRecord], metric_names: list[str]) -> dict[str, float]:
    if not records:
        return {name: 0.0 for name in metric_names}
    return {name: sum(r.scores.get(name, 0.0) for r in records) / len(records) for name in metric_names}


def total_cost(records: list[ExampleRecord]) -> dict[str, float]:
    calls = [call for record in records for call in record.calls]
    return {
        "input_tokens": sum(int(c.get("input_tokens") or 0) for c in calls),
        "output_tokens": sum(int(c.get("output_tokens") or 0) for c in calls),
        "usd": sum(float(c.get("usd") or 0.0) for c in calls),
        "context_tokens": sum(r.input_tokens for r in records) / len(records) if records else 0.0,
        "calls": len(calls),
        "cached_calls": sum(1 for c in calls if c.get("cached")),
        **charged_cost(records),
    }


def charged_cost(records: list[ExampleRecord]) -> dict[str, float]:
    """What the run was charged for these records (see metaharness.budget): ``charged_examples``, the examples with
    at least one charged call, and ``charged_tokens``, the input and output tokens of the charged calls (``usd``
    counts charged calls only already)."""
    charged = [[c for c in r.calls if c.get("charged", not c.get("cached"))] for r in records]
    return {
        "charged_examples": sum(1 for calls in charged if calls),
        "charged_tokens": sum(
            int(c.get("input_tokens") or 0) + int(c.get("output_tokens") or 0) for cs in charged for c in cs
        ),
    }
