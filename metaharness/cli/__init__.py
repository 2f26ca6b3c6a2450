"""The ``metaharness`` command line: one module per command group, each a thin layer over the library.

- ``.init_task``: ``init`` (a working task folder to start your own task from);
- ``.search``: ``optimize`` (a search, with progress, Ctrl-C handling and the final table);
- ``.browse``: ``history``, ``show``, ``diff``, ``report`` (a run's candidates, with plain-git equivalents);
- ``.evaluate``: ``eval`` (one harness on one split);
- ``.plan``: ``plan solve`` and ``plan serve`` (the planner core);
- ``.bench``: ``bench harness`` (the harness-optimisation grid of the TPS paper), ``bench sokoban``,
  ``bench blocksworld``, ``bench tools`` (agent benchmarks).

Each module defines ``register(app)``. Command bodies import heavy libraries when they run, so that
``metaharness --help`` stays fast. The library never imports this package.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable

import typer
import typer.main
from rich.console import Console
from rich.text import Text
from typer.core import TyperCommand, TyperGroup, TyperOption

from metaharness import __version__
from metaharness.cli import bench, browse, evaluate, init_task, plan, search
from metaharness.cli.output import pipe_width
from metaharness.errors import MetaharnessError
from metaharness.text import terminal

app = typer.Typer(
    name="metaharness",
    help="Optimise LLM harnesses with a proposer model, TPS plan graphs and a budgeted solver.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"metaharness {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Optimise LLM harnesses with a proposer model, TPS plan graphs and a budgeted solver."""


for _group in (init_task, search, browse, evaluate, plan, bench):
    _group.register(app)


def _said(words: str) -> Callable[..., str]:
    """What typer asks an option for its default's help text: ``words``."""

    def extract(*, ctx: typer.Context) -> str:
        return words

    return extract


def for_help(command: TyperCommand | TyperGroup) -> TyperCommand | TyperGroup:
    """``command`` (and its subcommands) as its help shows it: no type beside a flag (typer writes ``<bool>`` beside
    ``--resume`` or ``--help``, which take no value; a flag's metavar is never used otherwise), and every default in
    one form, ``[default: ...]``: a default said in words (``show_default="no cap"``, for an option whose value is
    resolved later) is shown as a literal one is, where typer would put it in parentheses."""
    helper = command.get_help_option(typer.Context(command))
    for param in [*command.params, *([helper] if helper is not None else [])]:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
        if isinstance(param, TyperOption) and isinstance(param.show_default, str):
            words = param.show_default
            param.show_default = True
            param._extract_default_help_str = _said(words)  # type: ignore[method-assign]
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            if isinstance(sub, (TyperCommand, TyperGroup)):
                for_help(sub)
    return command


def main(argv: list[str] | None = None) -> None:
    """Entry point: user-facing errors become one clear message and an exit code, never a traceback.

    Usage errors (unknown command, bad option) are reported by typer itself with exit code 2, and Ctrl-C
    outside a command that handles it by typer's "Aborted!" with exit code 1.
    """
    err = Console(stderr=True, soft_wrap=True)  # one message, one line, even when stderr is a pipe
    width = pipe_width()
    if width is not None:  # help piped (`metaharness optimize --help | less`): as wide as the results (cli.output)
        # Start-up: only piped output needs typer's help renderer set up front.
        from typer import rich_utils

        rich_utils.MAX_WIDTH = width
    try:
        command = typer.main.get_command(app)
        assert isinstance(command, TyperGroup)  # the app has subcommands
        for_help(command)(args=argv, prog_name="metaharness")
    except MetaharnessError as exc:
        # The message may quote a harness's error: text, not markup (metaharness.text).
        err.print(Text.assemble(("error:", "bold red"), " ", terminal(str(exc))))
        sys.exit(exc.exit_code)
    finally:
        if argv is None:  # the console script: the process ends with the command
            # The cyclic garbage collector's last passes over everything a search made kept the process alive for
            # seconds after the main job had printed its result; at exit nothing needs collecting.
            gc.freeze()
