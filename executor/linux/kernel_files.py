"""Small files the kernel makes (cgroup controls, /proc entries), read and written whole.

The host touches ~9 of them for every run (its placement, limits and stop counters). `open()`
adds a buffered text layer to each: an fstat, a terminal check and a seek the kernel answers
for nothing, ~5 µs more per file than these three system calls (docs/benchmarks.md).
"""

from __future__ import annotations

import os

_READ = 65536


def read_text(path: str) -> str:
    """The file's whole text (OSError as open() raises it)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    parts = []
    try:
        while part := os.read(fd, _READ):
            parts.append(part)
    finally:
        os.close(fd)
    return b"".join(parts).decode()


def write_text(path: str, text: str) -> None:
    """Write `text` to an existing file in one go; the kernel's refusal is the OSError."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        data = memoryview(text.encode())
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def nspid(pid: int) -> list[str]:
    """The process's pid in each pid namespace it is in, outermost first ([] if it is gone)."""
    try:
        status = read_text(f"/proc/{pid}/status")
    except OSError:
        return []
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            return line.split()[1:]
    return []
