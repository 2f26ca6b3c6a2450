"""Text a harness or a proposer controls, stored verbatim and shown inert: one way for each place it goes.

A harness's predictions, errors and stderr, a proposer's summaries, hypotheses and names: a model wrote them, so
they may hold anything a Python ``str`` can, lone surrogates (which UTF-8 cannot encode) and NULs included, and
anything a reader would interpret: terminal control sequences, bidirectional overrides, rich markup (``[/bogus]``
raises, ``[link=...]`` plants a hyperlink, ``[conceal]`` hides text), HTML, Markdown. None of it may stop a run or
act on the reader. So every such text goes through one of these on its way out:

- ``json_text``: JSON for every file the run keeps (journal, ``summary.jsonl``, traces, the files of a candidate's
  commit). Any ``str`` round-trips through ``json.loads``: lone surrogates and every character ``visible`` escapes
  are written as JSON escapes (``\\ud800``, ``\\u001b``), the rest stays UTF-8 text, so the file encodes and
  ``cat`` shows it inert. (A high surrogate followed by a low one reads back as the one character the pair encodes,
  as JSON defines it.)
- ``utf8``: the bytes of a text file or a git object (a program, a note, a commit message); a lone surrogate is
  written as its backslash escape (``\\ud800``), so the write never fails.
- ``visible``: plain text a person reads: control characters (ESC, CR, NUL, the C1 set, DEL), bidirectional
  controls and lone surrogates written as Python escapes (``\\x1b``, ``\\u202e``, ``\\ud800``); newlines and tabs
  stay. ``visible(text) == text`` for ordinary text.
- ``terminal``: a rich ``Text`` of ``visible(text)``. rich prints a ``Text`` as it is: no markup, no emoji codes, no
  highlighting. Compose it with ``Text.assemble`` or pass it beside a markup string to ``Console.print``; never put
  untrusted text into a markup string.
- ``markdown``: one line of ``SUMMARY.md``: ``visible``, whitespace collapsed, ``<`` and ``&`` as HTML entities
  (no raw HTML or entity can form), Markdown's inline punctuation escaped (no link, image, emphasis, code span or
  table cell can form) and so is a mark that would open a block at its start (heading, list item, quote, rule).
- ``html``: ``visible``, then HTML-escaped (quotes included): for the HTML report and its SVG titles.
"""

from __future__ import annotations

import html as html_module
import json
import re

from rich.text import Text

# What a terminal or a reader would act on rather than show: C0 controls but newline and tab, DEL, C1 controls
# (U+009B is a one-character CSI), bidirectional marks, embeddings, overrides and isolates, and lone surrogates.
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# Markdown's inline punctuation (CommonMark lets any ASCII punctuation be escaped with a backslash), and what
# would open a block at the start of a line (a heading, a list item).
_MARKDOWN = re.compile(r"([\\`*_\[\]~|])")
# A heading, a bullet, a block quote or a thematic break (---): escaped before.
_BLOCK_MARK = re.compile(r"^(#{1,6}(?= |$)|[-+](?= |$)|-(?=[- ]*$)|>)")
_ORDERED_MARK = re.compile(r"^\d{1,9}(?=[.)](?: |$))")  # an ordered item: its "." or ")" escaped


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def json_text(value: object, *, indent: int | None = None, sort_keys: bool = False, compact: bool = False) -> str:
    """``value`` as JSON text that UTF-8 can always encode and ``json.loads`` reads back equal (see the module
    docstring). ``compact``: no spaces after separators.

    >>> json_text({"error": "boom \\ud800\\x00"})
    '{"error": "boom \\\\ud800\\\\u0000"}'
    >>> json.loads(json_text("\\ud800")) == "\\ud800"
    True
    """
    separators = (",", ":") if compact else None
    text = json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys, separators=separators)
    # json escapes C0 controls itself and leaves every other character raw; outside ASCII, a character can only stand
    # inside a string literal, where its \\uXXXX escape is the same string.
    return _INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def utf8(text: str) -> bytes:
    """``text`` as UTF-8, each lone surrogate written as its backslash escape.

    >>> utf8("caf\\u00e9 \\ud800")
    b'caf\\xc3\\xa9 \\\\ud800'
    """
    return text.encode("utf-8", "backslashreplace")


def visible(text: str) -> str:
    """``text`` with everything a reader would act on rather than show written as an escape (module docstring).

    >>> visible("red \\x1b[31m\\r\\u202e x\\ud800\\n")
    'red \\\\x1b[31m\\\\x0d\\\\u202e x\\\\ud800\\n'
    """
    return _INVISIBLE.sub(_escape, text)


def terminal(text: str, style: str = "") -> Text:
    """``text`` for a rich console: ``visible``, and a ``Text`` (in ``style``) so that rich reads no markup or emoji
    code in it."""
    return Text(visible(text), style=style)


def markdown(text: str, *, block_start: bool = True) -> str:
    """``text`` as inert inline Markdown on one line (module docstring). ``block_start=False`` where no block can
    open (a table cell): a leading ``-`` or ``1.`` is left as it is there.

    >>> markdown("<img src=x onerror=alert(1)> [a](b) *c*")
    '&lt;img src=x onerror=alert(1)> \\\\[a\\\\](b) \\\\*c\\\\*'
    >>> markdown("# 1. not a heading"), markdown("12) not a list"), markdown("-0.012")
    ('\\\\# 1. not a heading', '12\\\\) not a list', '-0.012')
    """
    flat = " ".join(visible(text).split())
    inline = _MARKDOWN.sub(r"\\\1", flat.replace("&", "&amp;").replace("<", "&lt;"))
    if not block_start:
        return inline
    return _ORDERED_MARK.sub(r"\g<0>\\", _BLOCK_MARK.sub(r"\\\1", inline))


def html(text: str) -> str:
    """``text`` HTML-escaped after ``visible`` (quotes included, so it may stand in an attribute).

    >>> html('<img src=x onerror="alert(1)">')
    '&lt;img src=x onerror=&quot;alert(1)&quot;&gt;'
    """
    return html_module.escape(visible(text), quote=True)
