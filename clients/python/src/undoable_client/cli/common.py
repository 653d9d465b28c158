"""What every command shares: the --json flag, the Ui, the client, exit codes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from undoable_client.cli.exec_command import UnreadableProgram, exit_code_of, read_program
from undoable_client.cli.ui import current_ui, make_ui

__all__ = ["EXIT_FAILED", "JsonFlag", "client", "current_ui", "exit_code_of", "make_ui",
           "new_app", "read_code"]  # fmt: skip

if TYPE_CHECKING:
    from undoable_client.client import Client

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document for machines.")]
# Exit codes: the program's own for exec; else 0 done, 1 refused or failed, 2 usage (click's).
EXIT_FAILED = 1


def new_app(help: str, **options: Any) -> typer.Typer:
    """A command group. Help is click's plain formatter: typer's rich help imports rich and
    markdown-it, which would triple the time `undoable --help` takes."""
    return typer.Typer(help=help, rich_markup_mode=None, no_args_is_help=True,
                       pretty_exceptions_enable=False, add_completion=False,
                       **options)  # fmt: skip


def client() -> Client:
    from undoable_client.cli import config
    from undoable_client.client import Client

    settings = config.load()
    return Client(settings.url, settings.token)


def read_code(source: str) -> str:
    """A program from FILE, or from standard input for `-` (a usage error when unreadable)."""
    try:
        return read_program(source)
    except UnreadableProgram as exc:
        raise typer.BadParameter(str(exc)) from exc
