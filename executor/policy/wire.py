"""The one wire format between the host and every in-sandbox supervisor, host side.

A frame is a 1-byte kind, a 4-byte big-endian length and that many payload bytes, in both
directions and under every backend: the bwrap supervisor's job and status pipes
(executor/policy/supervisor.py, also what a zygote's runs execute), a session's command and
reply pipes (the same supervisor's session mode), and the Docker supervisor's stdin and stdout
(executor/backends/docker/driver.py), where Docker's attach demux (backends/docker/wire.py) is
only the transport underneath.

Host to sandbox: b"M"/b"S" the supervisor itself, compiled (marshal) or as source, first on a
bwrap sandbox's job pipe (bwrap_args.driver_payload), b"z" a zygote template's payload
(marshal), b"j" a stateless job (marshal under bwrap: it saves the supervisor json's import;
JSON in a container), b"c" a session cell's command (JSON). Sandbox to host, never
unmarshalled: b"r" ready (empty), b"o"/b"e" the program's stdout/stderr (Docker only: bwrap
gives the program its own pipes), b"i" an output-folder entry (JSON), b"d" its bytes, b"m" the
count of entries past the cap (ASCII), b"s" the run's status (JSON), b"c" a cell's reply (JSON).

The sandbox only proposes: the host reads each frame with the kinds and per-kind size caps its
reader allows, checks a JSON payload's shape, and refuses anything else with WireError, which
names what was wrong.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from executor.errors import SandboxFailed
from executor.images import Candidate, ImageCaps, ImageSet, accept

HEADER = struct.Struct(">cI")
READY = b"r" + bytes(4)
# What an image entry's bytes travel in: frames far below any reader's cap.
IMAGE_CHUNK = 256 * 1024
IMAGE_CAPS = ImageCaps()
IMAGE_FRAMES = (b"i", b"d", b"m")
# Caps of the frames every run's status stream may carry besides its own status.
SMALL_FRAME = 4096
IMAGE_FRAME_CAPS = {b"i": SMALL_FRAME, b"d": IMAGE_CHUNK, b"m": 32}
# The status shapes, field -> accepted types (None: the field may be null).
RUN_STATUS = {"wait_status": (int,), "cpu_us": (int,)}
CONTAINER_STATUS = {
    "exit_code": (int, None),
    "signal": (int, None),
    "timed_out": (bool,),
    "oom_killed": (bool,),
    "truncated": (bool,),
    "duration_s": (int, float),
    "cpu_s": (int, float, None),
    "runnable_s": (int, float, None),
    "pids_max_hit": (bool,),
}
CELL_REPLY = {
    "exit_code": (int, None),
    "stdout": (str,),
    "stderr": (str,),
    "timed_out": (bool,),
    "truncated": (bool,),
    "duration_s": (int, float),
}
IMAGE_HEADER = {"name": (str,), "regular": (bool,), "size": (int,), "sent": (int,)}
# Set to False only by the sabotage tests: a hostile frame then reaches its reader unchecked.
CHECKS_ON = True


@cache
def supervisor_source() -> str:
    """The in-sandbox side of this wire format: executor/policy/supervisor.py, as source."""
    return Path(__file__).with_name("supervisor.py").read_text()


class WireError(SandboxFailed):
    """The sandbox sent something the wire format does not allow; the message names it."""


def frame(kind: bytes, payload: bytes) -> bytes:
    """One frame, as the host writes it (and the supervisors write theirs)."""
    return HEADER.pack(kind, len(payload)) + payload


def json_frame(kind: bytes, message: Mapping[str, Any]) -> bytes:
    return frame(kind, json.dumps(message).encode())


class FrameTooLarge(WireError):
    """A frame's header announced more bytes than its kind's cap; nothing of it was read."""


class FrameReader:
    """Splits a byte stream into frames as bytes arrive, refusing a kind it was not told to
    expect and a length past that kind's cap, on the header, before any payload is buffered."""

    def __init__(self, caps: Mapping[bytes, float]) -> None:
        self.caps = dict(caps)
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> Iterator[tuple[bytes, bytes]]:
        self._buffer += data
        while len(self._buffer) >= HEADER.size:
            kind, length = HEADER.unpack_from(self._buffer)
            self._check(kind, length)
            end = HEADER.size + length
            if len(self._buffer) < end:
                return
            payload = bytes(self._buffer[HEADER.size : end])
            del self._buffer[:end]
            yield kind, payload

    def _check(self, kind: bytes, length: int) -> None:
        if not CHECKS_ON:
            return
        cap = self.caps.get(kind)
        if cap is None:
            expected = b"".join(sorted(self.caps)).decode("ascii", "replace")
            raise WireError(f"sandbox sent a frame of kind {kind!r}, expected one of {expected!r}")
        if length > cap:
            raise FrameTooLarge(
                f"sandbox sent a {length}-byte {kind!r} frame, past its cap of {cap} bytes"
            )


