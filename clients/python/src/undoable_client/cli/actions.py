"""`undoable action ls|show|keep|discard|undo ID` and `undoable review`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from undoable_client.cli.common import EXIT_FAILED, JsonFlag, client, make_ui, new_app
from undoable_client.cli.ui import Ui

if TYPE_CHECKING:
    from undoable_client.actions import Action

app = new_app("Actions: see them, Keep or Discard a change, Undo what one did.")
ActionId = Annotated[int, typer.Argument(metavar="ID", help="The action's id.")]
COLUMNS = ["id", "status", "kind", "class", "intent", "workspace"]
FAILED = frozenset({"failed", "reverse_failed"})


def show_action(ui: Ui, action: Action) -> None:
    if ui.json_mode:
        ui.json(action.data)
        return
    colour = {"pending": "yellow", "kept": "green", "failed": "red"}.get(action.status, "")
    ui.line(f"action {action.id}: {action.kind}, {action.status}", f"bold {colour}".strip())
    if action.action_class:
        ui.line(f"class: {action.action_class}")
    if action.data.get("intent"):
        ui.line(f"intent: {action.data['intent']}")
    if action.error:
        ui.line(f"error: {action.error}", "red")
    show_rehearsal(ui, action.rehearsal)
    ui.change(action.change)
    show_undo_check(ui, (action.change or {}).get("undo_check"))
    show_undo_check(ui, (action.reverse or {}).get("undo_check"))
    show_probe(ui, (action.reverse or {}).get("probe"))


def show_probe(ui: Ui, probe: dict | None) -> None:
    """A rest action's probe, run after the reverse program: is the effect gone?"""
    if not probe:
        return
    gone = bool(probe.get("passed"))
    said = "the effect is gone" if gone else "the effect is NOT gone"
    ui.line(f"probe: {said} (exit {probe.get('exit_code')})", "green" if gone else "red")


def show_undo_check(ui: Ui, check: dict | None) -> None:
    """A verified undo: a Discard's or rollback's (a mismatch is an alarm), or what a reverse
    program after a Keep left different (a report: `differences`)."""
    if not check:
        return
    if "differences" in check:
        if check.get("matched"):
            ui.line("undo: the workspace is as before the forward run", "green")
            return
        ui.line(f"undo: the undo left these differences ({check.get('differences')}):", "yellow")
        for item in check.get("diff") or []:
            what = f" ({', '.join(item['what'])})" if item.get("what") else ""
            ui.line(f"  {item.get('path')}: {item.get('change')}{what}")
        return
    if check.get("matched"):
        ui.line("undo verified: the state is as before the run", "green")
    else:
        ui.line(
            f"undo NOT verified: {check.get('before')} before, {check.get('after')} after", "red"
        )


def show_rehearsal(ui: Ui, rehearsal: dict | None) -> None:
    """The rehearsal's verdict, what differs, and the counters that moved (not the verdict's)."""
    if not rehearsal:
        return
    stale = " (stale: the code changed since)" if rehearsal.get("stale") else ""
    ui.line(f"rehearsal: {rehearsal.get('message')}{stale}",
            "green" if rehearsal.get("restored") else "red")  # fmt: skip
    for item in rehearsal.get("diff") or []:
        what = f" ({', '.join(item['what'])})" if item.get("what") else ""
        ui.line(f"  {item.get('path') or item.get('table')}: {item.get('change')}{what}")
    for name, moved in (rehearsal.get("counters") or {}).items():
        ui.line(
            f"  counter {name}: {moved.get('before')} -> {moved.get('after')} (not the verdict)"
        )


def _list(ui: Ui, found: list[Action]) -> None:
    if ui.json_mode:
        ui.json({"actions": [a.data for a in found]})
    else:
        ui.table([a.data for a in found], COLUMNS)


@app.command("ls")
def ls(
    status: Annotated[str | None, typer.Option(help="e.g. pending, kept")] = None,
    kind: Annotated[str | None, typer.Option(help="python, fs, db or rest")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Your actions, newest first."""
    ui = make_ui(json_out)
    _list(ui, client().actions(status=status, kind=kind))


def review(json_out: JsonFlag = False) -> None:
    """The actions of your tokens that wait for Keep or Discard."""
    ui = make_ui(json_out)
    _list(ui, client().actions(status="pending"))


@app.command()
def show(action_id: ActionId, json_out: JsonFlag = False) -> None:
    """An action: its status and what it changed."""
    ui = make_ui(json_out)
    show_action(ui, client().get_action(action_id))


@app.command()
def keep(action_id: ActionId, json_out: JsonFlag = False) -> None:
    """Keep: apply the pending change."""
    ui = make_ui(json_out)
    show_action(ui, client().get_action(action_id).keep())


@app.command()
def discard(action_id: ActionId, json_out: JsonFlag = False) -> None:
    """Discard: throw the pending change away."""
    ui = make_ui(json_out)
    show_action(ui, client().get_action(action_id).discard())


@app.command()
def undo(
    action_id: ActionId,
    cred: Annotated[
        list[str] | None, typer.Option("--cred", help="A kept credential the reverse needs.")
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Undo: Discard while pending, else run the reverse program."""
    from undoable_client.cli import credentials

    ui = make_ui(json_out)
    action = client().get_action(action_id)
    action.undo(credentials.gather(cred or []), on_stdout=ui.stream,
                on_stderr=lambda text: ui.stream(text, "stderr"))  # fmt: skip
    show_action(ui, action)
    if action.status in FAILED:
        raise typer.Exit(EXIT_FAILED)
