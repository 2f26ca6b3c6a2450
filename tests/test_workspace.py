"""The ``base`` agent's workspace (proposers/workspace.py): complete traces through its file tools, failures whole."""

from __future__ import annotations

import json
import re

import pytest
from test_evidence import traced  # noqa: F401 - the fixture: a real evaluation's trace

from metaharness.candidate import Candidate
from metaharness.proposers.workspace import READ_CHARS, Workspace


@pytest.fixture
def workspace(traced, tmp_path):  # noqa: F811 - the imported fixture
    state, candidate, report = traced
    long_error = "Traceback (most recent call last):\n" + "".join(f"  frame {i}\n" for i in range(400)) + "KeyError"
    failed = Candidate(
        id="c002", parent="c001", iteration=1, source="x", status="failed", summary="vote", error=long_error
    )
    state.candidates.append(failed)
    space = Workspace(tmp_path / "ws", state, task_description="diagnose", probe=None, check=lambda path: None)
    return space, state, candidate, report, long_error


def read_all(space: Workspace, path: str) -> str:
    """A file read the way the agent reads it: read_file pages, following the offset each page names."""
    text, offset = "", 0
    while True:
        page = space.read_file(path, offset)
        more = re.search(r"\n\.\.\. \[\d+ more characters: read_file with offset=(\d+)\]$", page)
        if not more:
            return text + page
        text += page[: more.start()]
        offset = int(more.group(1))


def test_traces_jsonl_holds_every_record_and_call_whole(workspace) -> None:
    space, state, candidate, report, _ = workspace
    raw = (space.root / "candidates" / "c001" / "traces.jsonl").read_text(encoding="utf-8")
    assert raw == state.trace_path(candidate).read_text(encoding="utf-8")
    records = [json.loads(line) for line in raw.splitlines()]
    assert [r["id"] for r in records] == [r.id for r in report.records]
    for line, record in zip(records, report.records, strict=True):
        assert line["calls"] == record.calls  # every call: messages, options, response, tokens
    assert len(raw) > READ_CHARS  # so the agent needs pages
    assert read_all(space, "candidates/c001/traces.jsonl") == raw  # and gets every character through them


def test_one_readable_file_per_example_with_the_full_prompts(workspace) -> None:
    space, _, _, report, _ = workspace
    folder = space.root / "candidates" / "c001" / "traces"
    index = (folder / "index.md").read_text(encoding="utf-8")
    named = re.findall(r"^- (\S+): (ERROR|primary \S+),.* -> traces/(\S+)$", index, flags=re.M)
    assert sorted(i for i, _, _ in named) == sorted(r.id for r in report.records)
    scores = [float(s.split()[1]) for _, s, _ in named]
    assert scores == sorted(scores)  # failing first
    by_id = {r.id: r for r in report.records}
    for example, _, name in named:
        text = read_all(space, f"candidates/c001/traces/{name}")
        record = by_id[example]
        for call in record.calls:
            for message in call["messages"]:
                assert f"[{message['role']}]\n{message['content']}" in text  # verbatim, never a reference
            assert f"[response]\n{call['response']}" in text
        assert f"[input]\n{record.input}" in text and f"[target]\n{record.target}" in text


def test_failures_md_holds_every_failed_attempt_with_its_whole_error(workspace) -> None:
    space, *_, long_error = workspace
    text = read_all(space, "failures.md")
    assert long_error in text and "## c002 (iteration 1, parent c001): FAILED" in text and "vote" in text
    assert "failures.md" in space.read_file("README.md")
    assert not (space.root / "candidates" / "c002" / "traces").exists()  # no trace: nothing pretends otherwise


def test_grep_shows_the_match_inside_a_long_line(workspace) -> None:
    space, _, _, report, _ = workspace
    target = report.records[4].calls[1]["messages"][0]["content"]  # deep inside its JSON line
    hits = space.grep(re.escape(target.splitlines()[0]), "candidates/c001/traces.jsonl")
    assert "candidates/c001/traces.jsonl:5: [column " in hits
    assert target.splitlines()[0] in hits


def test_the_workspace_tells_the_proposer_about_the_building_blocks(workspace) -> None:
    """A short catalogue in the README (what each block does, when to use it, which code) and the code itself in
    blocks.py: a standalone module of stdlib-only definitions a harness can copy."""
    from metaharness.proposers.operators.catalogue import BLOCKS

    space, *_ = workspace
    readme = read_all(space, "README.md")
    assert "## Building blocks" in readme
    for block in BLOCKS:
        assert f"**{block.name}**" in readme and all(name in readme for name in block.code)
    namespace: dict = {}
    exec(compile(read_all(space, "blocks.py"), "blocks.py", "exec"), namespace)
    assert all(name in namespace for block in BLOCKS for name in block.code)
    train = [
        {"id": "a", "input": "sneezing nose", "target": "cold"},
        {"id": "b", "input": "fever rash", "target": "dengue"},
    ]
    assert namespace["_LabelClassifier"](train, "centroid", 0).scores("a sneezing nose")["cold"] > 0
