"""The bytes between DockerBackend and the in-container supervisor (driver.py).

In: one message on the container's stdin, a 4-byte big-endian length and JSON.
Out: Docker's attach stream multiplexes the supervisor's stdout and stderr (8-byte headers);
inside its stdout, the supervisor writes frames of 1-byte kind + 4-byte length + payload:
b"r" ready (sent once, before the message), b"o" program stdout, b"e" program stderr,
then the output folder's entries as proposed (b"i" one entry, JSON, followed by its bytes in
b"d" frames; b"m" the number of entries past the count cap), b"s" the final status (JSON).
"""

from __future__ import annotations

import base64
import json
import os
import struct
from collections.abc import Iterator

from executor.errors import SandboxFailed
from executor.images import Candidate, ImageCaps, ImageSet, accept
from executor.limits import Limits
from executor.spec import RunSpec

# The supervisor reads 64 KiB at a time; anything far bigger is a broken or forged frame.
MAX_FRAME = 1 << 20
DOCKER_STDOUT, DOCKER_STDERR = 1, 2
# A bash program reaches the kernel as one argv string, which Linux caps at 128 KiB.
MAX_CODE_BYTES = 120 * 1024
# What a freshly started supervisor writes first: Docker's stdout header, then a b"r" frame.
READY = struct.pack(">B3xI", DOCKER_STDOUT, 5) + b"r" + struct.pack(">I", 0)
# What the supervisor proposes of the output folder at most; the host decides (executor/images.py).
IMAGE_CAPS = ImageCaps()
IMAGE_FRAMES = (b"i", b"d", b"m")


def encode_message(spec: RunSpec, limits: Limits) -> bytes:
    """The run message: program, inputs, environment and per-run limits."""
    message = {
        "language": spec.language,
        "code": spec.code,
        "interpreter_mode": spec.interpreter_mode,
        "files": {name: base64.b64encode(data).decode() for name, data in spec.files.items()},
        "stdin": base64.b64encode(spec.stdin).decode(),
        "env": dict(spec.env),
        "wall_time_s": limits.wall_time_s,
        "cpu_time_s": limits.cpu_time_s,
        "max_output_bytes": limits.max_output_bytes,
        "max_file_size_bytes": limits.max_file_size_mib * 1024 * 1024,
        "max_open_files": limits.max_open_files,
        "max_images": IMAGE_CAPS.max_count,
        "max_image_bytes": IMAGE_CAPS.max_image_bytes,
    }
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body


class _Framer:
    """Split a byte stream into length-prefixed frames as bytes arrive."""

    def __init__(self, header: str) -> None:
        self._header = struct.Struct(header)
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[tuple[int | bytes, bytes]]:
        self._buffer += data
        size = self._header.size
        while len(self._buffer) >= size:
            kind, length = self._unpack(bytes(self._buffer[:size]))
            if length > MAX_FRAME:
                raise SandboxFailed(f"sandbox sent an oversized frame ({length} bytes)")
            if len(self._buffer) < size + length:
                return
            payload = bytes(self._buffer[size : size + length])
            del self._buffer[: size + length]
            yield kind, payload

    def _unpack(self, header: bytes) -> tuple[int | bytes, int]:
        raise NotImplementedError


class DockerDemux(_Framer):
    """Docker's attach multiplexing: stream byte, 3 zero bytes, 4-byte length."""

    def __init__(self) -> None:
        super().__init__(">B3xI")

    def _unpack(self, header: bytes) -> tuple[int, int]:
        stream, length = self._header.unpack(header)
        return stream, length


class DriverFrames(_Framer):
    """The supervisor's frames on its stdout: kind byte and 4-byte length."""

    def __init__(self) -> None:
        super().__init__(">cI")

    def _unpack(self, header: bytes) -> tuple[bytes, int]:
        kind, length = self._header.unpack(header)
        if kind not in (b"o", b"e", b"s", b"r", *IMAGE_FRAMES):
            raise SandboxFailed(f"sandbox sent an unknown frame kind {kind!r}")
        return kind, length


class ProposedImages:
    """The supervisor's image frames, gathered for the host's decision (`images()`).

    What it buffers is bounded by IMAGE_CAPS whatever arrives: an entry past the count cap,
    more bytes than an entry announced or than one image may have, or a malformed header is
    a broken sandbox (SandboxFailed), as a forged frame is.
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
                raise SandboxFailed("sandbox sent more image bytes than it announced")
            self._body += body
            self._want -= len(body)
            if not self._want:
                self._close_entry()
        else:
            self._settle()
            try:
                self._more = int(body)
            except ValueError as exc:
                raise SandboxFailed("sandbox sent a malformed image count") from exc

    def images(self) -> ImageSet:
        """The host's decision on what was proposed."""
        self._settle()
        return accept(self._candidates, more=max(self._more, 0), caps=self._caps)

    def _entry(self, body: bytes) -> None:
        self._settle()
        try:
            header = json.loads(body)
            name = os.fsdecode(bytes.fromhex(header["name"]))
            regular, size, sent = bool(header["regular"]), int(header["size"]), int(header["sent"])
        except (ValueError, KeyError, TypeError) as exc:
            raise SandboxFailed("sandbox sent a malformed image header") from exc
        if len(self._candidates) >= self._caps.max_count:
            raise SandboxFailed("sandbox proposed more images than the count cap")
        if not 0 <= sent <= self._caps.max_image_bytes or (sent and not regular):
            raise SandboxFailed("sandbox proposed an image past the per-image cap")
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
            raise SandboxFailed("sandbox sent fewer image bytes than it announced")
