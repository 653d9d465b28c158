"""The `db` kind: the code's database work stays in a transaction until Keep or Undo.

A sandboxed driver (db_driver.py) opens the connection, runs the code with a `db` object,
reports "pending" on a control socket and waits for "commit"/"rollback" (rollback by itself
after `timeout_s`). The sandbox lives until then, so its wall limit is the code's limit plus
the pending timeout.

SQLite: the database file lives in the workspace, which the run sees through the fs kind's
private copy; Keep commits and then applies the copy, Undo rolls back and discards it.
PostgreSQL: the URL is a credential (an environment variable); the sandbox reaches the server
only through a host-side relay on a unix socket (libpq's own socket-directory support, so no
in-sandbox forwarder), which connects to the URL's host under the egress address policy and
accepts exactly one connection: the driver's, made before the code runs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import queue
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from executor.kinds import netpolicy
from executor.kinds.errors import TransactionError
from executor.kinds.relay import UnixRelay
from executor.kinds.sandbox import CONTROL_DIR, Mount
from executor.limits import Limits
from executor.spec import RunSpec, validate_relative_path

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 600.0
_DRIVER = Path(__file__).with_name("db_driver.py")


@dataclass(frozen=True)
class DbTarget:
    """Where the code's `db` points: a SQLite file in the workspace, or a PostgreSQL URL."""

    sqlite_path: str = ""  # relative to the workspace, e.g. "app.db"
    postgres_url_env: str = ""  # the environment variable (credential) holding the URL

    def __post_init__(self) -> None:
        if bool(self.sqlite_path) == bool(self.postgres_url_env):
            raise TransactionError("give exactly one of sqlite_path and postgres_url_env")
        if self.sqlite_path:
            validate_relative_path(self.sqlite_path)


class DbControl:
    """The host end of one db run: control folder, control socket and (PostgreSQL) relay.

    `folder` is bind-mounted read-only at /run/undoable. Events from the driver arrive on
    `events` ({"event": "pending" | "committed" | "rolled_back", ...}).
    """

    def __init__(self, base: Path, *, allow_private: bool) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="db-", dir=base))
        self.folder.chmod(0o755)  # readable by the sandbox's unprivileged host uid
        self.allow_private = allow_private
        self.events: queue.Queue[dict] = queue.Queue()
        self._relay: UnixRelay | None = None
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.folder / "control.sock"))
        os.chmod(self.folder / "control.sock", 0o666)  # noqa: S103 - the sandbox's unprivileged uid must connect
        self._server.listen(1)
        self._conn: socket.socket | None = None
        self._connected = threading.Event()
        self._closed = threading.Event()
        threading.Thread(target=self._serve, name="undoable-db-control", daemon=True).start()

    def prepare(
        self, spec: RunSpec, limits: Limits, target: DbTarget, *, timeout_s: float
    ) -> tuple[RunSpec, Limits, list[Mount]]:
        """The driver spec, the limits stretched by the pending timeout, the control mount."""
        engine = "sqlite" if target.sqlite_path else "postgres"
        config = {
            "engine": engine,
            "sqlite_path": f"/workspace/{target.sqlite_path}" if target.sqlite_path else "",
            "url_env": target.postgres_url_env,
            "timeout_s": timeout_s,
        }
        (self.folder / "db.json").write_text(json.dumps(config))
        (self.folder / "user.py").write_text(spec.code)
        if engine == "postgres":
            self._start_relay(spec.env.get(target.postgres_url_env, ""))
        driver = dataclasses.replace(spec, code=_DRIVER.read_text(), language="python")
        # The sandbox waits for a decision; its hard wall limit must outlast the timeout.
        wall = limits.wall_time_s + timeout_s + 5
        return (
            driver,
            dataclasses.replace(limits, wall_time_s=wall),
            [Mount(self.folder, CONTROL_DIR)],
        )

    def _start_relay(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("postgres", "postgresql") or not parts.hostname:
            raise TransactionError("the database credential is not a postgresql:// URL with a host")
        host, port = parts.hostname, parts.port or 5432
        # Fail before the run if the address policy refuses the database's host.
        netpolicy.resolve(host, port, allow_private=self.allow_private)
        (self.folder / "pg").mkdir(mode=0o755)
        self._relay = UnixRelay(
            self.folder / "pg" / ".s.PGSQL.5432",
            lambda: netpolicy.connect(host, port, allow_private=self.allow_private),
        )

    def _serve(self) -> None:
        try:
            conn, _ = self._server.accept()
        except OSError:
            return
        self._conn = conn
        self._connected.set()
        for line in conn.makefile("r", encoding="utf-8"):
            try:
                self.events.put(dict(json.loads(line)))
            except ValueError:
                logger.info("db driver sent a malformed event")
        self.events.put({"event": "closed"})
        self._closed.set()

    def decide(self, *, commit: bool) -> None:
        """Tell the waiting driver to commit (Keep) or roll back (Undo)."""
        if not self._connected.is_set() or self._conn is None:
            raise TransactionError("the database driver is not connected")
        try:
            self._conn.sendall(b"commit\n" if commit else b"rollback\n")
        except OSError as exc:
            raise TransactionError(f"the database driver is gone: {exc}") from exc

    @property
    def closed(self) -> bool:
        """The driver hung up (it ended, or its sandbox did)."""
        return self._closed.is_set()

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def wait_event(self, timeout_s: float | None) -> dict | None:
        try:
            return self.events.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def close(self) -> None:
        for sock in (self._server, self._conn):
            if sock is not None:
                sock.close()
        if self._relay is not None:
            self._relay.close()
        shutil.rmtree(self.folder, ignore_errors=True)
