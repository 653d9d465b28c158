"""The host's SQLite session of a db run: a private copy of the file, SQLite's own authorizer.

Keep is `commit()`, Undo is `rollback()`: the host's calls, never the program's.
"""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from executor.kinds.db_digest import (
    DbState,
    compare,
    shape_changes,
    sqlite_shapes,
    sqlite_state,
    sqlite_virtual_shadows,
)
from executor.kinds.db_values import (
    Params,
    Reply,
    Rows,
    driver_params,
    guarded,
)
from executor.kinds.errors import StatementFailed, StatementRefused, TransactionError
from executor.kinds.sql_policy import sqlite_authorize

_TIME_UP = "the run's time is up"
# Actions whose table (arg1, or arg2 for these) a statement may write rows or schema of.
_WRITES_ARG1 = {
    sqlite3.SQLITE_INSERT,
    sqlite3.SQLITE_UPDATE,
    sqlite3.SQLITE_DELETE,
    sqlite3.SQLITE_CREATE_TABLE,
    sqlite3.SQLITE_DROP_TABLE,
    sqlite3.SQLITE_CREATE_VTABLE,
    sqlite3.SQLITE_DROP_VTABLE,
}
_WRITES_ARG2 = {
    sqlite3.SQLITE_ALTER_TABLE,
    sqlite3.SQLITE_CREATE_INDEX,
    sqlite3.SQLITE_DROP_INDEX,
    sqlite3.SQLITE_CREATE_TRIGGER,
    sqlite3.SQLITE_DROP_TRIGGER,
}
_CANCEL_WAIT_S = 5.0
_T = TypeVar("_T")


def open_sqlite(
    path: Path,
    *,
    max_bytes: int,
    deadline: Callable[[], float] | None = None,
    max_rows: int = 10_000,
    max_reply_bytes: int = 4 << 20,
) -> SqliteSession:
    """A session on the host's private copy of a SQLite file, inside BEGIN IMMEDIATE.

    `max_bytes` caps the file (writing past it fails "database or disk is full"); `deadline`
    returns the time.monotonic() instant after which a running statement is interrupted.
    """
    return SqliteSession(path, max_bytes, deadline, max_rows, max_reply_bytes)


