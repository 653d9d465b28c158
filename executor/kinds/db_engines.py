"""The host side of a db run: one database session whose transaction only the host ends.

The sandboxed program proposes one statement per call; a session checks it (sql_policy: the
PostgreSQL parser, SQLite's authorizer), runs it inside a savepoint so a failing statement
leaves the transaction usable, and answers with capped, JSON-safe rows. Keep is `commit()`,
Undo is `rollback()`; both are the host's calls, never the program's. Nothing but
StatementRefused / StatementFailed leaves `execute`, whatever text and parameters arrive.
"""

from __future__ import annotations

import base64
import datetime
import math
import os
import secrets
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Protocol

import psycopg
from psycopg import pq
from psycopg._queries import (  # psycopg>=3.2,<3.4; test_db_engines fails loudly if they move
    MAX_CACHED_STATEMENT_LENGTH,
    PostgresQuery,
    _query2pg,
    _query2pg_nocache,
)
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.string import TextLoader

from executor.kinds import netpolicy
from executor.kinds.errors import StatementFailed, StatementRefused, TransactionError
from executor.kinds.sql_policy import check_postgres, sqlite_authorize

JsonValue = None | bool | int | float | str | dict | list  # bytes travel as {"$bytes": b64}
Params = list | dict | None


@dataclass(frozen=True)
class Reply:
    columns: list[str] | None  # None for statements that return no rows
    rows: list[list[JsonValue]]
    rowcount: int
    truncated: bool  # more rows existed than max_rows / max_reply_bytes allowed
    lastrowid: int | None = None


class DbSession(Protocol):
    engine: str  # "sqlite" | "postgres"

    def execute(self, sql: str, params: Params = None) -> Reply: ...

    def executemany(self, sql: str, seq: list[list | dict]) -> Reply: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def close(self) -> None: ...


# Values ---------------------------------------------------------------------------------------


def to_json(value: object) -> tuple[JsonValue, int]:
    """A JSON-safe form of a database value and roughly how many bytes it costs encoded."""
    if value is None or isinstance(value, bool):
        return value, 5
    if isinstance(value, int):
        return value, 20
    if isinstance(value, float):
        return (value, 24) if math.isfinite(value) else (str(value), 10)
    if isinstance(value, str):
        return value, len(value) + 2
    if isinstance(value, bytes | bytearray | memoryview):
        encoded = base64.b64encode(bytes(value)).decode("ascii")
        return {"$bytes": encoded}, len(encoded) + 14
    if isinstance(value, list | tuple):  # arrays (PostgreSQL caps their dimensions) and records
        items = [to_json(item) for item in value]
        return [item for item, _ in items], sum(size for _, size in items) + 2
    text = value.isoformat() if isinstance(value, datetime.date | datetime.time) else str(value)
    return text, len(text) + 2


def from_json(value: object) -> object:
    """A parameter as the program sent it, with {"$bytes": b64} back as bytes."""
    if isinstance(value, dict):
        if set(value) == {"$bytes"} and isinstance(value["$bytes"], str):
            return base64.b64decode(value["$bytes"], validate=True)
        raise StatementFailed("a parameter may be null, a number, text, a list or bytes")
    if isinstance(value, list):
        return [from_json(item) for item in value]
    return value


def _params(params: Params) -> Sequence[object] | dict[str, object] | None:
    if params is None:
        return None
    if isinstance(params, dict):
        return {str(key): from_json(item) for key, item in params.items()}
    if isinstance(params, list | tuple):
        return [from_json(item) for item in params]
    raise StatementFailed("parameters must be a list or an object")


class _Rows:
    """Rows kept for the reply: at most max_rows, at most max_bytes of encoded values."""

    def __init__(self, max_rows: int, max_bytes: int) -> None:
        self.max_rows, self.max_bytes = max_rows, max_bytes
        self.rows: list[list[JsonValue]] = []
        self.seen = 0
        self.size = 0
        self.truncated = False

    def add(self, row: Iterable[object]) -> None:
        self.seen += 1
        if self.truncated:
            return
        if len(self.rows) >= self.max_rows:
            self.truncated = True
            return
        values = [to_json(value) for value in row]
        size = sum(cost for _, cost in values) + 2
        if self.size + size > self.max_bytes:
            self.truncated = True
            return
        self.size += size
        self.rows.append([value for value, _ in values])


def _guarded(call: Callable[[], Reply]) -> Reply:
    """Only the two policy errors leave a statement call, whatever the program sent."""
    try:
        return call()
    except (StatementRefused, StatementFailed):
        raise
    except Exception as exc:  # untrusted input: a surprise here is the statement's failure
        raise StatementFailed(f"the statement could not run: {type(exc).__name__}") from None


# SQLite ---------------------------------------------------------------------------------------


