"""What a proposer sees of a run: whole source files, per-example traces with every model call, failed attempts.

These are the inputs the Meta-Harness proposer reads (its finding: the raw traces, not scores alone, are what make
revisions better), as plain text for a prompt, each within a token budget. The rule for every budget here: an
item (a candidate's source file, one example's trace record, one failed attempt) is shown whole or left out, never
clipped; items are taken in the caller's priority order while they fit (a later, smaller item may still fit after a
larger one was left out), and a closing line names what was left out and why. The whole text, heading and closing
line included, is within the budget (only a heading longer than the budget can pass it). ``token_budget=None``
shows everything.

A trace record (one validation example, ``ExampleRecord``) is rendered with
its input, target, prediction, scores, error and every model call the harness made: the messages it sent, verbatim,
and the model's answer, with tokens and options. The workspace of the ``coding`` agent writes the same rendering to
one file per example (``.workspace``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from metaharness.candidate import Candidate
from metaharness.evaluation.records import CallRecord, ExampleRecord, TracedMessage
from metaharness.search.protocol import RunState

# About 4 characters make a token in English, 3 in code and JSON: 3 overestimates, so a budget is kept.
CHARS_PER_TOKEN = 3
DEFAULT_TRACE_TOKENS = 8000
LISTED = 40  # left-out items named in the closing line; the rest are counted
SEPARATOR = "\n\n"  # between shown items (counted with each)
SHARED = 200  # a message at least this long, identical to one already shown in an excerpt, becomes a reference
_RECORD_FIELDS = {f.name for f in fields(ExampleRecord)}


def text_tokens(text: str) -> int:
    """The token estimate every budget here uses: characters over ``CHARS_PER_TOKEN``, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass(frozen=True)
class Item:
    """One whole thing a proposer may be shown: ``name`` for the left-out line, ``text`` shown verbatim."""

    name: str
    text: str


@dataclass
class Selection:
    """What is shown within ``token_budget`` (``None``: no limit): a ``header``, the items kept whole in the order
    offered, and a closing line naming those left out; all of it counted in the budget."""

    token_budget: int | None
    header: str = ""
    kept: list[Item] = field(default_factory=list)
    left_out: list[Item] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.used = text_tokens(self.header + SEPARATOR) if self.header else 0

    def fits(self, item: Item) -> bool:
        return self.token_budget is None or self.used + text_tokens(item.text + SEPARATOR) <= self.token_budget

    def offer(self, item: Item) -> bool:
        """Keep ``item`` if it fits in what is left of the budget (True), else leave it out whole (False)."""
        if not self.fits(item):
            self.left_out.append(item)
            return False
        self.kept.append(item)
        self.used += text_tokens(item.text + SEPARATOR)
        return True

    def render(self) -> str:
        """The header, the kept items whole, and the closing line naming what was left out; when that line would
        pass the budget, the last kept items are left out too (references only point back, so none dangles)."""
        text = self._compose()
        while self.token_budget is not None and self.kept and text_tokens(text) > self.token_budget:
            self.left_out.append(self.kept.pop())
            text = self._compose()
        return text

    def _compose(self) -> str:
        parts = ([self.header] if self.header else []) + [item.text for item in self.kept]
        if self.left_out:
            names = ", ".join(item.name for item in self.left_out[:LISTED])
            more = f" and {len(self.left_out) - LISTED} more" if len(self.left_out) > LISTED else ""
            tokens = sum(text_tokens(item.text) for item in self.left_out)
            parts.append(
                f"[Left out whole ({tokens} tokens) to keep within the {self.token_budget}-token budget: "
                f"{names}{more}. Nothing shown above is cut.]"
            )
        return SEPARATOR.join(parts)


def fit(items: Iterable[Item], token_budget: int | None, header: str = "") -> str:
    """``header`` and ``items`` in order while they fit in ``token_budget``; an item that does not fit is left
    out whole and later (smaller) ones are still tried."""
    selection = Selection(token_budget, header)
    for item in items:
        selection.offer(item)
    return selection.render()


# ---------------------------------------------------------------------------------------------- sources


