"""The ``metaharness`` command line.

The root app lives here; each concept contributes its subcommands from its own ``cli`` module through a
``register(app)`` function, listed in :data:`COMMAND_MODULES`. Command modules import heavy libraries inside the
command bodies so that ``metaharness --help`` stays fast.
"""

from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console

from metaharness import __version__
from metaharness.errors import MetaharnessError

# Modules that define ``register(app: typer.Typer) -> None`` (top-level commands and groups).
COMMAND_MODULES: tuple[str, ...] = ("metaharness.search_cli", "metaharness.planner.cli", "metaharness.evaluation.cli")
# Modules that define ``register(bench: typer.Typer) -> None`` (commands under ``metaharness bench``).
BENCH_MODULES: tuple[str, ...] = ("metaharness.agents.puzzle_bench_cli", "metaharness.agents.tool_bench")

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


for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(app)

if BENCH_MODULES:
    bench_app = typer.Typer(help="Agent benchmarks: planning under a budget, long tool plans.", no_args_is_help=True)
    app.add_typer(bench_app, name="bench")
    for _module in BENCH_MODULES:
        importlib.import_module(_module).register(bench_app)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user-facing errors become one clear message and an exit code, never a traceback.

    Usage errors (unknown command, bad option) are reported by typer itself with exit code 2, and Ctrl-C
    outside a command that handles it by typer's "Aborted!" with exit code 1.
    """
    err = Console(stderr=True)
    try:
        app(args=argv, prog_name="metaharness")
    except MetaharnessError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(exc.exit_code)
