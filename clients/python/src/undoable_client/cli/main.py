"""`undoable`: the entry point and the commands that stand alone (login, exec, review, mcp)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from undoable_client.cli import actions, connect, creds, do, sessions
from undoable_client.cli.common import (
    EXIT_FAILED,
    JsonFlag,
    client,
    current_ui,
    exit_code_of,
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


def ask_secret(label: str) -> str:
    """A secret typed at the terminal, never echoed (getpass)."""
    return str(typer.prompt(label, hide_input=True))


@app.command()
def login(
    url: Annotated[str, typer.Argument(help="The server, e.g. http://127.0.0.1:8000")],
    json_out: JsonFlag = False,
) -> None:
    """Check a token against URL and keep both in the config file (mode 0600)."""
    from undoable_client.cli import config
    from undoable_client.client import Client

    ui = make_ui(json_out)
    token = ask_secret("API token")
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
    ui = make_ui(json_out)
    code = read_code(source)
    with ui.spinner("running"):
        result = client().exec(code, language=language, timeout_s=timeout_s)
    if ui.json_mode:
        from dataclasses import asdict

        data = asdict(result)
        data["images"] = [{"mime": i.mime, "name": i.name} for i in result.images]
        ui.json(data)
    else:
        ui.stream(result.stdout, "stdout")
        ui.stream(result.stderr, "stderr")
        if result.limit:
            ui.note(f"stopped by the {result.limit} limit")
    raise typer.Exit(exit_code_of(result.exit_code, result.signal))


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


def run() -> None:
    """The console script: the app, with the errors people should read turned into messages."""
    # httpx imports its own command line (click, rich, pygments) whenever they are installed,
    # which they are here; this process never runs it, and skipping it saves about a third of
    # what `undoable exec` spends before its request.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    from undoable_client.cli.config import UserError
    from undoable_client.errors import ApiError

    try:
        app()
    except (ApiError, UserError) as exc:
        message = exc.message if isinstance(exc, ApiError) else str(exc)
        current_ui().error(message)
        sys.exit(EXIT_FAILED)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    run()
