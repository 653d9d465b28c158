"""`undoable do "PROMPT" --kind fs|db|rest|python`: GoEx's flow on the command line.

The server's LLM proposes forward and reverse code; both are shown; the person may edit them in
$EDITOR; asked to run; the output streams; the change is shown; then Keep or Discard (a rest
action: Keep or Undo, which runs the reverse program). `--yes` answers yes and Keep.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from undoable_client.cli.common import EXIT_FAILED, JsonFlag, client, make_ui
from undoable_client.cli.ui import Ui

if TYPE_CHECKING:
    from undoable_client.actions import Action
    from undoable_client.cli.local_db import LocalDatabase
    from undoable_client.cli.local_dir import LocalFolder

# The line between the two programs in the file $EDITOR opens.
REVERSE_MARK = "# ---- reverse (undo) program below this line ----"


def ask(question: str, choices: str, default: str) -> str:
    """A one-letter answer, asked on stderr so stdout stays the result."""
    import click

    answer = click.prompt(question, type=click.Choice(list(choices)), default=default, err=True,
                          show_choices=True)  # fmt: skip
    return str(answer)


def edit(forward: str, reverse: str) -> tuple[str, str]:
    """Both programs in $EDITOR, as one file split by REVERSE_MARK; unchanged if not saved."""
    import click

    edited = click.edit(f"{forward.rstrip()}\n{REVERSE_MARK}\n{reverse.rstrip()}\n",
                        extension=".py")  # fmt: skip
    if edited is None:
        return forward, reverse
    if REVERSE_MARK not in edited:
        raise typer.BadParameter(f"the edited file lost the line {REVERSE_MARK!r}")
    new_forward, new_reverse = edited.split(REVERSE_MARK, 1)
    return new_forward.strip("\n") + "\n", new_reverse.strip("\n") + "\n"


def do(
    prompt: Annotated[str, typer.Argument(help="What you want done, in words.")],
    kind: Annotated[str, typer.Option("--kind", help="python, fs, db or rest")] = "python",
    host: Annotated[
        list[str] | None, typer.Option("--host", help="A host a rest action may call.")
    ] = None,
    workspace: Annotated[
        int | None, typer.Option("--workspace", help="An fs or db action's workspace id.")
    ] = None,
    db_url: Annotated[
        str | None,
        typer.Option(
            "--db-url",
            help="A db action's database: the credential holding its URL "
            "(postgresql://, mysql:// or mariadb://).",
        ),
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            metavar="FILE|URL",
            help="A db action's database: a SQLite file (in --workspace, else of this "
            "machine) or a database URL (postgresql://, mysql://, mariadb://).",
        ),
    ] = None,
    local: Annotated[
        Path | None, typer.Option("--dir", help="A folder of this machine as the workspace (fs).")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Run and Keep without asking.")] = False,
    rehearse: Annotated[
        bool,
        typer.Option(
            "--rehearse",
            help="fs/db: rehearse forward then reverse on a copy first; run only if it restores.",
        ),
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Ask the server's LLM for an action, read it, run it, then Keep or Discard it."""
    from undoable_client.cli import credentials

    ui = make_ui(json_out)
    if kind not in ("python", "fs", "db", "rest"):
        raise typer.BadParameter("--kind is one of python, fs, db, rest")
    if local is not None and (kind != "fs" or workspace is not None):
        raise typer.BadParameter("--dir takes --kind fs and no --workspace")
    if db is not None and kind != "db":
        raise typer.BadParameter("--db takes --kind db")
    if db is not None and db_url is not None:
        raise typer.BadParameter("give --db or --db-url, not both")
    api = client()
    folder: LocalFolder | LocalDatabase | None = None
    if local is not None:
        from undoable_client.cli.local_dir import LocalFolder

        folder = LocalFolder(local)
    target, database_url = db_target(db, workspace)
    if target is None and db is not None and database_url is None:
        from undoable_client.cli.local_db import LocalDatabase

        folder = LocalDatabase(Path(db))
        target = {"sqlite": folder.name}
        folder.snapshot()  # refused now, before the LLM is asked, if it cannot be sent
    with ui.spinner("asking the LLM"):
        proposal = api.proposal(prompt, kind, hosts=host or [], credentials=credentials.names())
    forward, reverse = proposal["forward_code"], proposal["reverse_code"]
    show_proposal(ui, proposal, forward, reverse)
    if not yes:
        answer = ask("Run it? [y]es, [e]dit in $EDITOR, [n]o", "yen", "n")
        if answer == "e":
            forward, reverse = edit(forward, reverse)
            ui.code(forward, "forward (edited)")
            ui.code(reverse, "reverse (edited)")
            answer = ask("Run it? [y]es, [n]o", "yn", "n")
        if answer != "y":
            ui.note("nothing ran")
            raise typer.Exit(EXIT_FAILED)
    if folder is not None:
        workspace = folder.send(api)
    options: dict[str, Any] = {
        "reverse_code": reverse,
        "hosts": host or proposal.get("hosts") or [],
        "intent": prompt,
        "credentials": credentials.gather(_credential_names(proposal, db_url)),
        "workspace": workspace,
        "db": {"url": db_url} if db_url else target,
        "rehearse": rehearse,
    }
    if database_url is not None:
        from undoable_client.cli.local_db import DB_CREDENTIAL

        options["credentials"][DB_CREDENTIAL] = database_url
    action = api.action(kind, forward, on_stdout=ui.stream,
                        on_stderr=lambda text: ui.stream(text, "stderr"), **options)  # fmt: skip
    decide(ui, action, yes, folder, options["credentials"])
    if ui.json_mode:
        ui.json({"proposal": proposal, "action": action.data})
    if action.status in ("failed", "reverse_failed"):
        raise typer.Exit(EXIT_FAILED)


