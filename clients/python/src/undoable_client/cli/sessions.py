"""`undoable session new|exec|put|get|ls|rm`: stateful sandboxes and their files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from undoable_client.cli.common import JsonFlag, client, exit_code_of, make_ui, new_app, read_code

app = new_app("Stateful sessions: variables and files persist between calls.")
SessionId = Annotated[str, typer.Argument(metavar="ID", help="The session's id.")]


@app.command()
def new(json_out: JsonFlag = False) -> None:
    """Start a session; prints its id."""
    ui = make_ui(json_out)
    session = client().session()
    if ui.json_mode:
        ui.json({"id": session.id, "expires_at": session.expires_at})
    else:
        ui.line(session.id)


@app.command("exec")
def exec_(
    session_id: SessionId,
    source: Annotated[str, typer.Argument(metavar="FILE|-")],
    language: Annotated[str, typer.Option("--language", "-l")] = "python",
    json_out: JsonFlag = False,
) -> None:
    """Run a cell in the session; exits with its exit code."""
    ui = make_ui(json_out)
    result = client().get_session(session_id).exec(read_code(source), language=language)
    if ui.json_mode:
        from dataclasses import asdict

        data = asdict(result)
        data["images"] = [{"mime": i.mime, "name": i.name} for i in result.images]
        ui.json(data)
    else:
        ui.stream(result.stdout, "stdout")
        ui.stream(result.stderr, "stderr")
    raise typer.Exit(exit_code_of(result.exit_code, result.signal))


@app.command()
def put(
    session_id: SessionId,
    local: Annotated[Path, typer.Argument(help="A local file; - for stdin.")],
    remote: Annotated[str | None, typer.Argument(help="Its path in the session.")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Upload a file into the session's workspace."""
    ui = make_ui(json_out)
    data = sys.stdin.buffer.read() if str(local) == "-" else local.read_bytes()
    target = remote or local.name
    client().get_session(session_id).write_file(target, data)
    if ui.json_mode:
        ui.json({"path": target, "size": len(data)})
    else:
        ui.line(f"{target}: {len(data)} bytes")


@app.command()
def get(
    session_id: SessionId,
    remote: Annotated[str, typer.Argument(help="The file's path in the session.")],
    local: Annotated[str, typer.Argument(help="Where to write it; - for stdout.")] = "-",
    json_out: JsonFlag = False,
) -> None:
    """Download a file from the session's workspace."""
    ui = make_ui(json_out)
    data = client().get_session(session_id).read_file(remote)
    if ui.json_mode:
        import base64

        if local != "-":
            Path(local).write_bytes(data)
        inline = base64.b64encode(data).decode() if local == "-" else None
        ui.json({"path": remote, "size": len(data), "written_to": None if local == "-" else local,
                 "data_base64": inline})  # fmt: skip
    elif local == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        Path(local).write_bytes(data)


@app.command("ls")
def ls(
    session_id: SessionId,
    path: Annotated[str, typer.Argument()] = "",
    json_out: JsonFlag = False,
) -> None:
    """List a folder of the session's workspace."""
    ui = make_ui(json_out)
    entries = client().get_session(session_id).list_files(path)
    if ui.json_mode:
        ui.json({"path": path, "entries": entries})
    else:
        ui.table(entries, ["name", "type", "size"])


@app.command("rm")
def rm(
    session_id: SessionId,
    path: Annotated[str | None, typer.Argument(help="A file; without it, the session.")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Delete a file of the session, or (without a path) the session itself."""
    ui = make_ui(json_out)
    session = client().get_session(session_id)
    if path:
        session.delete_file(path)
    else:
        session.close()
    if ui.json_mode:
        ui.json({"deleted": path or session_id})
