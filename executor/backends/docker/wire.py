"""The bytes between DockerBackend and the in-container supervisor (driver.py).

In: one message on the container's stdin, a 4-byte big-endian length and JSON.
Out: Docker's attach stream multiplexes the supervisor's stdout and stderr (8-byte headers);
inside its stdout, the supervisor writes frames of 1-byte kind + 4-byte length + payload:
b"r" ready (sent once, before the message), b"o" program stdout, b"e" program stderr,
b"s" the final status (JSON).
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator

from executor.errors import SandboxFailed
from executor.limits import Limits
from executor.spec import RunSpec

# The supervisor reads 64 KiB at a time; anything far bigger is a broken or forged frame.
MAX_FRAME = 1 << 20
DOCKER_STDOUT, DOCKER_STDERR = 1, 2
# A bash program reaches the kernel as one argv string, which Linux caps at 128 KiB.
MAX_CODE_BYTES = 120 * 1024
# What a freshly started supervisor writes first: Docker's stdout header, then a b"r" frame.
READY = struct.pack(">B3xI", DOCKER_STDOUT, 5) + b"r" + struct.pack(">I", 0)


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
        if kind not in (b"o", b"e", b"s", b"r"):
            raise SandboxFailed(f"sandbox sent an unknown frame kind {kind!r}")
        return kind, length
