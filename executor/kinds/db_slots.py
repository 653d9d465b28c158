"""How many db processes may live at once: per host, and per person.

Every db run holds one process (executor/kinds/db_process.py) from its start until Keep, Discard
or the pending timeout, so these caps bound the processes and the open transactions together.
A slot is an exclusive flock on one of N files in a folder shared by every web and worker
process of the host: the kernel drops it when its holder closes it or dies, so a crashed
server never leaks a slot, and no count has to be repaired.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from executor.kinds.errors import DbProcessesFull

DEFAULT_PER_HOST = 32
DEFAULT_PER_USER = 4
_SLOT_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class DbCaps:
    """The slot folder (one per host) and the caps of db processes held at once."""

    folder: Path
    per_host: int = DEFAULT_PER_HOST
    per_user: int = DEFAULT_PER_USER


class Slots:
    """The held slots of one db run; release() (or the process's death) frees them."""

    def __init__(self, fds: list[int]) -> None:
        self._fds = fds

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)


def acquire(caps: DbCaps, owner: str) -> Slots:
    """One slot of `owner`'s and one of the host's; DbProcessesFull names the cap that is full."""
    user_folder = caps.folder / "users" / hashlib.sha256(owner.encode()).hexdigest()[:32]
    held: list[int] = []
    try:
        held.append(
            _take(
                user_folder,
                caps.per_user,
                f"at most {caps.per_user} database changes per person may be running or "
                "waiting for Keep or Discard at once; keep or discard one first",
            )
        )
        held.append(
            _take(
                caps.folder / "host",
                caps.per_host,
                f"at most {caps.per_host} database changes may be running or waiting for Keep "
                "or Undo at once on this server; try again once one is settled",
            )
        )
    except BaseException:
        Slots(held).release()
        raise
    return Slots(held)


def _take(folder: Path, count: int, full: str) -> int:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for index in range(count):
        fd = os.open(folder / str(index), _SLOT_FLAGS, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        return fd
    raise DbProcessesFull(full)


__all__ = ["DbCaps", "Slots", "acquire"]
