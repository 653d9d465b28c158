"""What the API answers with: the result of a run (errors: undoable_client.errors)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, fields
from typing import Any, Literal

from undoable_client.errors import ApiError

LimitName = Literal["wall_time", "cpu_time", "memory", "output", "pids", "file_size"]


@dataclass(frozen=True)
class Image:
    """An image the run left in its output folder, like Jupyter's display_data."""

    mime: str  # image/png, image/jpeg, image/gif or image/svg+xml
    data: bytes
    name: str = ""


@dataclass(frozen=True)
class ExecResult:
    """One run: `POST /api/v1/exec` or a session's exec, as JSON."""

    stdout: str
    stderr: str
    exit_code: int | None  # None when a signal killed the program
    timed_out: bool
    oom_killed: bool
    truncated: bool
    duration_ms: int
    signal: int | None = None  # the signal that killed the program, if one did
    limit: LimitName | None = None  # the limit that stopped the run, if one did
    images: tuple[Image, ...] = ()
    image_notes: tuple[str, ...] = ()  # one line per image cap that left something out

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def output(self) -> str:
        """stdout then stderr, what a person would want to read."""
        return self.stdout + self.stderr

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExecResult:
        """Build from the server's JSON; fields this client does not know are ignored."""
        known = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        images = tuple(
            Image(mime=i["mime"], data=base64.b64decode(i["data"]), name=i.get("name", ""))
            for i in known.pop("images", ())
        )
        notes = tuple(known.pop("image_notes", ()))
        return cls(**known, images=images, image_notes=notes)


__all__ = ["ApiError", "ExecResult", "Image"]
