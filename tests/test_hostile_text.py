"""Text a harness controls, against every reader of it: JSON files, text files, the terminal, Markdown, HTML.

The strings are what a hostile or careless harness can put in an error, a prediction or its stderr, and a proposer
in a summary: lone surrogates, NULs, escape sequences, bidirectional overrides, rich markup, HTML and Markdown.
``metaharness.text`` must store each verbatim (or escaped) and show each inert, and nothing may raise.
"""

from __future__ import annotations

import html
import io
import json
import re
import subprocess
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from rich.console import Console
from rich.text import Text
from test_hostile_harnesses import current_test

from metaharness.candidate import Candidate
from metaharness.cli.bench import GridLines
from metaharness.evaluation.records import ExampleRecord, write_records
from metaharness.report import write_report
from metaharness.report.summary import write_summary_markdown
from metaharness.store import RunDirectory
from metaharness.store.files import append_jsonl, read_jsonl
from metaharness.store.journal import Journal
from metaharness.text import html as html_text
from metaharness.text import json_text, markdown, terminal, utf8, visible

# What each reader was shown: {test: {attempt: outcome}} (benchmarks/hostile_harnesses.py prints it).
OBSERVED: dict[str, dict[str, str]] = {}
HOSTILE = [
    "boom \ud800",
    "\udfff lone low, then NUL \x00 and DEL \x7f",
    "[/bogus] closes nothing",
    "[link=https://evil.example]click here[/link]",
    "[conceal]hidden from the operator[/conceal]",
    "[bold red]shouting[/]",
    "\x1b[2J\x1b[31mred\x1b[0m \x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\",
    "\x9b31m one-character CSI",
    "overwrite\rthe line",
    "right-to-left \u202eevil\u202c override",
    ":smile: :warning: emoji codes",
    '<img src=x onerror="alert(1)">',
    "<script>alert(1)</script>",
    "[a link](https://evil.example) ![an image](https://evil.example/x.png) *em* `code` | a | cell |",
    "# heading",
    "- a list item",
    "12. an ordered one",
    "---",
    "> a quote",
    "&lt;img src=x&gt; an entity",
    "trailing backslash \\",
    "\\[escaped] markup",
]
# Any code point, surrogates included; an adjacent high + low pair reads back from JSON as the character it encodes.
ANY_TEXT = st.lists(st.integers(0, 0x10FFFF).map(chr), max_size=40).map("".join)
# The issue's strings, and each of them run into random text.
TEXTS = st.one_of(st.sampled_from(HOSTILE), ANY_TEXT, st.tuples(st.sampled_from(HOSTILE), ANY_TEXT).map("".join))
PAIRED = re.compile("[\ud800-\udbff][\udc00-\udfff]")
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def rendered(text: Text | str) -> str:
    """What a colour terminal receives when rich prints ``text`` (a markup string when a ``str``)."""
    out = io.StringIO()
    Console(file=out, force_terminal=True, color_system="truecolor", width=400, soft_wrap=True).print(text)
    return out.getvalue()


@given(TEXTS)
@settings(max_examples=300)
def test_json_text_round_trips_any_string_and_encodes(text):
    for value in (text, {"error": text, text: [text]}):
        encoded = json_text(value, indent=2, sort_keys=True)
        encoded.encode("utf-8")  # never raises
        assert not RAW_CONTROL.search(encoded)  # cat shows the file inert
        if not PAIRED.search(text):
            assert json.loads(encoded) == value


def test_json_text_keeps_ordinary_text_readable():
    assert json_text({"answer": "café ✓"}) == '{"answer": "café ✓"}'
    assert json_text({"a": 1}, compact=True) == '{"a":1}'


@given(ANY_TEXT)
def test_utf8_never_fails_and_keeps_valid_text(text):
    data = utf8(text)
    data.decode("utf-8")
    if not re.search("[\ud800-\udfff]", text):
        assert data == text.encode("utf-8")


@given(TEXTS)
@settings(max_examples=300)
def test_the_terminal_gets_no_control_sequence_and_no_markup(text):
    shown = rendered(terminal(text))
    shown.encode("utf-8")
    assert "\x1b" not in shown and "\x9b" not in shown and "\r" not in shown
    assert shown.rstrip("\n") == visible(text).expandtabs(8).rstrip("\n") or "\t" in text  # rich expands tabs


