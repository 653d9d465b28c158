"""What every command shares: the --json flag, the Ui, the client, exit codes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from undoable_client.cli.ui import Ui

if TYPE_CHECKING:
    from undoable_client.client import Client

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document for machines.")]
# Exit codes: the program's own for exec; else 0 done, 1 refused or failed, 2 usage (click's).
EXIT_FAILED = 1

_current: list[Ui] = []


def new_app(help: str, **options: Any) -> typer.Typer:
    """A command group. Help is click's plain formatter: typer's rich help imports rich and
    markdown-it, which would triple the time `undoable --help` takes."""
    return typer.Typer(help=help, rich_markup_mode=None, no_args_is_help=True,
                       pretty_exceptions_enable=False, add_completion=False,
                       **options)  # fmt: skip


def make_ui(json_mode: bool) -> Ui:
    ui = Ui(json_mode)
    _current.append(ui)
    return ui


def current_ui() -> Ui:
    return _current[-1] if _current else Ui(json_mode="--json" in sys.argv)


def client() -> Client:
    from undoable_client.cli import config
    from undoable_client.client import Client

    settings = config.load()
    return Client(settings.url, settings.token)


def read_code(source: str) -> str:
    """A program from FILE, or from standard input for `-`."""
    if source == "-":
        return sys.stdin.read()
    path = Path(source)
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(f"cannot read {source}: {exc}") from exc


def exit_code_of(exit_code: int | None, signal: int | None) -> int:
    """The shell's convention: the program's status, 128 + N for a signal N, else 1."""
    if exit_code is not None:
        return exit_code & 0xFF
    return 128 + signal if signal else EXIT_FAILED