def open_sqlite(
    path: Path,
    *,
    max_bytes: int,
    deadline: Callable[[], float] | None = None,
    max_rows: int = 10_000,
    max_reply_bytes: int = 4 << 20,
) -> DbSession:
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
        self._host = True  # the host's own statements pass the authorizer
        self._refusal: str | None = None
        self._timed_out = False
        self._broken: str | None = None
        self._savepoint = f"undoable_{secrets.token_hex(8)}"
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
        self._host = False

    def _authorize(
        self, action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None
    ) -> int:
        if self._host:
            return sqlite3.SQLITE_OK
        why = sqlite_authorize(action, arg1, arg2)
        if why is None:
            return sqlite3.SQLITE_OK
        self._refusal = why if trigger is None else f"{why} (in trigger or view {trigger})"
        return sqlite3.SQLITE_DENY

    def _progress(self) -> int:
        if self._deadline is not None and time.monotonic() >= self._deadline():
            self._timed_out = True
            return 1
        return 0

    def execute(self, sql: str, params: Params = None) -> Reply:
        return _guarded(
            lambda: self._statement(sql, lambda cur: cur.execute(sql, _params(params) or ()))
        )

    def executemany(self, sql: str, seq: list[list | dict]) -> Reply:
        def run(cur: sqlite3.Cursor) -> object:
            if not isinstance(seq, list | tuple):
                raise StatementFailed("executemany needs a list of parameter sets")
            return cur.executemany(sql, [_params(params) or () for params in seq])

        return _guarded(lambda: self._statement(sql, run))

    def _statement(self, sql: str, run: Callable[[sqlite3.Cursor], object]) -> Reply:
        self._usable()
        if not isinstance(sql, str) or "\x00" in sql:
            raise StatementRefused("the statement must be text without NUL characters")
        if self._deadline is not None and time.monotonic() >= self._deadline():
            raise StatementFailed("interrupted: the run's time is up")
        self._refusal, self._timed_out = None, False
        self._host_sql(f"SAVEPOINT {self._savepoint}")
        cur = self._conn.cursor()
        try:
            run(cur)
            reply = self._reply(cur)
        except Exception as exc:
            error = self._error(exc)
            cur.close()
            self._undo_statement()
            raise error from None
        cur.close()
        try:
            self._host_sql(f"RELEASE {self._savepoint}")
        except sqlite3.Error:
            self._broken = "the transaction ended outside Undoable's control; the run stops"
            raise StatementFailed(self._broken) from None
        return reply

    def _reply(self, cur: sqlite3.Cursor) -> Reply:
        if cur.description is None:
            return Reply(None, [], cur.rowcount, False, cur.lastrowid)
        rows = _Rows(self._max_rows, self._max_reply_bytes)
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
            return StatementFailed("interrupted: the run's time is up")
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
        self._host = True
        try:
            self._conn.execute(sql).close()
        finally:
            self._host = False

    def _usable(self) -> None:
        if self._broken is not None:
            raise StatementFailed(self._broken)
        if not self._conn.in_transaction:
            raise StatementFailed("the transaction has ended")

    def commit(self) -> None:
        if self._broken is not None or not self._conn.in_transaction:
            raise TransactionError(self._broken or "the transaction has already ended")
        self._end(self._conn.commit)

    def rollback(self) -> None:
        self._end(self._conn.rollback)

    def _end(self, action: Callable[[], None]) -> None:
        self._host = True
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


def _decode_text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


# PostgreSQL -----------------------------------------------------------------------------------

# Only these URL parts are honoured: the rest (service files, client certificates, options)
# would make the host's libpq read host files or change how statements are lexed.
_URL_KEYS = {"host", "port", "dbname", "user", "password", "sslmode", "connect_timeout"}


def open_postgres(
    url: str,
    *,
    allow_private: bool,
    statement_timeout_s: float,
    max_rows: int = 10_000,
    max_reply_bytes: int = 4 << 20,
) -> DbSession:
    """A session on a PostgreSQL server, connected to the address netpolicy checked.

    Raises EgressRefused for a refused address, StatementRefused for a URL it will not use,
    TransactionError when the server cannot be reached or refuses the login. No message
    carries the URL's password.
    """
    try:
        info = conninfo_to_dict(url)
    except psycopg.Error:
        raise StatementRefused("the database URL cannot be read") from None
    secret = str(info.get("password") or "")
    extra = sorted(set(info) - _URL_KEYS)
    if extra:
        raise StatementRefused(f"the database URL may not set: {', '.join(extra)}")
    host = str(info.get("host") or "")
    if not host or "," in host or host.startswith("/") or host.startswith("@"):
        raise StatementRefused("the database URL must name one network host")
    try:
        port = int(info.get("port") or 5432)
    except ValueError:
        raise StatementRefused("the database URL's port is not a number") from None
    timeout_ms = max(1, int(statement_timeout_s * 1000))
    last = "no address"
    for _, sockaddr in netpolicy.resolve(host, port, allow_private=allow_private):
        try:
            conn = psycopg.connect(
                host=host,
                hostaddr=str(sockaddr[0]),
                port=port,
                dbname=info.get("dbname") or "",
                user=info.get("user") or "",
                password=secret,
                sslmode=info.get("sslmode") or "prefer",
                connect_timeout=int(info.get("connect_timeout") or 10),
                passfile=os.devnull,
                sslcertmode="disable",
                client_encoding="UTF8",
                application_name="undoable",
                options=(
                    f"-c standard_conforming_strings=on -c statement_timeout={timeout_ms} "
                    "-c idle_in_transaction_session_timeout=0"
                ),
                autocommit=False,
            )
        except (psycopg.Error, ValueError) as exc:
            last = _scrub(str(exc), secret)
            continue
        return PostgresSession(conn, secret, max_rows, max_reply_bytes)
    raise TransactionError(f"cannot connect to the database: {last}")