def test_each_hostile_string_is_shown_as_it_is_written():
    seen = OBSERVED.setdefault(current_test(), {})
    for text in HOSTILE:
        shown = rendered(terminal(text))
        seen[f"terminal: {text[:30]!r}"] = f"shown as {shown.rstrip()[:60]!r}; markdown {markdown(text)[:50]!r}"
        assert "\x1b" not in shown, text
        assert shown == visible(text) + "\n", text  # no markup read, no emoji code replaced
    assert visible("boom \ud800") == "boom \\ud800"
    assert visible("\x1b[31mred") == "\\x1b[31mred"
    assert visible("ok\n\ttab") == "ok\n\ttab"


def test_terminal_text_composes_with_markup_around_it():
    line = Text.assemble(("failed: ", "red"), terminal("[/bogus] [link=https://x]y[/link]"))
    shown = rendered(line)
    assert "[/bogus] [link=https://x]y[/link]" in shown and "\x1b]8;" not in shown  # no OSC 8 hyperlink


def inline_tokens(source: str) -> list:
    tokens = MarkdownIt("commonmark").enable("table").enable("strikethrough").parse(source)
    return [child for token in tokens if token.type == "inline" for child in token.children or []]


MARKDOWN_PLACES = {  # where SUMMARY.md puts a text, and the blocks Markdown may make of the line
    "{}": ["paragraph"],
    "- {}": ["bullet_list", "list_item", "paragraph"],
    "- iteration 3: {}": ["bullet_list", "list_item", "paragraph"],
    "c001 val 0.5: {}": ["paragraph"],
}


@given(TEXTS)
@settings(max_examples=500)
def test_markdown_text_is_only_text_wherever_it_stands(text):
    cell = markdown(text)
    expected = " ".join(visible(text).split())
    for place, blocks in MARKDOWN_PLACES.items():
        source = place.format(cell)
        tokens = MarkdownIt("commonmark").enable("table").enable("strikethrough").parse(source)
        opened = [t.type.removesuffix("_open") for t in tokens if t.type.endswith("_open")]
        assert opened == blocks or (not expected and opened == blocks[: len(opened)]), (text, source, opened)
        children = inline_tokens(source)
        assert {child.type for child in children} <= {"text"}, (text, source, children)
        assert "".join(child.content for child in children).endswith(expected)
    table = inline_tokens(f"| id | summary |\n|---|---|\n| c001 | {markdown(text, block_start=False)} |\n")
    assert [child.content for child in table][-2:] == ["c001", expected] or (not expected and len(table) <= 3)


def test_markdown_and_html_escape_the_summary_of_the_issue():
    summary = '<img src=x onerror="alert(1)"> [x](javascript:alert(1))'
    assert "<img" not in markdown(summary) and "<img" not in html_text(summary)
    rendered_html = MarkdownIt("commonmark").render(markdown(summary))
    assert "<img" not in rendered_html and "<a " not in rendered_html
    assert html_text(summary) == html.escape(summary, quote=True)
    assert html_text("\x1b[31m\ud800") == "\\x1b[31m\\ud800"


# ---------------------------------------------------------------- what the run keeps

HOSTILE_ERROR = "ValueError: boom \ud800 \x00 [/bogus] [link=https://evil.example]x[/link] \x1b[31mred\u202e"


def test_the_journal_and_the_run_logs_keep_any_text_as_it_was(tmp_path):
    failed = Candidate(
        "c001", None, 0, "class Harness: pass\n", status="failed", summary="seed \ud800", error=HOSTILE_ERROR
    )
    journal = Journal(tmp_path / "journal")
    journal.save_result(failed)
    OBSERVED[current_test()] = {
        "a failed candidate of hostile text, journaled": f"read back equal: {journal.results() == [failed]}"
    }
    assert journal.results() == [failed]
    append_jsonl(tmp_path / "summary.jsonl", {"event": "candidate", "error": HOSTILE_ERROR})
    assert read_jsonl(tmp_path / "summary.jsonl") == [{"event": "candidate", "error": HOSTILE_ERROR}]
    record = ExampleRecord("x1", "input \ud800", "target", prediction="\ud800\x00", error=HOSTILE_ERROR)
    write_records([record], tmp_path / "records.jsonl")
    assert json.loads((tmp_path / "records.jsonl").read_text(encoding="utf-8")) == record.to_json()
    for name in ("journal/c001.json", "summary.jsonl", "records.jsonl"):
        assert not RAW_CONTROL.search((tmp_path / name).read_text(encoding="utf-8").replace("\n", ""))


