"""The coding proposer's workspace: a copy of the run it may read, a ``new/`` folder it may write, and its tools.

Layout (what the agent sees; paths are relative to the workspace root)::
    README.md                      the task, the harness contract, this layout and the building blocks
    blocks.py                      tested stdlib-only code of the building blocks, to copy into a harness
    summary.md                     every candidate: score, cost, parent, what changed; failed ones in brief
    failures.md                    every failed attempt whole: parent, summary, hypothesis, complete error
    candidates/<id>/harness.py     the source of each candidate
    candidates/<id>/info.json      scores, cost, summary, hypothesis, prediction (and error if it failed)
    candidates/<id>/traces.jsonl   the complete validation trace: every record as the evaluator wrote it
                                   (docs/run-directory.md), every model call with its messages and answer
    candidates/<id>/traces/index.md         one line per example, failing first, naming its file
    candidates/<id>/traces/<example>.md     one example whole, readable: input, target, prediction, scores,
                                            error, then every call's messages verbatim and the model's answer
    new/<name>/harness.py          candidates the agent writes
    new/<name>/submission.json     (coding-agent CLIs) the candidate's parent, summary and hypothesis

No trace, source or error is clipped (the index's previews point at the whole example): ``read_file`` pages
through a long file (``offset``), ``grep`` shows the matching part of a long line with its column. The renderings
are ``.evidence``'s, the same the ``tps`` stages show.

The tools (``Workspace.tools``) are plain functions over this folder: list, read, grep, write, edit, copy a
candidate, run a new candidate on a few held-out training examples, submit it (with an import check in the
sandbox), finish. Paths outside the workspace, and writes outside ``new/``, are refused with a message the model
can act on. The proposer's own secrets never reach the harness: runs go through the sandboxed evaluator.

A coding-agent CLI (``.engines``) works on the same folder with its own file tools instead: it writes
``new/<name>/harness.py`` and ``new/<name>/submission.json`` (``{"parent", "summary", "hypothesis"}``, as the
README tells it), and ``Workspace.collect`` submits what it wrote when the session ends, with the same import
check.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metaharness import frontier
from metaharness.candidate import Candidate
from metaharness.candidates.protocol import CONTRACT, HARNESS_FILE
from metaharness.evaluation.records import ExampleRecord
from metaharness.models.protocol import Tool
from metaharness.proposers.evidence import failed_attempts, failing_order, load_records, render_record, status
from metaharness.proposers.probe import PredictionBudgetSpent, ProbeResult
from metaharness.search.protocol import RunState

READ_CHARS = 6000  # per read_file call
SUBMISSION_FILE = "submission.json"
GREP_CHARS = 200  # of a matching line, around the match
NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def clip(value: Any, limit: int) -> Any:
    """Long strings cut to ``limit`` characters with a note of how much was left out (for previews and tool
    replies whose whole text is in a file the agent can read)."""
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + f"... [{len(value) - limit} more characters]"
    return value


def _around(line: str, match: re.Match[str]) -> str:
    """A long line's part around ``match``, with the column it starts at (short lines whole)."""
    if len(line) <= GREP_CHARS:
        return line
    start = max(0, min(match.start() - GREP_CHARS // 4, len(line) - GREP_CHARS))
    return f"[column {start}] {line[start : start + GREP_CHARS]} [line of {len(line)} characters]"


def _file_names(records: list[ExampleRecord]) -> list[str]:
    """A distinct, safe file name per record, from its example id."""
    names: list[str] = []
    for record in records:
        base = _UNSAFE.sub("_", str(record.id))[:80] or "example"
        name, n = f"{base}.md", 1
        while name in names:
            n += 1
            name = f"{base}-{n}.md"
        names.append(name)
    return names


def _link_or_copy(source: Path, target: Path) -> None:
    """``target`` holds ``source``'s bytes: a hard link where the file system allows (traces never change after
    their evaluation, and a workspace is rebuilt every iteration), a copy otherwise."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def write_traces(folder: Path, trace: Path | None) -> int:
    """A candidate's complete validation trace in its workspace folder: ``traces.jsonl`` (the evaluator's file,
    every record and call whole), ``traces/<example>.md`` (each record rendered whole by
    ``render_record``) and ``traces/index.md`` (failing examples first).
    Returns the number of records."""
    records = load_records(trace)
    if trace is None or not records:
        return 0
    _link_or_copy(Path(trace), folder / "traces.jsonl")
    views = folder / "traces"
    views.mkdir(exist_ok=True)
    named = list(zip(records, _file_names(records), strict=True))
    for record, name in named:
        (views / name).write_text(render_record(record) + "\n", encoding="utf-8")
    lines = [f"# Validation trace: {len(records)} examples, failing first (errors, then lowest score)", ""]
    for record, name in sorted(named, key=lambda pair: failing_order(pair[0])):
        lines.append(
            f"- {record.id}: {status(record)}, {len(record.calls)} calls, {record.input_tokens} prompt tokens; target "
            f"{clip(record.target, 60)!r}, prediction {clip(record.prediction, 60)!r} -> traces/{name}"
        )
    (views / "index.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(records)


def summary_table(state: RunState) -> str:
    """Markdown summary of the run: evaluated candidates best first, then failed attempts with their errors."""
    rows = ["| id | parent | iteration | score | context tokens | what changed |", "|---|---|---|---|---|---|"]
    for c in sorted(state.supported(), key=lambda c: -c.score):
        rows.append(
            f"| {c.id} | {c.parent or '-'} | {c.iteration} | {c.score:.3f} | "
            f"{c.cost.get('context_tokens', 0):.0f} | {c.summary.replace('|', '/')[:160]} |"
        )
    failed = [
        f"- {c.id} (parent {c.parent or '-'}): {c.summary[:120]} -> FAILED: {(c.error or '')[:300]}"
        for c in state.failed()
    ]
    text = f"# Run summary (iteration {state.iteration})\n\n" + "\n".join(rows) + "\n"
    if failed:
        text += "\n## Failed attempts (do not repeat these mistakes)\n\n" + "\n".join(failed) + "\n"
    return text


@dataclass
class Submission:
    name: str
    parent: str
    summary: str
    hypothesis: str
    source: str
    error: str | None  # import check result (None = passed)


class Workspace:
    """The folder the agent works in, and its tools. ``probe(source)`` runs a harness on held-out training
    examples (see ``metaharness.proposers.probe.Prober``); ``check(path)`` is the sandboxed import check
    (returns the error text or None)."""

    def __init__(
        self,
        root: Path,
        state: RunState,
        *,
        task_description: str,
        probe: Callable[[str], ProbeResult] | None,
        check: Callable[[Path], str | None],
        submit_by_file: bool = False,
    ) -> None:
        """``submit_by_file``: the agent submits by writing ``submission.json`` files (a coding-agent CLI)."""
        self.root = Path(root)
        self.state = state
        self._probe = probe
        self._check = check
        self.submissions: dict[str, Submission] = {}
        self.finished = False
        if self.root.exists():
            shutil.rmtree(self.root)
        (self.root / "new").mkdir(parents=True)
        # The operator library loads on first use (the agent sandbox imports this package without it).
        from metaharness.proposers.operators.catalogue import block_code, catalogue_markdown

        readme = _README.format(task=task_description, contract=CONTRACT) + "\n" + catalogue_markdown()
        (self.root / "README.md").write_text(readme + (_BY_FILE if submit_by_file else ""), encoding="utf-8")
        (self.root / "blocks.py").write_text(block_code(), encoding="utf-8")
        (self.root / "summary.md").write_text(summary_table(state), encoding="utf-8")
        (self.root / "failures.md").write_text(failed_attempts(state, None) + "\n", encoding="utf-8")
        for cand in state.candidates:
            self._copy_candidate(cand)

    def _copy_candidate(self, cand: Candidate) -> None:
        folder = self.root / "candidates" / cand.id
        folder.mkdir(parents=True, exist_ok=True)
        (folder / HARNESS_FILE).write_text(cand.source, encoding="utf-8")
        info = {
            "id": cand.id,
            "parent": cand.parent,
            "iteration": cand.iteration,
            "summary": cand.summary,
            "hypothesis": cand.hypothesis,
            "scores": cand.scores,
            "cost": cand.cost,
            "failed": cand.failed,
            "error": cand.error,
            "prediction": cand.prediction.to_json() if cand.prediction is not None else None,
        }
        (folder / "info.json").write_text(json.dumps(info, indent=2, ensure_ascii=False), encoding="utf-8")
        write_traces(folder, self.state.trace_path(cand))

    # ------------------------------------------------------------------ paths

    def _path(self, path: str, *, write: bool = False) -> Path:
        target = (self.root / str(path or ".").lstrip("/")).resolve()
        root = self.root.resolve()
        if target != root and root not in target.parents:
            raise ValueError(f"'{path}' is outside the workspace; use paths like candidates/<id>/harness.py")
        if write and (root / "new") not in target.parents:
            raise ValueError(f"'{path}': you may only write under new/, e.g. new/<name>/{HARNESS_FILE}")
        return target

    # ------------------------------------------------------------------ tools

    def list_files(self, path: str = ".") -> str:
        folder = self._path(path)
        if not folder.is_dir():
            return f"'{path}' is not a folder"
        entries = sorted(p.relative_to(self.root).as_posix() + ("/" if p.is_dir() else "") for p in folder.iterdir())
        return "\n".join(entries) or "(empty)"

    def read_file(self, path: str, offset: int = 0) -> str:
        file = self._path(path)
        if not file.is_file():
            return f"'{path}' is not a file (list_files shows what exists)"
        text = file.read_text(encoding="utf-8", errors="replace")
        offset = max(0, int(offset or 0))
        chunk = text[offset : offset + READ_CHARS]
        more = len(text) - offset - len(chunk)
        return chunk + (
            f"\n... [{more} more characters: read_file with offset={offset + len(chunk)}]" if more > 0 else ""
        )

    def grep(self, pattern: str, path: str = ".") -> str:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            return f"bad regular expression: {exc}"
        base = self._path(path)
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        hits = []
        for file in files:
            for number, line in enumerate(file.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                match = regex.search(line)
                if match:
                    hits.append(f"{file.relative_to(self.root).as_posix()}:{number}: {_around(line, match)}")
                    if len(hits) >= 60:
                        return "\n".join(hits) + "\n... (more matches; narrow the pattern or path)"
        return "\n".join(hits) or "no matches"

    def write_file(self, path: str, content: str) -> str:
        file = self._path(path, write=True)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(content, encoding="utf-8")
        return f"wrote {len(content)} characters to {path}"

    def edit_file(self, path: str, old: str, new: str) -> str:
        file = self._path(path, write=True)
        if not file.is_file():
            return f"'{path}' does not exist; copy_candidate or write_file first"
        text = file.read_text(encoding="utf-8")
        count = text.count(old) if old else 0
        if count != 1:
            return f"'old' must occur exactly once in {path}; it occurs {count} times. Quote more context."
        file.write_text(text.replace(old, new, 1), encoding="utf-8")
        return f"edited {path}"

    def copy_candidate(self, candidate_id: str, name: str) -> str:
        if not NAME.match(str(name)):
            return "name must be 1-40 letters, digits, '-' or '_'"
        source = self.root / "candidates" / str(candidate_id) / HARNESS_FILE
        if not source.is_file():
            return f"no candidate '{candidate_id}'; summary.md lists them"
        target = self.root / "new" / name / HARNESS_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        return f"copied candidates/{candidate_id}/{HARNESS_FILE} to new/{name}/{HARNESS_FILE}; edit it now"

    def run_on_train(self, name: str) -> str:
        if self._probe is None:
            return "running candidates is not available in this session"
        file = self.root / "new" / str(name) / HARNESS_FILE
        if not file.is_file():
            return f"new/{name}/{HARNESS_FILE} does not exist"
        try:
            result = self._probe(file.read_text(encoding="utf-8"))
        except PredictionBudgetSpent as exc:
            return f"not run: {exc}"
        lines = [f"score {result.score:.2f} on {len(result.correct)} held-out training examples"]
        for key, prediction in result.predictions.items():
            status = (
                "ERROR " + result.errors[key]
                if key in result.errors
                else ("correct" if result.correct.get(key) else "wrong")
            )
            lines.append(f"- {key}: {status}; prediction: {clip(prediction, 200)!r}")
        return "\n".join(lines)

    def submit(self, name: str, parent: str, summary: str, hypothesis: str = "") -> str:
        file = self.root / "new" / str(name) / HARNESS_FILE
        if not file.is_file():
            return f"new/{name}/{HARNESS_FILE} does not exist; write it first"
        known = {c.id for c in self.state.candidates}
        if parent not in known:
            return f"parent '{parent}' is not a candidate id; use one of {', '.join(sorted(known))}"
        error = self._check(file)
        self.submissions[name] = Submission(name, parent, summary, hypothesis, file.read_text(encoding="utf-8"), error)
        if error:
            return f"import check FAILED for new/{name}: {error}\nFix the file and submit again."
        return f"new/{name} passed the import check and is submitted ({len(self.valid())} submitted so far)"

    def finish(self) -> str:
        self.finished = True
        return "finished"

    def collect(self) -> list[str]:
        """Submit every ``new/<name>/harness.py`` a coding-agent CLI wrote, with its ``submission.json``; one line
        per candidate says how its import check went. A candidate without a readable ``submission.json`` naming a
        known parent is recorded as failed (under the best candidate) with what is missing."""
        lines = []
        for folder in sorted(p for p in (self.root / "new").iterdir() if (p / HARNESS_FILE).is_file()):
            name = folder.name
            try:
                meta = json.loads((folder / SUBMISSION_FILE).read_text(encoding="utf-8"))
                parent, summary = str(meta["parent"]), str(meta.get("summary") or "")
                hypothesis = str(meta.get("hypothesis") or "")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                best = frontier.best(self.state.candidates) or self.state.candidates[0]
                problem = f"new/{name}/{SUBMISSION_FILE} is missing or does not name a parent ({type(exc).__name__})"
                source = (folder / HARNESS_FILE).read_text(encoding="utf-8")
                self.submissions[name] = Submission(name, best.id, f"revision {name}", "", source, problem)
                lines.append(f"new/{name}: {problem}")
                continue
            reply = self.submit(name, parent, summary, hypothesis)
            if name not in self.submissions:  # an unknown parent: recorded as failed with the reply
                source = (folder / HARNESS_FILE).read_text(encoding="utf-8")
                best = frontier.best(self.state.candidates) or self.state.candidates[0]
                self.submissions[name] = Submission(
                    name, best.id, summary or f"revision {name}", hypothesis, source, reply
                )
            lines.append(reply)
        return lines

    def valid(self) -> list[Submission]:
        return [s for s in self.submissions.values() if s.error is None]

    def tools(self) -> dict[str, tuple[Tool, Callable[..., str]]]:
        """Tool schemas for the model, each with the function that serves it."""

        def tool(name: str, description: str, properties: Mapping[str, object], required: list[str]) -> Tool:
            return Tool(
                name,
                description,
                {"type": "object", "properties": properties, "required": required, "additionalProperties": False},
            )

        text = {"type": "string"}
        return {
            "list_files": (tool("list_files", "List a folder of the workspace.", {"path": text}, []), self.list_files),
            "read_file": (
                tool(
                    "read_file",
                    f"Read a file ({READ_CHARS} characters from offset).",
                    {"path": text, "offset": {"type": "integer"}},
                    ["path"],
                ),
                self.read_file,
            ),
            "grep": (
                tool(
                    "grep",
                    "Search files for a regular expression; prints file:line: text.",
                    {"pattern": text, "path": text},
                    ["pattern"],
                ),
                self.grep,
            ),
            "copy_candidate": (
                tool(
                    "copy_candidate",
                    "Copy candidates/<candidate_id>/harness.py to new/<name>/harness.py.",
                    {"candidate_id": text, "name": text},
                    ["candidate_id", "name"],
                ),
                self.copy_candidate,
            ),
            "write_file": (
                tool(
                    "write_file", "Write a whole file under new/.", {"path": text, "content": text}, ["path", "content"]
                ),
                self.write_file,
            ),
            "edit_file": (
                tool(
                    "edit_file",
                    "Replace the one occurrence of 'old' with 'new' in a file under new/.",
                    {"path": text, "old": text, "new": text},
                    ["path", "old", "new"],
                ),
                self.edit_file,
            ),
            "run_on_train": (
                tool(
                    "run_on_train",
                    "Run new/<name>/harness.py on a few held-out training examples.",
                    {"name": text},
                    ["name"],
                ),
                self.run_on_train,
            ),
            "submit": (
                tool(
                    "submit",
                    "Submit new/<name>/harness.py as a revision of candidate 'parent' (import-checked).",
                    {"name": text, "parent": text, "summary": text, "hypothesis": text},
                    ["name", "parent", "summary"],
                ),
                self.submit,
            ),
            "finish": (tool("finish", "End this iteration's work.", {}, []), self.finish),
        }

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Serve one tool call; bad arguments come back as text the model can correct."""
        tools = self.tools()
        if name not in tools:
            return f"unknown tool '{name}'; available: {', '.join(tools)}"
        try:
            return tools[name][1](**(arguments or {}))
        except (TypeError, ValueError) as exc:
            return f"error: {exc}"


_README = """# Workspace

You improve a *harness*: the Python program around a fixed task model. The task:

{task}

Harness contract:
{contract}

- summary.md: every candidate so far with its validation score; failed attempts in brief.
- failures.md: every failed attempt whole, with its complete error: do not repeat these mistakes.
- candidates/<id>/harness.py, info.json: the code, and its scores, cost and summary.
- candidates/<id>/traces/index.md: the validation examples of the candidate, failing first, one line each,
  naming the file that holds the example whole.
- candidates/<id>/traces/<example>.md: one example whole: input, target, prediction, scores, error, and every
  model call the harness made: the messages it sent (verbatim, one [role] block each) and the model's [response].
- candidates/<id>/traces.jsonl: the same records as JSON lines (one example a line), for grep.
- new/<name>/harness.py: where you write new candidates.
- blocks.py: the building blocks below, as code to copy.

Nothing here is cut: read_file shows a long file in pages (call it again with the offset it gives); grep shows
the matching part of a long line. Compare prediction, target and the model's response to find what to fix.
"""

_BY_FILE = """
## Submitting a candidate

Write each new candidate as new/<name>/harness.py (name: letters, digits, '-' or '_'), usually starting from a copy
of candidates/<id>/harness.py, and beside it new/<name>/submission.json:
    {"parent": "<the candidate id it revises>", "summary": "<one line: what changed>", "hypothesis": "<why it helps>"}

When you stop, every such folder is submitted: each harness is imported and constructed in a sandbox, and one that
fails is recorded with its error. Write only under new/; do not evaluate candidates on validation examples.
"""