def _standing(candidate: Candidate) -> str:
    if candidate.failed:
        return "failed"
    return f"score {candidate.score:.3f}" if candidate.evaluated else "not evaluated"


def source_item(candidate: Candidate) -> Item:
    """A candidate's whole harness file with a heading (id, parent, score, what changed)."""
    heading = f"## Candidate {candidate.id} (parent {candidate.parent or '-'}, {_standing(candidate)})"
    summary = f"\n{candidate.summary}" if candidate.summary else ""
    return Item(candidate.id, f"{heading}{summary}\n```python\n{candidate.source.rstrip()}\n```")


def sources_within(candidates: Sequence[Candidate], token_budget: int | None) -> str:
    """The whole source files of ``candidates``, in the given (priority) order, within ``token_budget``.

    Each file is shown whole or left out, never clipped; a closing line names the candidates left out.
    """
    return fit((source_item(c) for c in candidates), token_budget)


# ---------------------------------------------------------------------------------------------- traces


def load_records(path: str | Path | None) -> list[ExampleRecord]:
    """The records of a trace file (JSONL, split order). A missing file gives none; a torn or foreign line is
    skipped; fields a record does not have (traces written before ``calls`` existed) take their defaults."""
    if path is None or not Path(path).is_file():
        return []
    records = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(data, dict) or "id" not in data:
                continue
            known = {k: v for k, v in data.items() if k in _RECORD_FIELDS}
            known.setdefault("input", "")
            known.setdefault("target", "")
            known["calls"] = [c for c in known.get("calls") or [] if isinstance(c, dict)]
            records.append(ExampleRecord(**known))
    return records


def primary(record: ExampleRecord) -> float:
    return float((record.scores or {}).get("primary", 0.0))


def status(record: ExampleRecord) -> str:
    """``ERROR`` or ``primary <score>``: how an example went, in a few characters."""
    return "ERROR" if record.error is not None else f"primary {primary(record):.3g}"


def failing_order(record: ExampleRecord) -> tuple[bool, float]:
    """The sort key of "failing first": errors first, then the lowest primary score."""
    return (record.error is None, primary(record))


def failing_first(records: Sequence[ExampleRecord]) -> list[ExampleRecord]:
    """Errors first, then the lowest primary score; split order within each."""
    return sorted(records, key=failing_order)


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _messages(call: CallRecord) -> list[TracedMessage | str]:
    """The messages of a call as recorded (a rejected ``lm()`` call may have recorded something else)."""
    messages = call.get("messages")
    if isinstance(messages, list):
        return messages
    return [] if messages is None else [messages]


def _call_heading(number: int, total: int, call: CallRecord) -> str:
    options = {k: v for k, v in (call.get("options") or {}).items() if v is not None and k != "json_schema"}
    details = [f"{call.get('input_tokens') or 0} input / {call.get('output_tokens') or 0} output tokens"]
    details += [f"{k} {_text(v)}" for k, v in options.items()]
    if (call.get("options") or {}).get("json_schema") is not None:
        details.append("JSON schema")
    if call.get("cached"):
        details.append("cached")
    return f"#### call {number} of {total} ({', '.join(details)})"


def render_record(record: ExampleRecord, *, shown: dict[str, str] | None = None) -> str:
    """One example's whole trace as text: input, target, prediction, scores, error, then every model call with
    the messages the harness sent (verbatim, one ``[role]`` block each) and the model's answer (``[response]``,
    ``[parsed]`` for JSON-schema calls, ``[call error]``).

    ``shown`` (for excerpts of several records): long messages already rendered, text -> where; a repeat is
    written as a reference to where it was shown (nothing is cut), and new ones are added.
    """
    scores = ", ".join(f"{k} {v:.3g}" for k, v in (record.scores or {}).items()) or "none"
    lines = [
        f"### Example {record.id}: {status(record)} (scores: {scores}; {len(record.calls)} model calls)",
        "[input]",
        record.input,
        "[target]",
        record.target,
        "[prediction]",
        "(none)" if record.prediction is None else record.prediction,
    ]
    if record.error is not None:
        lines += ["[error]", record.error]
    for number, call in enumerate(record.calls, 1):
        lines.append(_call_heading(number, len(record.calls), call))
        for index, message in enumerate(_messages(call), 1):
            role = message.get("role", "?") if isinstance(message, dict) else "?"
            content = _text(message.get("content", "") if isinstance(message, dict) else message)
            if shown is not None and len(content) >= SHARED:
                if content in shown:
                    lines.append(f"[{role}] (identical to {shown[content]}, shown above)")
                    continue
                shown[content] = f"example {record.id} call {number} message {index}"
            lines += [f"[{role}]", content]
        if call.get("response") is not None:
            lines += ["[response]", _text(call["response"])]
        if call.get("parsed") is not None:
            lines += ["[parsed]", _text(call["parsed"])]
        if call.get("error") is not None:
            lines += ["[call error]", _text(call["error"])]
    return "\n".join(lines)


