"""What both backends' session sandboxes share: the supervisor they start (in its session
mode), its environment, and the reading of its replies (executor/policy/wire.py's frames, capped
on their header and shape-checked).

Each backend's handle (executor/backends/bwrap/session.py, executor/backends/docker/
session_container.py) derives from `FramedChannel` and supplies only its transport: how bytes are
sent and read, and how the sandbox is ended. The session manager sees the
`executor.backends.base.SessionChannel` protocol, never this module.
"""

from __future__ import annotations

import abc
import time
from typing import Any

from executor.backends.base import ReplyTooLarge, SessionDied
from executor.limits import Limits
from executor.policy import wire

__all__ = [
    "SESSION_ENV",
    "FramedChannel",
    "ReplyTooLarge",
    "SessionDied",
    "driver_source",
    "max_reply_bytes",
]

# pip inside a session: the rootfs's Python is "externally managed" (PEP 668); installs go to
# the user site in the writable HOME (/workspace/.local), offline, without a cache.
SESSION_ENV = {
    "PIP_USER": "1",
    "PIP_BREAK_SYSTEM_PACKAGES": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_CACHE_DIR": "1",
    "PIP_NO_INPUT": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}


# Room for the reply's own fields around its two output strings.
REPLY_MARGIN_BYTES = 64 * 1024


def max_reply_bytes(limits: Limits) -> int:
    """The largest reply the host reads from a session's driver.

    The driver caps stdout and stderr at max_output_bytes each, but the cell runs in the
    driver's own process and can write anything on the reply pipe: the host never buffers
    more than an honest reply can be. JSON may spell each output byte in up to 6 (a
    replacement character or control byte as a \\uXXXX escape).
    """
    return 2 * 6 * limits.max_output_bytes + REPLY_MARGIN_BYTES


def driver_source() -> str:
    """The program both backends run in a session's sandbox: the one in-sandbox supervisor
    (executor/policy/supervisor.py), read, never imported here, serving cells."""
    return wire.supervisor_source()


class FramedChannel(abc.ABC):
    """A running session sandbox, whichever backend holds it: send a command, read its reply
    (wire.py's frames, capped on their header, shape-checked); `kill()` ends it for good.
    Implements the SessionChannel protocol (executor/backends/base.py)."""

    def __init__(self, max_reply: int) -> None:
        self.max_reply = max_reply
        # Until the supervisor's ready frame, nothing else; after it, cell replies only.
        self._frames = wire.FrameReader({b"r": 0})

    @property
    @abc.abstractmethod
    def pid(self) -> int:
        """Host pid of the sandbox's outermost process (tests check it is really gone)."""

    @property
    @abc.abstractmethod
    def alive(self) -> bool: ...

    @abc.abstractmethod
    def send(self, message: dict[str, Any]) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None:
        """End the sandbox's processes but keep its descriptors: a cell reading a reply on
        another thread sees the end (SessionDied) instead of a descriptor closed under it,
        whose number the process could already have given to another file."""

    @abc.abstractmethod
    def kill(self) -> None:
        """SIGKILL every process of the sandbox and release what it held."""

    @abc.abstractmethod
    def stop_counters(self) -> tuple[bool, bool]:
        """(an OOM kill happened, the pids cap was hit): why a sandbox that died ended."""

    @abc.abstractmethod
    def _read_some(self, timeout: float) -> bytes | None:
        """Reply bytes; b"" once the sandbox has ended, None if `timeout` passed first."""

    def receive(self, *, deadline: float) -> dict[str, Any]:
        """The next reply ({"ready": True} first), or SessionDied if the sandbox ends, sends
        what the wire format refuses (wire.py; ReplyTooLarge past the cap, on the header) or
        `deadline` passes first."""
        data: bytes | None = b""
        while True:
            try:
                for kind, body in self._frames.feed(data or b""):
                    return self._reply(kind, body)
            except wire.FrameTooLarge as exc:
                raise ReplyTooLarge(
                    f"the session's reply was larger than {self.max_reply} bytes ({exc})"
                ) from exc
            except wire.WireError as exc:
                raise SessionDied(str(exc)) from exc
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SessionDied("no reply before the deadline")
            data = self._read_some(remaining)
            if data == b"":
                raise SessionDied("the session sandbox exited")

    def _reply(self, kind: bytes, body: bytes) -> dict[str, Any]:
        if kind == b"r":
            self._frames.caps = {b"c": self.max_reply}
            return {"ready": True}
        return wire.parse_json(kind, body, wire.CELL_REPLY)