def parse_json(kind: bytes, payload: bytes, shape: Mapping[str, tuple[Any, ...]]) -> dict[str, Any]:
    """A JSON object payload with exactly `shape`'s fields, each of an accepted type."""
    if not CHECKS_ON:
        return json.loads(payload)  # type: ignore[no-any-return]
    try:
        message = json.loads(payload.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError(f"sandbox sent a malformed JSON {kind!r} frame ({exc})") from exc
    if not isinstance(message, dict) or message.keys() != shape.keys():
        got = sorted(message) if isinstance(message, dict) else type(message).__name__
        raise WireError(f"sandbox sent a {kind!r} frame of the wrong shape: {got}")
    for name, accepted in shape.items():
        if not _accepted(message[name], accepted):
            raise WireError(f"sandbox sent a {kind!r} frame whose {name!r} is {message[name]!r}")
    return message


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")


def _accepted(value: Any, accepted: tuple[Any, ...]) -> bool:
    if value is None:
        return None in accepted
    if isinstance(value, bool):  # a bool is an int to isinstance; not to the wire
        return bool in accepted
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return any(kind is not None and isinstance(value, kind) for kind in accepted)


class ProposedImages:
    """The supervisor's image frames, gathered for the host's decision (`images()`).

    What it buffers is bounded by its caps whatever arrives: an entry past the count cap,
    more bytes than an entry announced or than one image may have, or a malformed header is
    a broken sandbox (WireError), as a forged frame is.
    """

    def __init__(self, caps: ImageCaps | None = None) -> None:
        self._caps = caps or IMAGE_CAPS
        self._candidates: list[Candidate] = []
        self._body = bytearray()
        self._want = 0  # bytes the last entry announced and has not yet sent
        self._more = 0

    def feed(self, kind: bytes, body: bytes) -> None:
        if kind == b"i":
            self._entry(body)
        elif kind == b"d":
            if len(body) > self._want:
                raise WireError("sandbox sent more image bytes than it announced")
            self._body += body
            self._want -= len(body)
            if not self._want:
                self._close_entry()
        else:
            self._settle()
            try:
                self._more = max(int(body), 0)
            except ValueError as exc:
                raise WireError("sandbox sent a malformed image count") from exc

    def images(self) -> ImageSet:
        """The host's decision on what was proposed."""
        self._settle()
        return accept(self._candidates, more=self._more, caps=self._caps)

    def _entry(self, body: bytes) -> None:
        self._settle()
        header = parse_json(b"i", body, IMAGE_HEADER)
        try:
            name = os.fsdecode(bytes.fromhex(header["name"]))
        except ValueError as exc:
            raise WireError("sandbox sent an image name that is not hex") from exc
        regular, size, sent = header["regular"], header["size"], header["sent"]
        if len(self._candidates) >= self._caps.max_count:
            raise WireError("sandbox proposed more images than the count cap")
        if not 0 <= sent <= self._caps.max_image_bytes or (sent and not regular):
            raise WireError("sandbox proposed an image past the per-image cap")
        unread = not regular or size > self._caps.max_image_bytes
        self._candidates.append(Candidate(name, size, None if unread else b"", regular))
        self._want = sent
        if not sent:
            self._close_entry()

    def _close_entry(self) -> None:
        last = self._candidates[-1]
        if last.data is not None:
            self._candidates[-1] = Candidate(last.name, last.size, bytes(self._body), last.regular)
        self._body.clear()

    def _settle(self) -> None:
        if self._want:
            raise WireError("sandbox sent fewer image bytes than it announced")
