"""What both backends' session sandboxes share: the REPL driver they start, its environment,
and the reading of its replies (the driver's framing, capped on its header).

Each backend's handle (executor/backends/bwrap/session.py, executor/backends/docker/
session_container.py) derives from `FramedChannel` and supplies only its transport: how bytes are
sent and read, and how the sandbox is ended. The session manager sees the
`executor.backends.base.SessionChannel` protocol, never this module.
"""

from __future__ import annotations

import abc
import json
import time
from functools import cache
from pathlib import Path
from typing import Any

from executor.backends.base import ReplyTooLarge, SessionDied
from executor.limits import Limits

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


@cache
def driver_source() -> str:
    """The REPL driver both backends run in the sandbox: a file of in-sandbox code, read, never
    imported here."""
    return (Path(__file__).parents[1] / "sessions" / "driver.py").read_text()


class FramedChannel(abc.ABC):
    """A running session sandbox, whichever backend holds it: send a command, read its reply
    (the driver's framing, capped on its header); `kill()` ends it for good. Implements the
    SessionChannel protocol (executor/backends/base.py)."""

    def __init__(self, max_reply: int) -> None:
        self.max_reply = max_reply
        self._buf = bytearray()

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
        """The next reply, or SessionDied if the sandbox ends or `deadline` passes first."""
        while True:
            if len(self._buf) >= 8:
                size = int.from_bytes(self._buf[:8], "big")
                if size > self.max_reply:  # checked on the header, before reading the body
                    raise ReplyTooLarge(
                        f"the session's reply was larger than {self.max_reply} bytes"
                    )
                if len(self._buf) >= 8 + size:
                    body = bytes(self._buf[8 : 8 + size])
                    del self._buf[: 8 + size]
                    reply: dict[str, Any] = json.loads(body)
                    return reply
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SessionDied("no reply before the deadline")
            data = self._read_some(remaining)
            if data == b"":
                raise SessionDied("the session sandbox exited")
            if data:
                self._buf += data