class SqliteSession:
    engine = "sqlite"

    def __init__(
        self,
        path: Path,
        max_bytes: int,
        deadline: Callable[[], float] | None,
        max_rows: int,
        max_reply_bytes: int,
    ) -> None:
        self._deadline = deadline
        self._max_rows, self._max_reply_bytes = max_rows, max_reply_bytes
        # The thread running the host's own statements, which pass the authorizer and are
        # never interrupted. A thread, not a flag: Undo may come from another thread while a
        # statement of the program still runs (cancel() is about to end it).
        self._host: int | None = threading.get_ident()
        self._refusal: str | None = None
        self._timed_out = False
        self._idle = threading.Event()  # clear while a statement of the program runs
        self._idle.set()
        self._broken: str | None = None
        self._savepoint = f"undoable_{secrets.token_hex(8)}"
        # Every main-database table the program's statements (and the triggers they fire,
        # compiled with them) may write, as SQLite's authorizer names them while preparing.
        self._written: set[str] = set()
        self._begun: DbState | None = None  # a rehearsal's start: shapes and counters
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._conn = conn
        try:
            conn.text_factory = _decode_text
            conn.execute("PRAGMA trusted_schema=OFF")
            conn.execute("PRAGMA journal_mode=DELETE")
            page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
            pages = max(1, max_bytes // page_size)
            conn.execute(f"PRAGMA main.max_page_count={pages:d}")
            conn.execute(f"PRAGMA temp.max_page_count={pages:d}")
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max(1 << 20, min(max_bytes, 64 << 20)))
            conn.execute("BEGIN IMMEDIATE")
            conn.set_authorizer(self._authorize)
            conn.set_progress_handler(self._progress, 1000)
        except sqlite3.Error as exc:
            conn.close()
            raise TransactionError(f"cannot open the SQLite database: {exc}") from None
        self._host = None

    def _authorize(
        self, action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None
    ) -> int:
        if self._host == threading.get_ident():
            return sqlite3.SQLITE_OK
        if db != "temp":  # also when refused: a superset never hides a change
            if action in _WRITES_ARG1 and arg1:
                self._written.add(arg1)
            elif action in _WRITES_ARG2 and arg2:
                self._written.add(arg2)
        why = sqlite_authorize(action, arg1, arg2)
        if why is None:
            return sqlite3.SQLITE_OK
        self._refusal = why if trigger is None else f"{why} (in trigger or view {trigger})"
        return sqlite3.SQLITE_DENY

    def _progress(self) -> int:
        if self._host == threading.get_ident():
            return 0
        if self._deadline is not None and time.monotonic() >= self._deadline():
            self._timed_out = True
            return 1
        return 0

    def cancel(self) -> None:
        """End the statement in flight, if any; it fails and the transaction stays usable.

        Callable from any thread (so is SQLite's interrupt). An interrupt that comes before the
        statement has started is lost, so it is repeated while the statement is in flight, for
        at most _CANCEL_WAIT_S.
        """
        end = time.monotonic() + _CANCEL_WAIT_S
        while not self._idle.is_set() and time.monotonic() < end:
            with contextlib.suppress(sqlite3.ProgrammingError):  # closed: nothing runs
                self._conn.interrupt()
            self._idle.wait(0.05)

    def execute(self, sql: str, params: Params = None) -> Reply:
        return guarded(
            lambda: self._statement(sql, lambda cur: cur.execute(sql, driver_params(params) or ()))
        )

    def executemany(self, sql: str, seq: list[list | dict]) -> Reply:
        def run(cur: sqlite3.Cursor) -> object:
            if not isinstance(seq, list | tuple):
                raise StatementFailed("executemany needs a list of parameter sets")
            return cur.executemany(sql, [driver_params(params) or () for params in seq])

        return guarded(lambda: self._statement(sql, run))

    def _statement(self, sql: str, run: Callable[[sqlite3.Cursor], object]) -> Reply:
        self._usable()
        if not isinstance(sql, str) or "\x00" in sql:
            raise StatementRefused("the statement must be text without NUL characters")
        if self._deadline is not None and time.monotonic() >= self._deadline():
            raise StatementFailed(f"interrupted: {_TIME_UP}")
        self._refusal, self._timed_out = None, False
        self._host_sql(f"SAVEPOINT {self._savepoint}")
        cur = self._conn.cursor()
        self._idle.clear()
        try:
            run(cur)
            reply = self._reply(cur)
        except Exception as exc:
            error = self._error(exc)
            cur.close()
            self._idle.set()
            self._undo_statement()
            raise error from None
        cur.close()
        self._idle.set()
        try:
            self._host_sql(f"RELEASE {self._savepoint}")
        except sqlite3.Error:
            self._broken = "the transaction ended outside Undoable's control; the run stops"
            raise StatementFailed(self._broken) from None
        return reply

    def _reply(self, cur: sqlite3.Cursor) -> Reply:
        if cur.description is None:
            return Reply(None, [], cur.rowcount, False, cur.lastrowid)
        rows = Rows(self._max_rows, self._max_reply_bytes)
        while not rows.truncated:
            batch = cur.fetchmany(256)
            if not batch:
                break
            for row in batch:
                rows.add(row)
        columns = [str(d[0]) for d in cur.description]
        return Reply(columns, rows.rows, rows.seen, rows.truncated, cur.lastrowid)

    def _error(self, exc: Exception) -> StatementRefused | StatementFailed:
        if self._refusal is not None:
            return StatementRefused(self._refusal)
        if self._timed_out:
            return StatementFailed(f"interrupted: {_TIME_UP}")
        message = str(exc) or type(exc).__name__
        if isinstance(exc, StatementRefused | StatementFailed):
            return exc
        if "one statement at a time" in message:
            return StatementRefused("one statement per call: send the statements one at a time")
        return StatementFailed(message)

    def _undo_statement(self) -> None:
        if not self._conn.in_transaction:
            self._broken = (
                "the database rolled back the whole transaction (ON CONFLICT ROLLBACK, "
                "RAISE(ROLLBACK), an interrupt or a full disk); this run's changes are gone"
            )
            return
        try:
            self._host_sql(f"ROLLBACK TO {self._savepoint}")
            self._host_sql(f"RELEASE {self._savepoint}")
        except sqlite3.Error as exc:
            self._broken = f"the transaction could not be recovered: {exc}"

    def _host_sql(self, sql: str) -> None:
        self._host = threading.get_ident()
        try:
            self._conn.execute(sql).close()
        finally:
            self._host = None

    def _usable(self) -> None:
        if self._broken is not None:
            raise StatementFailed(self._broken)
        if not self._conn.in_transaction:
            raise StatementFailed("the transaction has ended")

    def rehearsal_begin(self) -> None:
        """Note the state a rehearsal starts from: every table's shape and the counters (a
        few catalog rows; the rows themselves are read at the verdict, of the tables touched)."""
        self._usable()
        self._begun = self._read(lambda: sqlite_state(self._conn, rows_of=set()))

    def rehearsal_verdict(self) -> dict[str, Any]:
        """Compare the state now with the one at rehearsal_begin() and end the transaction
        (rolled back): db_digest.compare's verdict.

        The rows are read only of the tables the programs touched: those the authorizer saw
        their statements (and the triggers those fire) write, and any whose shape moved. First
        as they stand now; then the transaction is rolled back, which gives back the copy as
        it was at the start (a private file nobody else writes), and the same tables are read
        again. SQLite's foreign-key actions, which write tables without naming them, never
        run: `PRAGMA foreign_keys` stays off (sql_policy)."""
        self._usable()
        begun = self._begun
        if begun is None:
            raise TransactionError("the rehearsal's start was not noted")
        shapes_now = self._read(lambda: sqlite_shapes(self._conn))
        touched = self._written | shape_changes(_shapes(begun), shapes_now)
        touched |= self._read(lambda: sqlite_virtual_shadows(self._conn, touched))
        after = self._read(lambda: sqlite_state(self._conn, rows_of=touched))
        self.rollback()
        before = self._read(lambda: sqlite_state(self._conn, rows_of=touched))
        if _shapes(before) != _shapes(begun) or before.counters != begun.counters:
            raise TransactionError("after the rollback the database is not as the rehearsal began")
        return compare(before, after)

    def _read(self, reading: Callable[[], _T]) -> _T:
        """A read of the state by the host: past the authorizer, never interrupted, its text
        as bytes (exact, whatever the encoding)."""
        self._host = threading.get_ident()
        self._conn.text_factory = bytes
        try:
            return reading()
        except sqlite3.Error as exc:
            raise TransactionError(f"the database's state cannot be read: {exc}") from None
        finally:
            self._conn.text_factory = _decode_text
            self._host = None

    def commit(self) -> None:
        if self._broken is not None or not self._conn.in_transaction:
            raise TransactionError(self._broken or "the transaction has already ended")
        self._end(self._conn.commit)

    def rollback(self) -> None:
        self._end(self._conn.rollback)

    def _end(self, action: Callable[[], None]) -> None:
        self._host = threading.get_ident()
        self._deadline = None
        try:
            action()
        except sqlite3.Error as exc:
            raise TransactionError(f"SQLite: {exc}") from None
        finally:
            self._broken = self._broken or "the transaction has ended"

    def close(self) -> None:
        try:
            if self._conn.in_transaction:
                self.rollback()
        finally:
            self._conn.close()


def _shapes(state: DbState) -> dict[str, str]:
    return {name: table.schema for name, table in state.tables.items()}


def _decode_text(data: bytes) -> str:
    return data.decode("utf-8", "replace")
