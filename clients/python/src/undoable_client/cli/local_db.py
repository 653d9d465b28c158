"""`undoable do --kind db --db FILE|URL`: a database of this machine for a db action.

A SQLite file is sent (a server never opens a path an HTTP caller names) into a new workspace
and the action runs on that copy. On Keep the CLI, not the server, replaces the local file:
only after checking it did not change since it was sent, with the kept copy written beside it
and renamed over it (no reader sees half a database). Discard leaves it untouched.

A database URL (PostgreSQL, MySQL or MariaDB: the server's db kind picks the engine by its
scheme) goes as a credential of that call alone (DB_CREDENTIAL): the server connects to it,
holds the transaction until Keep or Discard, and never stores it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from undoable_client.cli.config import UserError
from undoable_client.cli.local_dir import MAX_DIR_BYTES

DB_CREDENTIAL = "UNDOABLE_DB_URL"
# The schemes the server's db kind takes (executor/kinds/db_engines.py), with drivers named.
URL_SCHEMES = ("postgres", "postgresql", "mysql", "mariadb")
# Left by SQLite beside a database another program has open, or one not checkpointed: the
# file alone is not the database then.
SIDECARS = ("-wal", "-journal")


class LocalDbError(UserError):
    """A local database that cannot be sent, or kept back into."""


def is_database_url(target: str) -> bool:
    return urlsplit(target).scheme in URL_SCHEMES


def _read(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise LocalDbError(f"cannot read {path}: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise LocalDbError(f"{path} is not a regular file")
        data = handle.read(MAX_DIR_BYTES + 1)
    if len(data) > MAX_DIR_BYTES:
        raise LocalDbError(f"{path} is larger than {MAX_DIR_BYTES // 2**20} MiB: too large to send")
    return data


def replace_atomically(path: Path, data: bytes) -> None:
    """`data` becomes `path`: a fresh file beside it, with its mode, renamed over it."""
    mode = stat.S_IMODE(os.stat(path, follow_symlinks=False).st_mode)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.undoable")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb", closefd=False) as out:
            out.write(data)
            out.flush()
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        temporary.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(temporary, path)


class LocalDatabase:
    """A SQLite file sent as a db action's database, and kept back into on Keep."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.folder = path.parent
        self.name = path.name
        self.sent = ""

    def snapshot(self) -> bytes:
        for suffix in SIDECARS:
            if os.path.lexists(f"{self.path}{suffix}"):
                raise LocalDbError(
                    f"{self.path}{suffix} exists: the database is open elsewhere or not "
                    "checkpointed; close the program using it first"
                )
        return _read(self.path)

    def send(self, client: Any) -> int:
        """A new workspace holding the file; its id."""
        data = self.snapshot()
        self.sent = hashlib.sha256(data).hexdigest()
        workspace = client.workspace()
        workspace.write_file(self.name, data)
        return int(workspace.id)

    def unchanged(self) -> bool:
        return hashlib.sha256(self.snapshot()).hexdigest() == self.sent

    def keep(self, action: Any) -> list[str]:
        """Keep the action, then replace the local file with the kept one; refused (and the
        change discarded) when the file changed since it was sent."""
        if not self.unchanged():
            action.discard()
            raise LocalDbError(
                f"{self.path} changed since it was sent: the change was discarded and the "
                "file left as it is; run the command again"
            )
        action.keep()
        workspace = action.client.workspace(int(action.workspace))
        replace_atomically(self.path, workspace.read_file(self.name))
        return [self.name]
