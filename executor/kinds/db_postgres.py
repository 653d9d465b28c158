"""The host's PostgreSQL session of a db run: its own connection, PostgreSQL's parser (pglast).

The credential stays here; the connection goes to the address the egress policy checked.
Keep is `commit()`, Undo is `rollback()`: the host's calls, never the program's.

The server must run exactly the statement pglast checked. So every statement of the program
travels by the extended query protocol (one statement per Parse message: the server refuses a
second one whatever its reading of the text), and the settings that decide how the server reads
text, which objects names reach and how long statements and the held transaction may last are
read back after every statement: any role may change its own settings (`set_config`, the rule of
the `pg_settings` view, or an existing function or trigger that calls either), so a change
rolls the whole transaction back and stops the run. Only the host's own fixed texts (savepoints,
the settings read) use the simple protocol.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterator
from itertools import groupby
from typing import Any, NoReturn, TypeVar

import psycopg
from psycopg import pq, sql
from psycopg._queries import (  # psycopg>=3.2,<3.4; test_db_engines fails loudly if they move
    MAX_CACHED_STATEMENT_LENGTH,
    PostgresQuery,
    _query2pg,
    _query2pg_nocache,
)
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.string import TextLoader

from executor.kinds import netpolicy
from executor.kinds.db_digest import (
    DbState,
    PostgresCatalog,
    compare,
    postgres_catalog,
    postgres_state,
    postgres_touched,
    postgres_written,
)
from executor.kinds.db_rollback_check import rollback_verified
from executor.kinds.db_values import (
    Params,
    Reply,
    Rows,
    Verdicts,
    driver_params,
    guarded,
)
from executor.kinds.errors import RunStopped, StatementFailed, StatementRefused, TransactionError
from executor.kinds.sql_policy import check_postgres

logger = logging.getLogger(__name__)

# Only these URL parts are honoured: the rest (service files, client certificates, options)
# would make the host's libpq read host files or change how statements are lexed.
_URL_KEYS = {"host", "port", "dbname", "user", "password", "sslmode", "connect_timeout"}

# Read back after every statement; a change stops the run. How the server reads a statement's
# text (quoting, backslashes, the bytes' encoding), where unqualified names lead, and the time
# limits of statements, lock waits and the held transaction. escape_string_warning is not here:
# it only adds a warning and changes no reading.
_WATCHED = (
    "standard_conforming_strings",
    "backslash_quote",
    "client_encoding",
    "search_path",
    "statement_timeout",
    "lock_timeout",
    "idle_in_transaction_session_timeout",
    "transaction_timeout",  # PostgreSQL 17+; NULL before
    "client_connection_check_interval",  # PostgreSQL 14+
)
# What the host sets at connect time and checks before the first statement (None: absent).
_PINNED: dict[str, tuple[str | None, ...]] = {
    "standard_conforming_strings": ("on",),
    "backslash_quote": ("safe_encoding",),
    "client_encoding": ("UTF8",),
    "idle_in_transaction_session_timeout": ("0",),
    "transaction_timeout": ("0", None),
    "client_connection_check_interval": ("1s", None),
}
# Schema-qualified: a search_path the program changed cannot put another current_setting first.
_READ_SETTINGS = "SELECT " + ", ".join(
    f"pg_catalog.current_setting('{name}', true)" for name in _WATCHED
)
# Settings of newer servers (unknown names fail a connection, so not in its options): the held
# transaction must not end by the server's clock while it waits for Keep or Undo, and a
# statement whose connection the host cut (cancel()) stops within a second.
_NEWER_SETTINGS = (
    "SELECT pg_catalog.set_config(s.name, s.value, false) FROM (VALUES "
    "('transaction_timeout', '0'), ('client_connection_check_interval', '1s')) AS s(name, value) "
    "WHERE pg_catalog.current_setting(s.name, true) IS NOT NULL"
)
# cancel(): how long a cancel request may take, how often it is tried, and how long the
# statement may take to stop after each before the connection is cut.
_CANCEL_TIMEOUT_S = 2.0
_CANCEL_TRIES = 3
_CANCEL_WAIT_S = 1.0
_T = TypeVar("_T")


def open_postgres(
    url: str,
    *,
    allow_private: bool,
    statement_timeout_s: float,
    max_rows: int = 10_000,
    max_reply_bytes: int = 4 << 20,
    repeatable_read: bool = False,
) -> PostgresSession:
    """A session on a PostgreSQL server, connected to the address netpolicy checked.

    Raises EgressRefused for a refused address, StatementRefused for a URL it will not use,
    TransactionError when the server cannot be reached or refuses the login. No message
    carries the URL's password. `repeatable_read`: the transaction sees one snapshot
    throughout (a rehearsal's, whose before and after other sessions' commits must not move).
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
    addresses = [
        str(sockaddr[0])
        for _, sockaddr in netpolicy.resolve(host, port, allow_private=allow_private)
    ]

    def connect(address: str) -> psycopg.Connection:
        return psycopg.connect(
            host=host,
            hostaddr=address,
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
                f"-c standard_conforming_strings=on -c backslash_quote=safe_encoding "
                f"-c statement_timeout={timeout_ms} -c idle_in_transaction_session_timeout=0"
            ),
            autocommit=False,
        )

    last = "no address"
    for address in addresses:
        try:
            conn = connect(address)
        except (psycopg.Error, ValueError) as exc:
            last = _scrub(str(exc), secret)
            continue
        if repeatable_read:  # before the session's first statement begins the transaction
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        return PostgresSession(
            conn, secret, max_rows, max_reply_bytes, reader=functools.partial(connect, address)
        )
    raise TransactionError(f"cannot connect to the database: {last}")


