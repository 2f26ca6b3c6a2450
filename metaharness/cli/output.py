"""How the command line writes what it prints: as wide as the screen it is read on, and cut only between words.

A terminal gives its width. Piped or redirected (``metaharness history | less``, ``> out.txt``), rich would draw at
80 columns and cut every table to fit; instead the output takes the width of the terminal it is read in (stderr's,
or the controlling terminal's) and, with none, ``PIPE_WIDTH``, wide enough for every table. ``COLUMNS`` set in the
environment wins. Text cut to fit (a summary, an error's first line) is cut at a word boundary with an ellipsis.
"""

from __future__ import annotations

import os
import sys
import textwrap

from rich.console import Console

# The width of output written to a pipe or a file when no terminal is known: no table of the CLI is wider.
PIPE_WIDTH = 200


def console() -> Console:
    """The console a command prints its results to (standard output; see the module docstring)."""
    return Console(highlight=False, width=pipe_width())


def pipe_width() -> int | None:
    """The width to draw standard output at when it is piped or redirected (``None``: a terminal, or ``COLUMNS``
    set, which rich reads itself)."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return None
    return reader_width() or PIPE_WIDTH


def reader_width() -> int | None:
    """The width of the terminal the user reads piped output in (stderr's, else the controlling terminal's)."""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        pass
    try:
        with open("/dev/tty") as tty:
            return os.get_terminal_size(tty.fileno()).columns
    except OSError:
        return None


def shorten(text: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters, cut between words (``…`` marks the cut).

    >>> shorten("a vote over the labels of the nine nearest training examples", 30)
    'a vote over the labels of the…'
    >>> shorten("short", 30), shorten("x" * 12, 8)
    ('short', 'xxxxxxx…')
    """
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    cut = textwrap.shorten(flat, width=max(2, width), placeholder="…")
    return cut if cut != "…" else flat[: width - 1] + "…"  # a first word longer than the width: cut inside it
