"""Actions (code run for real, then kept or undone) and the workspaces they work in.

    action = client.action("fs", "open('joke.txt', 'w').write('knock knock')",
                           on_stdout=lambda text: print(text, end=""))
    action.status            # "pending": the change waits
    action.change["entries"] # what it would change
    action.keep()            # or action.discard(), or action.undo()

Each create sends an Idempotency-Key (a new one per call unless given), so the client's own
retries of a 429 or 503 never run an action twice.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from undoable_client import _protocol as protocol
from undoable_client._protocol import MOVING, Listeners

if TYPE_CHECKING:
    from undoable_client._protocol import OutputCallback, TextCallback
    from undoable_client.client import Client

_sleep = time.sleep


class ActionFields:
    """The fields of an action as the server last described it (`data`)."""

    data: dict[str, Any]

    id = property(lambda self: int(self.data["id"]))
    status = property(lambda self: str(self.data["status"]))
    kind = property(lambda self: str(self.data["kind"]))
    workspace = property(lambda self: self.data.get("workspace"))
    change = property(lambda self: self.data.get("change"))
    stdout = property(lambda self: str(self.data.get("stdout", "")))
    stderr = property(lambda self: str(self.data.get("stderr", "")))
    exit_code = property(lambda self: self.data.get("exit_code"))
    error = property(lambda self: str(self.data.get("error", "")))
    reverse = property(lambda self: self.data.get("reverse"))
    # {restored, message, diff, counters, ...} once rehearsed; reversible|compensable|irreversible
    rehearsal = property(lambda self: self.data.get("rehearsal"))
    action_class = property(lambda self: self.data.get("class"))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} {self.kind} {self.status}>"


class Action(ActionFields):
    """`keep()`, `discard()`, `undo()`, `refresh()` and `wait()` update it in place."""

    def __init__(self, client: Client, data: dict[str, Any]) -> None:
        self.client = client
        self.data = data

    def _verb(self, verb: str, body: dict[str, Any], listeners: Listeners) -> Action:
        call = protocol.verb_call(self.id, verb, body, listeners.wanted)
        self.data = self.client.call_action(call, listeners)
        return self

    def keep(self) -> Action:
        """Apply the pending change (for rest: record that the effect stands)."""
        return self._verb("keep", {}, Listeners())

    def discard(self) -> Action:
        """Throw the pending fs or db change away."""
        return self._verb("discard", {}, Listeners())

    def undo(self, credentials: dict[str, str] | None = None,
             on_output: OutputCallback | None = None, on_stdout: TextCallback | None = None,
             on_stderr: TextCallback | None = None) -> Action:  # fmt: skip
        """Take the action back: Discard while pending, else run the reverse program, which
        needs its credentials again (the server keeps none)."""
        listeners = Listeners(on_output, on_stdout, on_stderr)
        return self._verb("undo", {"credentials": credentials or {}}, listeners)

    def refresh(self) -> Action:
        self.data = self.client._json("GET", f"/actions/{self.id}")
        return self

    def wait(self, timeout_s: float = 300.0, poll_s: float = 0.5) -> Action:
        """Until the action is no longer queued or running (TimeoutError after `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        while self.refresh().status in MOVING:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"action {self.id} is still {self.status}")
            _sleep(poll_s)
        return self


class Workspace:
    """A folder of files that fs and db actions work in (`client.workspace()`)."""

    def __init__(self, client: Client, workspace_id: int) -> None:
        self.client = client
        self.id = workspace_id
        self._path = f"/workspaces/{workspace_id}"

    def __repr__(self) -> str:
        return f"<Workspace {self.id}>"

    def write_file(self, path: str, data: bytes | str) -> None:
        blob = data.encode("utf-8") if isinstance(data, str) else data
        self.client.request("PUT", protocol.file_path(self._path, path), body=blob,
                            content_type="application/octet-stream")  # fmt: skip

    def read_file(self, path: str) -> bytes:
        return self.client.request("GET", protocol.file_path(self._path, path))

    def delete_file(self, path: str) -> None:
        self.client.request("DELETE", protocol.file_path(self._path, path))

    def list_files(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.client._json("GET", f"{self._path}/files")["entries"]
        return found

    def upload_zip(self, data: bytes) -> list[dict[str, Any]]:
        """Unpack a zip into the workspace, all or nothing; the listing after."""
        answer = self.client.request("POST", f"{self._path}/zip", body=data,
                                     content_type="application/zip")  # fmt: skip
        found: list[dict[str, Any]] = json.loads(answer)["entries"]
        return found

    def download_zip(self) -> bytes:
        return self.client.request("GET", f"{self._path}/zip")
