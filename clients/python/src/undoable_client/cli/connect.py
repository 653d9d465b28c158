"""`undoable connect slack|github|NAME`: sign in to a service in the browser and keep its
token as a credential (`undoable creds`), for the actions that name it."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from undoable_client.cli.common import JsonFlag, make_ui


def open_browser(url: str, use_browser: bool) -> None:
    """The system browser when there is one; the address on stderr in any case, for a
    machine without one (ssh) or a browser on another screen."""
    opened = False
    if use_browser:
        import webbrowser

        opened = webbrowser.open(url)
    lead = "Opened your browser at" if opened else "Open this address in a browser:"
    sys.stderr.write(f"{lead}\n{url}\n")
    sys.stderr.flush()


def connect(
    provider: Annotated[str, typer.Argument(metavar="slack|github|NAME", help="The service.")],
    client_id: Annotated[
        str | None, typer.Option("--client-id", help="The app's OAuth client id.")
    ] = None,
    scope: Annotated[
        list[str] | None, typer.Option("--scope", help="A scope to ask for (repeatable).")
    ] = None,
    credential: Annotated[
        str | None, typer.Option("--as", help="The credential's name, e.g. SLACK_TOKEN.")
    ] = None,
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Print the address instead of opening it.")
    ] = False,
    timeout_s: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for the browser.")
    ] = 300.0,
    json_out: JsonFlag = False,
) -> None:
    """Sign in to a service (OAuth for native apps) and keep its token as a credential."""
    from undoable_client.cli import credentials, oauth_loopback, oauth_providers

    ui = make_ui(json_out)
    chosen = oauth_providers.provider_for(provider, client_id=client_id, scopes=scope,
                                          credential=credential)  # fmt: skip
    credentials.check_name(chosen.credential)
    token = oauth_loopback.sign_in(
        chosen, show_url=lambda url: open_browser(url, not no_browser), timeout_s=timeout_s
    )
    credentials.add(chosen.credential, token)
    if ui.json_mode:
        ui.json({"provider": chosen.name, "credential": chosen.credential,
                 "where": credentials.where()})  # fmt: skip
    else:
        ui.line(f"connected {chosen.name}: kept {chosen.credential} in {credentials.where()}",
                "green")  # fmt: skip
