"""The db process: one db run's session (SqliteSession, PostgresSession, MariaDbSession) in a
process of its own.

Started by executor/kinds/db_process.py without a shell, it is trusted code, but the database
work it runs is the sandboxed program's: a statement may ask SQLite for gigabytes of memory or
sort a table through temporary files. Here that costs this process, under its own limits,
and never the web process:

- memory: RLIMIT_AS, set once the modules are loaded, to what they take plus the run's allowance
  (one malloc arena, so threads do not reserve address space of their own); past it SQLite and
  Python fail their allocation and the statement ends with an error naming the limit;
- temporary files: SQLite's temp directory is the run's reservation folder, on the run's quota
  tmpfs, so a sort that spills counts against the run's disk quota, never the host's /tmp;
- life: it dies with the web process (PR_SET_PDEATHSIG, and the end of its socket), which
  rolls back everything it held: the SQLite copy is never installed, PostgreSQL ends the
  transaction with the connection.

It serves the sandbox's statements itself (a DbBroker on the run's socket, its own thread) and
the web process's requests on a socketpair (open, serve, stop, commit, rollback, close), read
and answered one at a time by another thread. The main thread only waits for the cancel
signal (Python runs signal handlers there), so a cancel reaches a statement while it runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from executor.kinds import db_wire
from executor.kinds.db_broker import DbBroker
from executor.kinds.db_mariadb import MariaDbSession, open_mariadb
from executor.kinds.db_postgres import PostgresSession, open_postgres
from executor.kinds.db_sqlite import SqliteSession, open_sqlite
from executor.kinds.db_values import Params, Reply
from executor.kinds.errors import StatementFailed, StatementRefused, TransactionError
from executor.kinds.netpolicy import EgressRefused

MAX_REQUEST_BYTES = 8 << 20  # one statement and its parameters, re-encoded by the web process
MAX_REPLY_BYTES = 32 << 20  # capped rows (max_reply_bytes) as JSON, with room for escapes
PR_SET_PDEATHSIG = 1
CANCEL_SIGNAL = signal.SIGUSR1  # from the web process: stop the running statement
_LIBPQ_OUT_OF_MEMORY = ("cannot allocate memory for input buffer", "out of memory for query result")
_ERRORS = (
    (StatementRefused, "refused"),
    (StatementFailed, "failed"),
    (TransactionError, "transaction"),
    (EgressRefused, "egress"),
)


def main() -> None:
    server = _Server(socket.socket(fileno=int(sys.argv[1])))
    # Before anything else: a cancel may come as soon as the session is open.
    signal.signal(CANCEL_SIGNAL, lambda signum, frame: server.cancel())
    _die_with(parent=int(sys.argv[2]))
    threading.Thread(target=server.serve, name="undoable-db-serve", daemon=True).start()
    while True:  # this thread only runs the cancel handler: Python runs handlers here
        signal.pause()


def _die_with(parent: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        os._exit(3)
    if os.getppid() != parent:  # the web process died before the line above
        os._exit(0)


def _parent_gone() -> None:
    """The web process closed the socket or died: end at once. Nothing was committed, so the
    transaction ends with this process (the SQLite copy is never installed; PostgreSQL rolls
    back when the connection drops)."""
    os._exit(0)


class _Server:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._session: _Explained | None = None
        self._limits: dict[str, Any] = {}
        self._broker: DbBroker | None = None

    def cancel(self) -> None:
        session = self._session
        if session is not None:
            with contextlib.suppress(Exception):
                session.cancel()

    def serve(self) -> None:
        """Answer requests, one at a time, until the web process closes the socket or dies."""
        while True:
            try:
                message = db_wire.receive(self._sock, MAX_REQUEST_BYTES)
            except (db_wire.WireError, OSError):
                _parent_gone()
                return
            try:
                reply = self._answer(message)
            except MemoryError:
                reply = {"ok": False, "kind": "failed", "error": self._memory_message()}
            try:
                self._send(reply)
            except OSError:
                _parent_gone()
                return
            if message.get("op") == "close":
                os._exit(0)

    def _send(self, reply: dict[str, Any]) -> None:
        try:
            db_wire.send(self._sock, reply, MAX_REPLY_BYTES)
        except (MemoryError, ValueError) as exc:
            failed = {"ok": False, "kind": "failed", "error": f"the reply cannot be sent: {exc}"}
            db_wire.send(self._sock, failed, MAX_REPLY_BYTES)

    def _answer(self, message: dict[str, Any]) -> dict[str, Any]:
        op = message.get("op")
        try:
            if op == "open":
                self._open(message)
                return {"ok": True}
            session = self._session
            if session is None:
                raise TransactionError("the database session is not open")
            if op == "serve":
                self._broker = DbBroker(Path(message["path"]), session, uid=message["uid"])
            elif op == "stop":
                return {"ok": True, "log": self._stop_serving()}
            elif op == "execute":
                return session.execute(message["sql"], message.get("params")).message()
            elif op == "executemany":
                return session.executemany(message["sql"], message["seq"]).message()
            elif op == "rehearsal_begin":
                session.rehearsal_begin()
            elif op == "rehearsal_verdict":
                return {"ok": True, "verdict": session.rehearsal_verdict()}
            elif op == "commit":
                session.commit()
            elif op == "rollback":
                session.rollback()
            elif op == "rollback_checked":
                return {"ok": True, "digests": session.rollback_checked()}
            elif op == "close":
                self._stop_serving()
                session.close()
            else:
                raise TransactionError(f"unknown operation {op!r}")
            return {"ok": True}
        except (StatementRefused, StatementFailed, TransactionError, EgressRefused) as exc:
            kind = next(name for cls, name in _ERRORS if isinstance(exc, cls))
            return {"ok": False, "kind": kind, "error": str(exc)}

    def _stop_serving(self) -> dict[str, Any]:
        broker, self._broker = self._broker, None
        if broker is None:
            return {"entries": [], "total": 0, "refused": 0}
        broker.stop()
        log = broker.log
        return {
            "entries": log.entries,
            "total": log.total,
            "refused": log.refused,
            "stopped": log.stopped,
        }

    def _open(self, message: dict[str, Any]) -> None:
        if self._session is not None:
            raise TransactionError("the database session is already open")
        self._limits = message
        if message.get("temp_dir"):
            _place_sqlite_temp_files(str(message["temp_dir"]))
        if message.get("memory_bytes"):
            _limit_memory(int(message["memory_bytes"]))
        session: SqliteSession | PostgresSession | MariaDbSession
        if message["engine"] == "sqlite":
            end = time.monotonic() + float(message["wall_time_s"])
            session = open_sqlite(
                Path(message["path"]),
                max_bytes=int(message["max_bytes"]),
                deadline=lambda: end,
            )
        elif message["engine"] == "postgres":
            session = open_postgres(
                str(message["url"]),
                allow_private=bool(message["allow_private"]),
                statement_timeout_s=float(message["wall_time_s"]),
                repeatable_read=bool(message.get("repeatable_read")),
            )
        elif message["engine"] == "mariadb":
            session = open_mariadb(
                str(message["url"]),
                allow_private=bool(message["allow_private"]),
                statement_timeout_s=float(message["wall_time_s"]),
            )
        else:
            raise TransactionError(f"unknown database engine {message['engine']!r}")
        self._session = _Explained(session, self._explain)

    def _explain(self, error: str) -> str:
        """The database's words, and the run's limit they mean."""
        if _out_of_memory(error):
            return self._memory_message()
        if "disk is full" in error and self._limits.get("quota_bytes"):
            return (
                f"{error}: the database went past the run's disk limit (the database file may "
                f"grow to {_mib(self._limits['max_bytes'])}; it, its journal and SQLite's "
                f"temporary files share a quota of {_mib(self._limits['quota_bytes'])})"
            )
        return error

    def _memory_message(self) -> str:
        limit = self._limits.get("memory_bytes")
        return (
            "out of memory: the statement went past the database process's memory limit "
            f"({_mib(limit) if limit else 'none set'})"
        )


def _out_of_memory(error: str) -> bool:
    """Whether a statement's error is this process's failed allocation: Python's MemoryError
    (SQLite's SQLITE_NOMEM becomes one) or libpq's words for a result it could not buffer. A
    PostgreSQL server's own "out of memory" is the server's, and stays as it is."""
    return (
        error == "MemoryError"
        or error.endswith(": MemoryError")
        or any(words in error for words in _LIBPQ_OUT_OF_MEMORY)
    )


class _Explained:
    """The session, with each failed statement's message naming the limit it ran into: the
    broker's statements (from the sandbox) and the web process's alike."""

    def __init__(
        self,
        session: SqliteSession | PostgresSession | MariaDbSession,
        explain: Callable[[str], str],
    ) -> None:
        self.engine = session.engine
        self._session, self._explain = session, explain

    def execute(self, sql: str, params: Params = None) -> Reply:
        return self._explained(lambda: self._session.execute(sql, params))

    def executemany(self, sql: str, seq: list[list | dict]) -> Reply:
        return self._explained(lambda: self._session.executemany(sql, seq))

    def _explained(self, statement: Callable[[], Reply]) -> Reply:
        try:
            return statement()
        except StatementFailed as exc:
            # the same class: a RunStopped stays one, for the broker's statement log
            raise type(exc)(self._explain(str(exc))) from None
        except MemoryError:
            raise StatementFailed(self._explain("MemoryError")) from None

    def commit(self) -> None:
        self._session.commit()

    def rollback(self) -> None:
        self._session.rollback()

    def close(self) -> None:
        self._session.close()

    def rollback_checked(self) -> dict[str, Any] | None:
        """PostgreSQL: roll back and prove it (touched tables' digests); the others: None,
        and the close that follows rolls back."""
        if isinstance(self._session, PostgresSession):
            return self._session.rollback_checked()
        return None

    def rehearsal_begin(self) -> None:
        self._rehearsable().rehearsal_begin()

    def rehearsal_verdict(self) -> dict[str, Any]:
        return self._rehearsable().rehearsal_verdict()

    def _rehearsable(self) -> SqliteSession | PostgresSession:
        if isinstance(self._session, MariaDbSession):
            raise TransactionError("a rehearsal reads SQLite and PostgreSQL states, not MariaDB's")
        return self._session

    def cancel(self) -> None:
        self._session.cancel()


def _place_sqlite_temp_files(folder: str) -> None:
    """Every temporary file of this process's SQLite (sorts, temp tables) goes into `folder`.

    The pragma sets the library's process-wide temp directory, ahead of SQLITE_TMPDIR, TMPDIR
    and /var/tmp; read back, so a library built without it fails the run instead of spilling
    onto the host's disk.
    """
    conn = sqlite3.connect(":memory:")
    try:
        quoted = folder.replace("'", "''")
        conn.execute(f"PRAGMA temp_store_directory = '{quoted}'")
        (placed,) = conn.execute("PRAGMA temp_store_directory").fetchone()
    finally:
        conn.close()
    if placed != folder:
        raise TransactionError("SQLite's temporary files cannot be placed in the run's quota")


def _limit_memory(allowance: int) -> None:
    """Cap the address space at what this process uses now (interpreter, modules, the worker
    thread's stack) plus `allowance`."""
    with open("/proc/self/status") as status:
        size_kib = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
    cap = size_kib * 1024 + allowance
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _mib(size: object) -> str:
    return f"{int(size) // (1 << 20)} MiB"  # type: ignore[call-overload]


if __name__ == "__main__":
    main()