class PostgresSession:
    engine = "postgres"

    def __init__(
        self, conn: psycopg.Connection, secret: str, max_rows: int, max_reply_bytes: int
    ) -> None:
        self._conn, self._secret = conn, secret
        self._max_rows, self._max_reply_bytes = max_rows, max_reply_bytes
        self._savepoint = f"undoable_{secrets.token_hex(8)}"
        self._broken: str | None = None
        self._verdicts = _Verdicts()
        # json/jsonb arrive as their text: no parse of deeply nested documents on the host.
        for name in ("json", "jsonb"):
            conn.adapters.register_loader(name, TextLoader)
        try:
            scs = conn.execute("SHOW standard_conforming_strings").fetchone()
        except psycopg.Error as exc:
            conn.close()
            raise TransactionError(_scrub(f"cannot begin: {exc}", secret)) from None
        if not scs or scs[0] != "on":
            conn.close()
            raise TransactionError("the server does not keep standard_conforming_strings on")
        # A savepoint is open between statements. This host-written text ends one and opens the
        # next in a single round trip (simple protocol, never prepared: two commands).
        self._next_savepoint = f"RELEASE SAVEPOINT {self._savepoint}; SAVEPOINT {self._savepoint}"
        try:
            conn.execute(f"SAVEPOINT {self._savepoint}")
        except psycopg.Error as exc:
            conn.close()
            raise TransactionError(_scrub(f"cannot begin: {exc}", secret)) from None

    def execute(self, sql: str, params: Params = None) -> Reply:
        return _guarded(lambda: self._execute(sql, params))

    def _execute(self, sql: str, params: Params) -> Reply:
        self._usable()
        text, values = self._bind(sql, params)
        returns_rows = self._verdicts.returns_rows(text)
        return self._in_savepoint(lambda cur: self._run(cur, text, values, returns_rows))

    def executemany(self, sql: str, seq: list[list | dict]) -> Reply:
        return _guarded(lambda: self._executemany(sql, seq))

    def _executemany(self, sql: str, seq: list[list | dict]) -> Reply:
        self._usable()
        if not isinstance(seq, list | tuple):
            raise StatementFailed("executemany needs a list of parameter sets")
        bound = [self._bind(sql, params) for params in seq]
        for text, _ in bound:
            self._verdicts.returns_rows(text)

        def run(cur: psycopg.RawCursor) -> Reply:
            total = 0
            # One text (the usual case) is one batch: psycopg pipelines its executions.
            for text, group in groupby(bound, key=lambda item: item[0]):
                cur.executemany(text, [values or [] for _, values in group])
                total += max(cur.rowcount, 0)
            return Reply(None, [], total, False)

        return self._in_savepoint(run)

    def _bind(self, sql: str, params: Params) -> tuple[str, list[object] | None]:
        """The exact text that is checked and then run, and its parameters in $n order.

        `%s` / `%(name)s` become PostgreSQL's `$1..$n` by psycopg's own converter; the values
        travel apart from the text (extended protocol), so the server parses exactly the checked
        text and no value can change its structure. A list of parameters for a text without
        `%` placeholders is taken as the program's own `$n` text, as psycopg's RawCursor does.
        Without parameters the text is checked and run as it came.
        """
        if not isinstance(sql, str):
            raise StatementRefused("the statement must be text")
        if "\x00" in sql:
            raise StatementRefused("the statement contains a NUL character")
        values = _params(params)
        if values is None:
            return sql, None
        try:
            query = sql.encode("utf-8")
        except UnicodeEncodeError:
            raise StatementRefused("the statement is not valid UTF-8 text") from None
        try:
            converted, parts, order = _convert(query)
            if len(parts) == 1 and isinstance(values, list) and values:
                return sql, values
            ordered = PostgresQuery.validate_and_reorder_params(parts, values, order)
        except (psycopg.Error, TypeError, ValueError, KeyError, IndexError) as exc:
            raise StatementFailed(f"cannot bind the parameters: {exc}") from None
        return converted.decode("utf-8"), list(ordered)

    def _run(
        self, cur: psycopg.RawCursor, text: str, values: list[object] | None, returns_rows: bool
    ) -> Reply:
        if not returns_rows:
            cur.execute(text, values)
            return Reply(None, [], cur.rowcount, False)
        rows = _Rows(self._max_rows, self._max_reply_bytes)
        # Row by row, so a huge result is never held on the host; the rest is drained so the
        # statement's effect (INSERT ... RETURNING) stays whole.
        for row in cur.stream(text, values):
            rows.add(row)
        columns = [d.name for d in cur.description] if cur.description else []
        return Reply(columns, rows.rows, rows.seen, rows.truncated)

    def _in_savepoint(self, run: Callable[[psycopg.RawCursor], Reply]) -> Reply:
        """Run one statement inside the savepoint that is open between statements.

        On success one host-written text releases it and opens the next one, so a statement
        costs two round trips; on failure ROLLBACK TO undoes the statement alone and keeps the
        savepoint for the next one.
        """
        try:
            with psycopg.RawCursor(self._conn) as cur:
                try:
                    reply = run(cur)
                except Exception as exc:  # the database's answer, or a value psycopg rejects
                    message = _scrub(_pg_message(exc), self._secret)
                    self._undo_statement(cur)
                    raise StatementFailed(message) from None
                cur.execute(self._next_savepoint, prepare=False)
        except psycopg.Error as exc:
            self._broken = _scrub(f"the database connection failed: {exc}", self._secret)
            raise StatementFailed(self._broken) from None
        self._still_open()
        return reply

    def _undo_statement(self, cur: psycopg.RawCursor) -> None:
        status = self._conn.info.transaction_status
        if status not in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR):
            self._still_open()
            return
        cur.execute(f"ROLLBACK TO SAVEPOINT {self._savepoint}", prepare=False)

    def _still_open(self) -> None:
        # The policy should make this impossible; if anything ends the transaction anyway, the
        # run stops rather than continue outside the transaction Keep/Undo decides.
        if self._conn.info.transaction_status != pq.TransactionStatus.INTRANS:
            self._broken = "the transaction ended outside Undoable's control; the run stops"

    def _usable(self) -> None:
        if self._broken is not None:
            raise StatementFailed(self._broken)

    def commit(self) -> None:
        self._usable()
        self._end(self._conn.commit)

    def rollback(self) -> None:
        self._end(self._conn.rollback)

    def _end(self, action: Callable[[], None]) -> None:
        try:
            action()
        except psycopg.Error as exc:
            raise TransactionError(_scrub(f"PostgreSQL: {exc}", self._secret)) from None
        finally:
            self._broken = self._broken or "the transaction has ended"

    def close(self) -> None:
        try:
            if (
                not self._conn.closed
                and self._conn.info.transaction_status != pq.TransactionStatus.IDLE
            ):
                self._conn.rollback()
        except psycopg.Error:
            pass  # closing the connection rolls back on the server anyway
        finally:
            self._conn.close()
            self._broken = self._broken or "the session is closed"


