"""`undoable`: the console script's entry point.

Imports nothing heavy itself: plain `undoable exec` arguments run straight through
exec_command (no typer, rich, httpx or dataclasses), the top-level `undoable --help` is printed
from its stored text (cli/top_help.py), and everything else goes to the typer app (cli/app.py).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing itself is a cost on every start: imported by type checkers only
if TYPE_CHECKING:
    from collections.abc import Callable

EXIT_FAILED = 1


def ask_secret(label: str) -> str:
    """A secret typed at the terminal, never echoed (getpass)."""
    import typer

    return str(typer.prompt(label, hide_input=True))


def _dispatch() -> None:
    args = sys.argv[1:]
    if args[:1] == ["exec"]:
        from undoable_client.cli import exec_command

        plain = exec_command.parse_plain(args[1:])
        if plain is not None:
            try:
                code = exec_command.read_program(plain.source)
            except exec_command.UnreadableProgram:
                pass  # the typer command says so, as a usage error
            else:
                sys.exit(exec_command.run_exec(code, plain.language, plain.timeout_s,
                                               plain.json_out))  # fmt: skip
    elif args == ["--help"]:
        from undoable_client.cli import top_help

        if top_help.show():
            return
    from undoable_client.cli.app import app

    app()


def _guarded(work: Callable[[], None]) -> None:
    """`work`, with the errors people should read turned into messages and exit 1."""
    try:
        work()
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        # Loaded only now: a command that succeeds never needs them.
        from undoable_client.cli.config import UserError
        from undoable_client.errors import ApiError

        if not isinstance(exc, ApiError | UserError):
            raise
        from undoable_client.cli.ui import current_ui

        message = exc.message if isinstance(exc, ApiError) else str(exc)
        current_ui().error(message)
        sys.exit(EXIT_FAILED)


def run() -> None:
    """The console script."""
    # httpx imports its own command line (click, rich, pygments) whenever they are installed;
    # this process never runs it (the commands that still use httpx skip that cost).
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    _guarded(_dispatch)


if __name__ == "__main__":
    run()