def records_within(records: Sequence[ExampleRecord], token_budget: int | None, header: str = "") -> str:
    """``header`` and the ``records`` (any split: validation traces, probe runs on training examples), failing
    first (errors, then the lowest primary score), each rendered whole (``render_record``) or left out, within
    ``token_budget``. A long message identical to one already shown is written as a reference to it."""
    selection = Selection(token_budget, header)
    shown: dict[str, str] = {}
    for record in failing_first(records):
        trial = dict(shown)
        if selection.offer(Item(f"{record.id} [{status(record)}]", render_record(record, shown=trial))):
            shown = trial
    return selection.render()


def trace_excerpts(
    state: RunState,
    candidate: Candidate,
    examples: Sequence[str] | None = None,
    token_budget: int | None = DEFAULT_TRACE_TOKENS,
) -> str:
    """Per-example validation records of ``candidate`` (``render_record``), failing examples first (errors,
    then the lowest primary score), whole records kept while they fit ``token_budget``.

    ``examples``: only these example ids (in the same failing-first order). A long message identical to one
    already shown in the excerpt (a shared system prompt or few-shot block) is written as a reference to it, so
    the budget buys more examples; no record is cut. Without a trace (a failed candidate, a run that kept none)
    the text says so.
    """
    records = load_records(state.trace_path(candidate))
    if not records:
        why = f"it failed: {candidate.error}" if candidate.failed else "no trace was kept"
        return f"# Validation trace of {candidate.id}\n(no per-example records: {why})"
    missing: list[str] = []
    if examples is not None:
        wanted = set(examples)
        missing = sorted(wanted - {r.id for r in records})
        records = [r for r in records if r.id in wanted]
    failing = sum(1 for r in records if r.error is not None or primary(r) < 1.0)
    header = (
        f"# Validation trace of {candidate.id} ({_standing(candidate)}): {len(records)} examples, {failing} "
        "with an error or below full score, failing first"
    )
    if missing:
        header += f" (no record of {', '.join(missing)})"
    return records_within(records, token_budget, header)


# ---------------------------------------------------------------------------------------------- failures


def failure_item(candidate: Candidate) -> Item:
    """A failed candidate whole: id, iteration, parent, summary, hypothesis and its complete error."""
    lines = [
        f"## {candidate.id} (iteration {candidate.iteration}, parent {candidate.parent or '-'}): FAILED",
        f"What it changed: {candidate.summary or '(no summary)'}",
    ]
    if candidate.hypothesis:
        lines.append(f"Hypothesis: {candidate.hypothesis}")
    lines += ["Error:", "```", (candidate.error or "(no error recorded)").rstrip(), "```"]
    return Item(candidate.id, "\n".join(lines))


def failed_attempts(state: RunState, token_budget: int | None) -> str:
    """The run's failed candidates, most recent first, each whole (summary, parent, hypothesis, full error) or
    left out, within ``token_budget``."""
    failed = sorted(state.failed(), key=lambda c: -c.iteration)
    if not failed:
        return "# Failed attempts\n(none so far)"
    header = f"# Failed attempts ({len(failed)}, most recent first): do not repeat these mistakes"
    return fit((failure_item(c) for c in failed), token_budget, header)