def _convert(query: bytes) -> tuple[bytes, list, list[str] | None]:
    """psycopg's own placeholder converter (psycopg>=3.2,<3.4): `%s`/`%(name)s` -> `$n`."""
    if len(query) > MAX_CACHED_STATEMENT_LENGTH:  # as psycopg: only short texts are memoised
        converted, _, order, parts = _query2pg_nocache(query, "utf-8")
    else:
        converted, _, order, parts = _query2pg(query, "utf-8")
    return converted, parts, order


class _Verdicts:
    """The policy's verdict per exact statement text, for one session: a loop parses once.

    Keyed by the whole text, never a digest of it; only acceptances are kept (a refusal
    raises), and the policy is looked up as `check_postgres` at every miss.
    """

    def __init__(self, size: int = 512, max_chars: int = 16_384) -> None:
        self._size, self._max_chars = size, max_chars
        self._seen: OrderedDict[str, bool] = OrderedDict()

    def returns_rows(self, text: str) -> bool:
        verdict = self._seen.get(text)
        if verdict is not None:
            self._seen.move_to_end(text)
            return verdict
        verdict = check_postgres(text)
        if len(text) <= self._max_chars:
            self._seen[text] = verdict
            if len(self._seen) > self._size:
                self._seen.popitem(last=False)
        return verdict


def _pg_message(exc: Exception) -> str:
    return str(exc).strip() or type(exc).__name__


def _scrub(message: str, secret: str) -> str:
    return message.replace(secret, "***") if secret else message