def db_target(db: str | None, workspace: int | None) -> tuple[dict[str, str] | None, str | None]:
    """The action's `db` and a PostgreSQL URL to send as a credential: a URL; a file in
    --workspace; or (None, None) for a local SQLite file the caller sends itself."""
    if db is None:
        return None, None
    from undoable_client.cli.local_db import DB_CREDENTIAL, is_database_url

    if is_database_url(db):
        if workspace is not None:
            raise typer.BadParameter("--db with a database URL takes no --workspace")
        return {"url": DB_CREDENTIAL}, db
    if workspace is not None:
        return {"sqlite": db}, None
    return None, None


def show_proposal(ui: Ui, proposal: dict[str, Any], forward: str, reverse: str) -> None:
    if proposal.get("explanation"):
        ui.line(str(proposal["explanation"]))
    ui.code(forward, "forward: runs now")
    ui.code(reverse, "reverse: undoes it")
    if proposal.get("credentials"):
        ui.line("credentials it uses: " + ", ".join(proposal["credentials"]))
    if not proposal.get("reversible", True):
        ui.line("the LLM says this cannot be undone", "bold red")


def decide(ui: Ui, action: Action, yes: bool, folder: LocalFolder | LocalDatabase | None = None,
           credentials: dict[str, str] | None = None) -> None:  # fmt: skip
    """Show what the action did, then Keep it (into `folder` when the workspace is a local
    one) or take it back; the reverse program gets the credentials again (the server keeps
    none)."""
    from undoable_client.cli.actions import show_action

    if not ui.json_mode:
        show_action(ui, action)
    if action.status != "pending":
        return

    def keep() -> None:
        if folder is None:
            action.keep()
            return
        for path in folder.keep(action):
            ui.line(f"applied {path} in {folder.folder}")

    if yes:
        keep()
    elif action.kind == "rest":
        if ask("Its effect happened. [k]eep, [u]ndo", "ku", "k") == "k":
            keep()
        else:
            action.undo(credentials, on_stdout=ui.stream,
                        on_stderr=lambda text: ui.stream(text, "stderr"))  # fmt: skip
    elif ask("[k]eep or [d]iscard the change?", "kd", "d") == "k":
        keep()
    else:
        action.discard()
    ui.line(f"action {action.id}: {action.status}", "bold")


def _credential_names(proposal: dict[str, Any], db_url: str | None) -> list[str]:
    """The credentials the proposal names, and the database URL's (sent, never shown)."""
    names = list(proposal.get("credentials") or [])
    return names + [db_url] if db_url and db_url not in names else names
