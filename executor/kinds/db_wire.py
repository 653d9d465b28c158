"""Framed JSON messages between the web process and its db process (db_process, db_child).

A frame is a 4-byte big-endian length and that many bytes of JSON. Each side names the largest
frame it will read: a reader never allocates more than that, whatever the length says, so even
a misbehaving peer costs the reader a bounded amount of memory.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

_HEADER = struct.Struct(">I")


class WireError(Exception):
    """The peer closed the connection, or sent a frame that is too large or not JSON."""


def send(sock: socket.socket, message: dict[str, Any], max_bytes: int) -> None:
    """Send one frame; ValueError (nothing sent) when it is not JSON or over `max_bytes`, the
    peer's cap, which would otherwise end the connection."""
    data = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
    if len(data) > max_bytes:
        raise ValueError(f"a message of {len(data)} bytes is over the {max_bytes}-byte cap")
    sock.sendall(_HEADER.pack(len(data)) + data)


def receive(sock: socket.socket, max_bytes: int) -> dict[str, Any]:
    (size,) = _HEADER.unpack(_exactly(sock, _HEADER.size))
    if size > max_bytes:
        raise WireError(f"a message of {size} bytes is over the {max_bytes}-byte cap")
    try:
        message = json.loads(_exactly(sock, size))
    except (ValueError, RecursionError):
        raise WireError("a message is not JSON") from None
    if not isinstance(message, dict):
        raise WireError("a message is not a JSON object")
    return message


def _exactly(sock: socket.socket, size: int) -> bytes:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise WireError("the connection closed")
        got += n
    return bytes(buffer)