class PostgresSession:
    engine = "postgres"

    def __init__(
        self,
        conn: psycopg.Connection,
        secret: str,
        max_rows: int,
        max_reply_bytes: int,
        reader: Callable[[], psycopg.Connection] | None = None,
    ) -> None:
        self._conn, self._secret = conn, secret
        # A second connection to the same address, which reads the state the transaction began
        # from through its exported snapshot: a rehearsal's verdict, a verified rollback's.
        self._reader = reader
        self._snapshot = ""
        self._begun: PostgresCatalog | None = None
        self._max_rows, self._max_reply_bytes = max_rows, max_reply_bytes
        self._savepoint = f"undoable_{secrets.token_hex(8)}"
        self._broken: str | None = None
        self._verdicts = Verdicts(lambda text: check_postgres(text))
        # cancel() may come from any thread: `_idle` is clear while one of the program's
        # statements is on the connection, `_cancelled` says a cancel was sent for it.
        self._idle = threading.Event()
        self._idle.set()
        self._cancelled = False
        # json/jsonb arrive as their text: no parse of deeply nested documents on the host.
        for name in ("json", "jsonb"):
            conn.adapters.register_loader(name, TextLoader)
        # A savepoint is open between statements. This host-written text reads the watched
        # settings, ends the savepoint and opens the next in one round trip (simple protocol,
        # never prepared: three commands, the first one's row is the cursor's).
        self._settle = (
            f"{_READ_SETTINGS}; RELEASE SAVEPOINT {self._savepoint}; SAVEPOINT {self._savepoint}"
        )
        try:
            if reader is not None:  # the transaction's first statement: it takes the snapshot
                row = conn.execute("SELECT pg_catalog.pg_export_snapshot()").fetchone()
                self._snapshot = str(row[0]) if row else ""
            conn.execute(_NEWER_SETTINGS)
            conn.execute(f"SAVEPOINT {self._savepoint}")
            self._settings = _named(conn.execute(_READ_SETTINGS).fetchone())
        except psycopg.Error as exc:
            conn.close()
            raise TransactionError(_scrub(f"cannot begin: {exc}", secret)) from None
        for name, allowed in _PINNED.items():
            if self._settings.get(name) not in allowed:
                conn.close()
                raise TransactionError(
                    f"the server does not keep {name} = {allowed[0]} for this session"
                )

    def execute(self, sql: str, params: Params = None) -> Reply:
        return guarded(lambda: self._execute(sql, params))

    def _execute(self, sql: str, params: Params) -> Reply:
        self._usable()
        text, values = self._bind(sql, params)
        returns_rows = self._verdicts.returns_rows(text)
        return self._in_savepoint(lambda cur: self._run(cur, text, values, returns_rows))

    def executemany(self, sql: str, seq: list[list | dict]) -> Reply:
        return guarded(lambda: self._executemany(sql, seq))

    @contextlib.contextmanager
    def _on_connection(self) -> Iterator[None]:
        """While the program's statement (and the host's text after it) is on the connection."""
        self._cancelled = False
        self._idle.clear()
        try:
            yield
        finally:
            self._idle.set()

    def cancel(self) -> None:
        """End the statement in flight, if any; it fails and the transaction stays usable.

        Callable from any thread, and bounded: a PostgreSQL cancel request (tried again if the
        statement had not reached the server yet); if the statement still runs after that, the
        connection is cut under it, and the server rolls the transaction back.
        """
        for _ in range(_CANCEL_TRIES):
            if self._idle.is_set():
                return
            self._cancelled = True
            with contextlib.suppress(psycopg.Error):
                self._conn.cancel_safe(timeout=_CANCEL_TIMEOUT_S)
            if self._idle.wait(_CANCEL_WAIT_S):
                return
        logger.warning("a db statement ignored its cancel request; cutting its connection")
        self._sever()
        self._idle.wait(_CANCEL_WAIT_S)

    def _sever(self) -> None:
        """Shut the connection's socket down (not close it: the waiting thread still holds
        the descriptor), so the thread waiting on it fails at once."""
        with (
            contextlib.suppress(OSError, psycopg.Error),
            socket.socket(fileno=os.dup(self._conn.fileno())) as sock,
        ):
            sock.shutdown(socket.SHUT_RDWR)

    def _executemany(self, sql: str, seq: list[list | dict]) -> Reply:
        self._usable()
        if not isinstance(seq, list | tuple):
            raise StatementFailed("executemany needs a list of parameter sets")
        bound = [self._bind(sql, params) for params in seq]
        for text, _ in bound:
            self._verdicts.returns_rows(text)

        def run(cur: psycopg.RawCursor) -> Reply:
            total = 0
            # One text (the usual case) is one batch. Pipeline mode: the extended protocol
            # for every execution (psycopg raises if the library cannot pipeline).
            for text, group in groupby(bound, key=lambda item: item[0]):
                with self._conn.pipeline():
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
        values = driver_params(params)
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
            # Binary results can only be asked for by the extended protocol (libpq's
            # PQsendQuery has no result format), so psycopg sends it by PQsendQueryParams even
            # without parameters, where it would otherwise use the simple protocol, which runs
            # every statement the server reads in the text. There are no rows to decode.
            cur.execute(text, values, binary=True)
            return Reply(None, [], cur.rowcount, False)
        rows = Rows(self._max_rows, self._max_reply_bytes)
        # Row by row (stream(): the extended protocol), so a huge result is never held on the
        # host; the rest is drained so the statement's effect (INSERT ... RETURNING) stays whole.
        for row in cur.stream(text, values):
            rows.add(row)
        columns = [d.name for d in cur.description] if cur.description else []
        return Reply(columns, rows.rows, rows.seen, rows.truncated)

    def _in_savepoint(self, run: Callable[[psycopg.RawCursor], Reply]) -> Reply:
        """Run one statement inside the savepoint that is open between statements.

        On success one host-written text checks the watched settings, releases the savepoint
        and opens the next one, so a statement costs two round trips; on failure ROLLBACK TO
        undoes the statement alone and keeps the savepoint for the next one.
        """
        try:
            with self._on_connection(), psycopg.RawCursor(self._conn) as cur:
                try:
                    reply = run(cur)
                except Exception as exc:  # the database's answer, or a value psycopg rejects
                    message = _scrub(_pg_message(exc), self._secret)
                    self._undo_statement(cur, message)
                    raise StatementFailed(message) from None
                self._still_open()
                cur.execute(self._settle, prepare=False)
                self._check_settings(cur.fetchone())
        except psycopg.Error as exc:  # the host's own text failed: the transaction is unusable
            if self._cancelled:  # the cancel came as the statement ended
                self._stop("a cancel came as the statement ended")
            self._stop(_scrub(f"the database connection failed: {exc}", self._secret))
        return reply

    def _undo_statement(self, cur: psycopg.RawCursor, message: str) -> None:
        status = self._conn.info.transaction_status
        if status not in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR):
            self._stop(f"{message} (and the transaction could not go on)")
        cur.execute(f"ROLLBACK TO SAVEPOINT {self._savepoint}; {_READ_SETTINGS}", prepare=False)
        cur.nextset()
        self._check_settings(cur.fetchone())

    def _still_open(self) -> None:
        # The policy should make this impossible; if anything ends the transaction anyway, the
        # run stops rather than continue outside the transaction Keep/Discard decides.
        if self._conn.info.transaction_status != pq.TransactionStatus.INTRANS:
            self._stop("the transaction ended outside Undoable's control")

    def _check_settings(self, row: tuple | None) -> None:
        now = _named(row)
        for name in _WATCHED:
            if now.get(name) != self._settings[name]:
                self._stop(
                    f"the statement changed the session setting {name} (from "
                    f"{self._settings[name]!r} to {now.get(name)!r}); Undoable fixes how "
                    "statements are read and how long they may run"
                )

    def _stop(self, why: str) -> NoReturn:
        """End the run's transaction here: roll it all back, refuse every later statement."""
        with contextlib.suppress(psycopg.Error):
            self._conn.rollback()
        self._broken = f"{why}; the run's changes were rolled back and the run stops"
        raise RunStopped(self._broken)

    def _usable(self) -> None:
        if self._broken is not None:
            raise StatementFailed(self._broken)

    def rehearsal_begin(self) -> None:
        """Note the catalog a rehearsal starts from: every readable table's shape and storage
        file, and the sequences (the rows are read at the verdict, of the tables touched)."""
        self._begun = self._host_read(lambda: postgres_catalog(self._conn))

    def rehearsal_verdict(self) -> dict[str, Any]:
        """Compare the state now with the one the transaction began from, and end it (rolled
        back): db_digest.compare's verdict.

        The rows are read only of the tables touched: those this transaction wrote rows of
        (PostgreSQL's own count, pg_stat_xact_user_tables, which takes in what triggers, rules,
        functions and foreign-key actions wrote), those whose storage file changed (TRUNCATE,
        a rewrite) and those whose shape moved or that came or went. First on this connection,
        as they stand now; then a second connection imports the snapshot this transaction
        exported when it began, this transaction is rolled back (its locks go, so the reader
        never waits on them), and the reader reads the same tables as they were."""
        begun, reader_factory = self._begun, self._reader
        if begun is None or reader_factory is None or not self._snapshot:
            raise TransactionError("the rehearsal's start was not noted")

        def now() -> tuple[DbState, set[str]]:
            catalog = postgres_catalog(self._conn)
            touched = postgres_touched(begun, catalog, postgres_written(self._conn))
            return postgres_state(self._conn, catalog, touched), touched

        after, touched = self._host_read(now)
        try:
            reader = reader_factory()
        except (psycopg.Error, ValueError) as exc:
            raise TransactionError(
                _scrub(f"cannot connect to read the state before: {exc}", self._secret)
            ) from None
        with reader:
            try:
                reader.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
                reader.read_only = True
                _import_snapshot(reader, self._snapshot)
                self.rollback()
                before = postgres_state(reader, begun, touched & begun.shapes.keys())
            except psycopg.Error as exc:
                message = _scrub(_pg_message(exc), self._secret)
                raise TransactionError(f"the state before cannot be read: {message}") from None
            finally:
                with contextlib.suppress(psycopg.Error):
                    reader.rollback()
        return compare(before, after)

    def _host_read(self, reading: Callable[[], _T]) -> _T:
        """A read of the catalog or rows by the host, between the program's statements; a
        failure undoes only the reading, and the transaction stays as it was."""
        self._usable()
        try:
            with self._on_connection():
                return reading()
        except psycopg.Error as exc:
            with self._on_connection(), psycopg.RawCursor(self._conn) as cur:
                self._undo_statement(cur, _pg_message(exc))
            message = _scrub(_pg_message(exc), self._secret)
            raise TransactionError(f"the database's state cannot be read: {message}") from None

    def commit(self) -> None:
        self._usable()
        self._end(self._conn.commit)

    def rollback(self) -> None:
        self._end(self._conn.rollback)

    def rollback_checked(self) -> dict[str, Any] | None:
        """Roll back, proving it: the touched tables' digests in the run's snapshot and after
        (db_rollback_check). None, and nothing done, when the transaction already ended or a
        statement of the program still holds the connection: the close that follows rolls
        back (and is bounded, where a read here would wait for the statement)."""
        if self._broken is not None or not self._idle.is_set():
            return None
        if self._reader is None or not self._snapshot:
            return None
        try:
            with self._on_connection():
                return rollback_verified(self._conn, self._snapshot, self._reader)
        except psycopg.Error as exc:
            with contextlib.suppress(psycopg.Error):
                self._conn.rollback()
            message = _scrub(_pg_message(exc), self._secret)
            raise TransactionError(f"the rollback could not be verified: {message}") from None
        finally:
            self._broken = self._broken or "the transaction has ended"

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


def _import_snapshot(reader: psycopg.Connection, snapshot: str) -> None:
    """`reader`'s transaction sees what the exporting one saw when it began, and no commit
    since (the rehearsal's own changes were never committed, so none of them either)."""
    reader.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))


def _convert(query: bytes) -> tuple[bytes, list, list[str] | None]:
    """psycopg's own placeholder converter (psycopg>=3.2,<3.4): `%s`/`%(name)s` -> `$n`."""
    if len(query) > MAX_CACHED_STATEMENT_LENGTH:  # as psycopg: only short texts are memoised
        converted, _, order, parts = _query2pg_nocache(query, "utf-8")
    else:
        converted, _, order, parts = _query2pg(query, "utf-8")
    return converted, parts, order


def _named(row: tuple | None) -> dict[str, str | None]:
    """The watched settings by name, from a row of _READ_SETTINGS."""
    return dict(zip(_WATCHED, row, strict=True)) if row else {}


def _pg_message(exc: Exception) -> str:
    return str(exc).strip() or type(exc).__name__


def _scrub(message: str, secret: str) -> str:
    return message.replace(secret, "***") if secret else message