def test_git_keeps_the_candidate_verbatim_and_shows_it_inert(tmp_path):
    run = RunDirectory.open(tmp_path / "run", {"dataset": "toy", "task_model": "fake", "val_limit": 3})
    summary = "seed <img src=x onerror=alert(1)> \x1b]8;;https://evil.example\x1b\\"
    try:
        run.commit(Candidate("c001", None, 0, "x = '\ud800'\n", status="failed", summary=summary, error=HOSTILE_ERROR))
    finally:
        run.close()
    stored = RunDirectory.browse(tmp_path / "run").store.get("c001")
    OBSERVED[current_test()] = {
        "an error and a summary of hostile text, in git": "read back equal: "
        + str((stored.candidate.error, stored.candidate.summary) == (HOSTILE_ERROR, summary))
    }
    assert (stored.candidate.error, stored.candidate.summary) == (HOSTILE_ERROR, summary)  # candidate.json
    shown = subprocess.run(
        ["git", "-C", str(tmp_path / "run"), "log", "--all", "--notes=metaharness", "-p"],
        capture_output=True,
        check=True,
    ).stdout.decode("utf-8")  # valid UTF-8 throughout
    assert not RAW_CONTROL.search(shown.replace("\n", "").replace("\t", "")), shown
    assert "boom \\ud800 \\x00" in shown and "\\x1b[31mred\\u202e" in shown  # the note and the commit, escaped
    subprocess.run(["git", "-C", str(tmp_path / "run"), "fsck", "--full", "--strict"], check=True, capture_output=True)


def test_summary_md_and_the_html_report_show_a_hostile_summary_and_error_as_text(tmp_path):
    run = RunDirectory.open(tmp_path / "run", {"dataset": "toy", "task_model": "fake", "val_limit": 3})
    summary = '<img src=x onerror="alert(1)"> [click](https://evil.example) **loud**'
    try:
        run.commit(Candidate("c001", None, 0, "x = 1\n", status="failed", summary=summary, error=HOSTILE_ERROR))
        markdown_file = write_summary_markdown(run)
        page = write_report(run, tmp_path / "report.html").read_text(encoding="utf-8")
    finally:
        run.close()
    text = markdown_file.read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith("| c001 "))
    OBSERVED[current_test()] = {"a summary <img onerror> in SUMMARY.md": line[:150]}
    assert "<img" not in text and "&lt;img src=x" in text and "\\[click\\]" in text
    assert not RAW_CONTROL.search(text.replace("\n", ""))
    rendered_md = MarkdownIt("commonmark").enable("table").render(text)
    assert "<img" not in rendered_md and "<a " not in rendered_md and "<strong>loud" not in rendered_md
    assert "boom \\ud800 \\x00 [/bogus]" in rendered_md  # shown as its escapes
    assert "<img" not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page
    assert "boom \\ud800" in page and "\\x1b[31mred" in page


def test_the_grid_shows_a_cell_that_failed_on_hostile_text_inert():
    out = io.StringIO()
    lines = GridLines(Console(file=out, force_terminal=True, color_system="truecolor", width=400))
    failed = SimpleNamespace(status="failed", seconds=3.0, error=HOSTILE_ERROR, stopped=None)
    lines.cell_finished(SimpleNamespace(name="A/tps/seed0"), failed, 1, 2)  # type: ignore[arg-type]
    shown = out.getvalue()
    assert "boom \\ud800 \\x00 [/bogus] [link=https://evil.example]x[/link]" in shown and "\x1b]8;" not in shown
