"""Actions (code run for real, then kept or undone) and the workspaces they work in.

    action = client.action("fs", "open('joke.txt', 'w').write('knock knock')",
                           on_output=lambda chunk: print(chunk["text"], end=""))
    action.status            # "pending": the change waits
    action.change["entries"] # what it would change
    action.keep()            # or action.discard(), or action.undo()

Each create sends an Idempotency-Key (a new one per call unless given), so the client's own
retries of a 429 or 503 never run an action twice.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from undoable_client.client import Client

NDJSON = "application/x-ndjson"
# States after which nothing happens without a request (keep, discard, undo).
MOVING = frozenset({"queued", "running"})
OutputCallback = Callable[[dict[str, Any]], None]
_sleep = time.sleep


class Action:
    """An action as the server last described it; `keep()`, `discard()`, `undo()` and
    `refresh()` update it in place."""

    def __init__(self, client: Client, data: dict[str, Any]) -> None:
        self.client = client
        self.data = data

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

    def __repr__(self) -> str:
        return f"<Action {self.id} {self.kind} {self.status}>"

    def _post(self, verb: str, body: dict[str, Any] | None = None,
              on_output: OutputCallback | None = None) -> Action:  # fmt: skip
        path = f"/actions/{self.id}/{verb}"
        self.data = _answer(self.client, path, body or {}, on_output=on_output)
        return self

    def keep(self) -> Action:
        """Apply the pending change (for rest: record that the effect stands)."""
        return self._post("keep")

    def discard(self) -> Action:
        """Throw the pending fs or db change away."""
        return self._post("discard")

    def undo(self, credentials: dict[str, str] | None = None,
             on_output: OutputCallback | None = None) -> Action:  # fmt: skip
        """Take the action back: Discard while pending, else run the reverse program, which
        needs its credentials again (the server keeps none)."""
        return self._post("undo", {"credentials": credentials or {}}, on_output=on_output)

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


def action_create(client: Client, kind: str, forward_code: str, *, reverse_code: str = "",
                  hosts: list[str] | None = None, intent: str = "",
                  credentials: dict[str, str] | None = None, workspace: int | None = None,
                  db: dict[str, str] | None = None, timeout_s: float | None = None,
                  idempotency_key: str | None = None,
                  on_output: OutputCallback | None = None) -> Action:  # fmt: skip
    """Create an action and run its forward program; returns it once it has settled.

    `on_output(chunk)` is called with each piece of output as it comes
    ({"seq", "stream", "text"}). `db` is {"sqlite": PATH} or {"postgres": CREDENTIAL_NAME}.
    """
    body: dict[str, Any] = {"kind": kind, "forward_code": forward_code}
    optional = {
        "reverse_code": reverse_code,
        "hosts": hosts,
        "intent": intent,
        "credentials": credentials,
        "workspace": workspace,
        "db": db,
        "timeout_s": timeout_s,
    }
    body.update({name: value for name, value in optional.items() if value})
    key = idempotency_key or uuid.uuid4().hex
    data = _answer(client, "/actions", body, on_output=on_output, key=key)
    return Action(client, data)


def _answer(client: Client, path: str, body: dict[str, Any], *, on_output: OutputCallback | None,
            key: str | None = None) -> dict[str, Any]:  # fmt: skip
    """POST `body`; the action from the JSON answer, or from the last NDJSON line after each
    output line went to `on_output`."""
    headers = {"Idempotency-Key": key} if key else {}
    raw = json.dumps(body).encode()
    if on_output is None:
        answer: dict[str, Any] = client._json("POST", path, body, headers=headers)
        return answer
    headers["Accept"] = NDJSON
    action: dict[str, Any] | None = None
    with client.open("POST", path, body=raw, headers=headers) as response:
        for line in response:
            if not line.strip():
                continue
            event = json.loads(line)
            if event.get("type") == "output":
                on_output(event)
            elif event.get("type") == "action":
                action = event["action"]
    if action is None:
        raise ConnectionError("the server ended the stream before the action's last line")
    return action


class Workspace:
    """A folder of files that fs and db actions work in (`client.workspace()`)."""

    def __init__(self, client: Client, workspace_id: int) -> None:
        self.client = client
        self.id = workspace_id
        self._path = f"/workspaces/{workspace_id}"

    def __repr__(self) -> str:
        return f"<Workspace {self.id}>"

    def _file(self, path: str) -> str:
        return f"{self._path}/files/{quote(path.lstrip('/'), safe='/')}"

    def write_file(self, path: str, data: bytes | str) -> None:
        blob = data.encode("utf-8") if isinstance(data, str) else data
        self.client.request("PUT", self._file(path), body=blob,
                            content_type="application/octet-stream")  # fmt: skip

    def read_file(self, path: str) -> bytes:
        return self.client.request("GET", self._file(path))

    def delete_file(self, path: str) -> None:
        self.client.request("DELETE", self._file(path))

    def list_files(self) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self.client._json("GET", f"{self._path}/files")["entries"]
        return entries

    def upload_zip(self, data: bytes) -> list[dict[str, Any]]:
        """Unpack a zip into the workspace, all or nothing; the listing after."""
        answer = self.client.request("POST", f"{self._path}/zip", body=data,
                                     content_type="application/zip")  # fmt: skip
        entries: list[dict[str, Any]] = json.loads(answer)["entries"]
        return entries

    def download_zip(self) -> bytes:
        return self.client.request("GET", f"{self._path}/zip")
