"""The typer app: every command, and the ones that stand alone (login, exec, mcp)."""

from __future__ import annotations

from typing import Annotated

import typer

from undoable_client.cli import actions, connect, creds, do, main, sessions
from undoable_client.cli.common import (
    EXIT_FAILED,
    JsonFlag,
    current_ui,
    make_ui,
    new_app,
    read_code,
)

app = new_app("Run code in Undoable's sandbox, and keep or undo what it did.", name="undoable")
app.add_typer(sessions.app, name="session")
app.add_typer(actions.app, name="action")
app.add_typer(creds.app, name="creds")
app.command("review")(actions.review)
app.command("do")(do.do)
app.command("connect")(connect.connect)


@app.command()
def login(
    url: Annotated[str, typer.Argument(help="The server, e.g. http://127.0.0.1:8000")],
    json_out: JsonFlag = False,
) -> None:
    """Check a token against URL and keep both in the config file (mode 0600)."""
    from undoable_client.cli import config
    from undoable_client.client import Client

    ui = make_ui(json_out)
    token = main.ask_secret("API token")
    Client(url, token).actions(status="pending")  # refused with AuthError when it is wrong
    path = config.save(url, token)
    if ui.json_mode:
        ui.json({"url": url, "config": str(path)})
    else:
        ui.line(f"logged in to {url}; saved in {path}", "green")


@app.command("exec")
def exec_(
    source: Annotated[str, typer.Argument(metavar="FILE|-", help="The program; - for stdin.")],
    language: Annotated[str, typer.Option("--language", "-l")] = "python",
    timeout_s: Annotated[float | None, typer.Option("--timeout", help="Seconds.")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Run a program once in a fresh sandbox; exits with the program's exit code."""
    from undoable_client.cli.exec_command import run_exec

    raise typer.Exit(run_exec(read_code(source), language, timeout_s, json_out))


@app.command()
def mcp() -> None:
    """Serve MCP over stdio for an agent (needs undoable-client[mcp])."""
    from undoable_client.cli import config

    try:
        from undoable_client import mcp_stdio
    except ImportError:
        current_ui().error("the MCP server is not installed: install undoable-client[mcp]")
        raise typer.Exit(EXIT_FAILED) from None
    settings = config.load()
    mcp_stdio.main(url=settings.url, token=settings.token)
