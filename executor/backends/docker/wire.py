"""The bytes between DockerBackend and the in-container supervisor (driver.py): the frames of
executor/policy/wire.py over Docker's attach stream.

In: one b"j" frame on the container's stdin, the run message (JSON).
Out: Docker's attach stream multiplexes the supervisor's stdout and stderr (8-byte headers,
DockerDemux: the transport only); inside its stdout, the supervisor writes wire frames: b"r"
ready (sent once, before the message), b"o" program stdout, b"e" program stderr, then the output
folder's entries as proposed (b"i", b"d", b"m"), b"s" the final status (JSON,
wire.CONTAINER_STATUS).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterator

from executor.limits import Limits
from executor.policy import wire
from executor.spec import RunSpec

# Docker's own frames carry the supervisor's, at most 64 KiB of output or an image chunk each.
MAX_FRAME = 1 << 20
DOCKER_STDOUT, DOCKER_STDERR = 1, 2
# A bash program reaches the kernel as one argv string, which Linux caps at 128 KiB.
MAX_CODE_BYTES = 120 * 1024
# What a freshly started supervisor writes first: Docker's stdout header, then a b"r" frame.
READY = struct.pack(">B3xI", DOCKER_STDOUT, len(wire.READY)) + wire.READY
# What the supervisor proposes of the output folder at most; the host decides (executor/images.py).
IMAGE_CAPS = wire.IMAGE_CAPS
# The supervisor's reads of the program's pipes are this large at most (driver.READ_SIZE).
OUTPUT_FRAME = 65536


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
    return wire.json_frame(b"j", message)


def driver_frames() -> wire.FrameReader:
    """A reader of the supervisor's frames on its stdout, for one run."""
    caps = {b"r": 0, b"o": OUTPUT_FRAME, b"e": OUTPUT_FRAME, b"s": wire.SMALL_FRAME}
    return wire.FrameReader({**caps, **wire.IMAGE_FRAME_CAPS})


def proposed_images() -> wire.ProposedImages:
    return wire.ProposedImages(IMAGE_CAPS)


class DockerDemux:
    """Docker's attach multiplexing: stream byte, 3 zero bytes, 4-byte length, payload."""

    _header = struct.Struct(">B3xI")

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        self._buffer += data
        size = self._header.size
        while len(self._buffer) >= size:
            stream, length = self._header.unpack_from(self._buffer)
            if length > MAX_FRAME:
                raise wire.WireError(f"sandbox sent an oversized Docker frame ({length} bytes)")
            if len(self._buffer) < size + length:
                return
            payload = bytes(self._buffer[size : size + length])
            del self._buffer[: size + length]
            yield stream, payload
