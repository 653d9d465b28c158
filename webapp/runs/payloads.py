"""What travels over the run websocket and the channel layer. Every message has a `type`."""

from __future__ import annotations

from typing import Literal, TypedDict

# Why a finished run did not succeed: the program's own failure is the only one "Fix with the
# model" can help with.
FailureKind = Literal[
    "missing_credential", "missing_scope", "limit", "program", "stopped", "system"
]


class ChunkPayload(TypedDict):
    """One numbered piece of output; the browser drops any seq it has already shown."""

    type: Literal["chunk"]
    seq: int
    stream: str  # stdout | stderr | system
    text: str


class ImagePayload(TypedDict):
    """One image a finished run left in its output folder (webapp/runs/images.py)."""

    url: str
    name: str  # the file's name in the output folder
    mime: str


class StatusPayload(TypedDict):
    """The run's state; sent on every transition and once after the replay on connect."""

    type: Literal["status"]
    run_id: int
    status: str
    exit_code: int | None
    signal: int | None
    limit: str | None  # the limit that stopped the run (RunResult.limit), None if none did
    duration_ms: int | None
    error: str
    failure: FailureKind | None  # None while running and for a run that succeeded
    reason: str  # why it did not succeed, one sentence ("" if it did)
    next_step: str  # what to do about it ("" if it succeeded)
    truncated: bool
    last_seq: int  # the highest seq stored when this was sent
    images: list[ImagePayload]  # stored with the result: empty until the run has ended


class RunOutputEvent(TypedDict):
    """Channel-layer event for a chunk (handled by RunConsumer.run_output)."""

    type: Literal["run.output"]
    chunk: ChunkPayload


class RunStatusEvent(TypedDict):
    """Channel-layer event for a status change (handled by RunConsumer.run_status)."""

    type: Literal["run.status"]
    status: StatusPayload


class ChangePayload(TypedDict):
    """How the run's fs/db change stands; the page fetches the panel again when it arrives."""

    type: Literal["change"]
    change_id: int
    run_id: int
    status: str  # webapp.workspaces.models.ChangeStatus
    message: str


class ChangeUpdatedEvent(TypedDict):
    """Channel-layer event for a change's new status (handled by RunConsumer.change_updated)."""

    type: Literal["change.updated"]
    change: ChangePayload


def run_group(run_id: int) -> str:
    return f"run-{run_id}"
