"""`undoable creds add|ls|rm`: credentials on this machine, typed at a prompt that never echoes."""

from __future__ import annotations

from typing import Annotated

import typer

from undoable_client.cli.common import EXIT_FAILED, JsonFlag, make_ui, new_app

app = new_app("Credentials kept on this machine, sent with the actions that name them.")
Name = Annotated[str, typer.Argument(help="An environment variable name, e.g. SLACK_TOKEN.")]


@app.command()
def add(name: Name, json_out: JsonFlag = False) -> None:
    """Keep a credential: its value is asked for and never shown."""
    from undoable_client.cli import credentials
    from undoable_client.cli.main import ask_secret

    ui = make_ui(json_out)
    credentials.check_name(name)
    value = ask_secret(f"{name}")
    if not value:
        ui.error("an empty value: nothing kept")
        raise typer.Exit(EXIT_FAILED)
    credentials.add(name, value)
    if ui.json_mode:
        ui.json({"name": name, "where": credentials.where()})
    else:
        ui.line(f"kept {name} in {credentials.where()}", "green")


@app.command("ls")
def ls(json_out: JsonFlag = False) -> None:
    """The names of the credentials kept (never their values)."""
    from undoable_client.cli import credentials

    ui = make_ui(json_out)
    found = credentials.names()
    if ui.json_mode:
        ui.json({"names": found, "where": credentials.where()})
    else:
        for name in found:
            ui.line(name)


@app.command("rm")
def rm(name: Name, json_out: JsonFlag = False) -> None:
    """Forget a credential."""
    from undoable_client.cli import credentials

    ui = make_ui(json_out)
    if not credentials.remove(name):
        ui.error(f"no credential {name!r}")
        raise typer.Exit(EXIT_FAILED)
    if ui.json_mode:
        ui.json({"removed": name})
    else:
        ui.line(f"removed {name}")
