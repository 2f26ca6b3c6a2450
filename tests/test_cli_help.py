"""Every option of every command shows its default the same way: typer's ``[default: ...]`` after the help text,
never a "(default ...)" written into it; an option whose default is resolved later (None in the signature) says
what it resolves to; only the options that name what to run have none. Piped output is as wide as the terminal it is
read in, or wide enough for every table, and cut only between words."""

from __future__ import annotations

import re

import typer.main
from command_line import run_metaharness

from metaharness.cli import app
from metaharness.cli.output import PIPE_WIDTH, shorten

# Options that name what to run: nothing to default to.
NAMES_WHAT_TO_RUN = {
    ("optimize", "--dataset"),
    ("eval", "--dataset"),
    ("plan serve", "--model"),
    ("bench sokoban", "--agent"),
    ("bench sokoban", "--model"),
    ("bench blocksworld", "--agent"),
    ("bench blocksworld", "--model"),
    ("bench tools", "--agent"),
    ("bench harness", "--out"),
}
# Written defaults in a help text: "(default 3)", "(default: all)", "[default: 3]".
WRITTEN_DEFAULT = re.compile(r"[(\[]default\b|\bdefault:", re.I)


def options():
    """(command path, option name, click parameter) of every visible option."""
    found = []

    def walk(command, path):
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, [*path, name])
        for param in command.params:
            if param.param_type_name == "option" and not param.hidden and param.name != "help":
                found.append((" ".join(path), param.opts[0], param))

    walk(typer.main.get_command(app), [])
    return found


def test_every_default_is_shown_the_same_way():
    found = options()
    assert len(found) > 80
    written = [(c, o, p.help) for c, o, p in found if WRITTEN_DEFAULT.search(p.help or "")]
    assert written == []
    silent = [
        (c, o)
        for c, o, p in found
        if p.default is None
        and not p.is_flag
        and not isinstance(p.show_default, str)
        and (c, o) not in NAMES_WHAT_TO_RUN
    ]
    assert silent == []


def test_the_help_prints_the_defaults_the_options_declare():
    shown = run_metaharness("optimize", "--help", env={"COLUMNS": "160"})
    text = " ".join(shown.stdout.split())
    for default in ("[default: 3]", "[default: 8]", "[default: 0]", "[default: no cap]", "[default: 12]"):
        assert default in text, default


def test_piped_output_is_wide_and_cut_between_words():
    assert (
        shorten("a vote over the labels of the nine nearest training examples", 30) == "a vote over the labels of the…"
    )
    done = run_metaharness("optimize", "--help", env={"COLUMNS": None})  # a pipe, no terminal to read it in
    assert done.returncode == 0
    assert max(len(line) for line in done.stdout.splitlines()) > 80  # not drawn at 80 columns
    assert PIPE_WIDTH >= 160
