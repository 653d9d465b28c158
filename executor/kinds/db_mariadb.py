"""The host's MariaDB/MySQL session of a db run: its own connection, every statement prepared.

The credential stays here; the connection goes to the address the egress policy checked.
Keep is `commit()`, Undo is `rollback()`: the host's calls, never the program's.

The server must run exactly the statement the policy (sql_policy_mysql.py) checked, and no
parser but the server's reads MySQL exactly. So every statement of the program travels as a
server-side prepared statement (COM_STMT_PREPARE, which takes one statement whatever the text
holds, then COM_STMT_EXECUTE with the values in the binary protocol), on a connection whose
client flags leave multi-statements and LOCAL INFILE off. The session pins sql_mode (the
quoting the policy's tokenizer reads) and reads it back, with autocommit, the character sets,
the statement time limit and whether the transaction is still open, after every statement:
a stored function or trigger may change a session variable, and a deadlock ends the whole
transaction; either stops the run and rolls everything back.

DDL commits implicitly in MariaDB and MySQL, so a rollback could not take it back: the policy
refuses it, and the check after each statement is the backstop if anything ends the
transaction anyway. A statement that fails is undone alone by InnoDB (statement atomicity);
an executemany batch is one savepoint, all or nothing.

`cancel()` sends `KILL QUERY` for the session's connection from a second, short-lived
connection with the same credential, and cuts the socket if the statement still runs.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, NoReturn
from urllib.parse import unquote, urlsplit

import mysql.connector
from mysql.connector.constants import ClientFlag

from executor.kinds import netpolicy
from executor.kinds.db_values import Params, Reply, Rows, Verdicts, driver_params, guarded
from executor.kinds.errors import RunStopped, StatementFailed, StatementRefused, TransactionError
from executor.kinds.sql_policy_mysql import PINNED_MODES, check_mysql

logger = logging.getLogger(__name__)

SCHEMES = ("mysql", "mariadb")
DEFAULT_PORT = 3306
# ANSI_QUOTES and NO_BACKSLASH_ESCAPES decide how the server reads quotes (the policy's
# tokenizer reads them the same way); the strict modes make a bad value an error, not a
# silently changed row.
PINNED_SQL_MODE = ",".join(
    (*PINNED_MODES, "STRICT_TRANS_TABLES", "ERROR_FOR_DIVISION_BY_ZERO", "NO_ENGINE_SUBSTITUTION")
)
_SETTINGS = (
    "sql_mode",
    "autocommit",
    "character_set_client",
    "character_set_connection",
    "character_set_results",
)
_CONNECT_TIMEOUT_S = 10
_MAX_WAIT_TIMEOUT_S = 31_536_000  # the servers' own maximum (a year): the host ends it sooner
# Prepared statements a session keeps open on the server, the least recently used closed first.
_PREPARED_STATEMENTS = 64
# cancel(): how long KILL QUERY may take, how often it is tried, and how long the statement
# may take to stop after each before the connection is cut.
_KILL_TIMEOUT_S = 2
_CANCEL_TRIES = 3
_CANCEL_WAIT_S = 1.0


def open_mariadb(
    url: str,
    *,
    allow_private: bool,
    statement_timeout_s: float,
    max_rows: int = 10_000,
    max_reply_bytes: int = 4 << 20,
) -> MariaDbSession:
    """A session on a MariaDB or MySQL server, connected to the address netpolicy checked.

    Raises EgressRefused for a refused address, StatementRefused for a URL it will not use,
    TransactionError when the server cannot be reached or refuses the login. No message
    carries the URL's password.
    """
    target = _read_url(url)
    last = "no address"
    for _, sockaddr in netpolicy.resolve(
        target["host"], target["port"], allow_private=allow_private
    ):
        address = str(sockaddr[0])

        def connect(timeout: int, address: str = address) -> Any:
            return mysql.connector.connect(
                host=address,
                port=target["port"],
                user=target["user"],
                password=target["password"],
                database=target["database"] or None,
                use_pure=True,  # the wheel's C extension is not built for every platform
                autocommit=False,
                allow_local_infile=False,
                client_flags=[-ClientFlag.MULTI_STATEMENTS, -ClientFlag.LOCAL_FILES],
                connection_timeout=timeout,
                sql_mode=PINNED_SQL_MODE,
                charset="utf8mb4",
                get_warnings=False,
                consume_results=False,
            )

        try:
            conn = connect(_CONNECT_TIMEOUT_S)
        except (mysql.connector.Error, OSError, ValueError) as exc:
            last = _scrub(str(exc), target["password"])
            continue
        return MariaDbSession(
            conn, connect, target["password"], statement_timeout_s, max_rows, max_reply_bytes
        )
    raise TransactionError(f"cannot connect to the database: {last}")


def _read_url(url: str) -> dict[str, Any]:
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise StatementRefused("the database URL cannot be read") from None
    if parts.scheme not in SCHEMES:
        raise StatementRefused("a MariaDB/MySQL URL starts with mysql:// or mariadb://")
    if parts.query or parts.fragment:
        raise StatementRefused(
            "the database URL may not set options (?...): the session's options are Undoable's"
        )
    host = parts.hostname or ""
    if not host or "," in host:
        raise StatementRefused("the database URL must name one network host")
    database = unquote(parts.path.removeprefix("/"))
    if "/" in database:
        raise StatementRefused("the database URL's path is one database name")
    return {
        "host": host,
        "port": port,
        "user": unquote(parts.username or ""),
        "password": unquote(parts.password or ""),
        "database": database,
    }


class MariaDbSession:
    engine = "mariadb"

    def __init__(
        self,
        conn: Any,
        connect: Callable[[int], Any],
        secret: str,
        statement_timeout_s: float,
        max_rows: int,
        max_reply_bytes: int,
    ) -> None:
        self._conn, self._connect, self._secret = conn, connect, secret
        self._max_rows, self._max_reply_bytes = max_rows, max_reply_bytes
        self._broken: str | None = None
        self._verdicts = Verdicts(lambda text: check_mysql(text))
        self._statements: OrderedDict[str, dict[str, Any]] = OrderedDict()
        _no_delay(conn)
        self._idle = threading.Event()
        self._idle.set()
        self._cancelled = False
        self.flavour = "mariadb" if "mariadb" in str(conn.server_info).lower() else "mysql"
        try:
            self._conn_id = int(conn.connection_id)
            self._fixed = _fixed_variables(self.flavour, statement_timeout_s)
            assignments = ", ".join(f"SESSION {name} = {value}" for name, value in self._fixed)
            self._host_query(f"SET {assignments}")
            self._host_query("START TRANSACTION")
            self._settings = self._read_settings()
        except mysql.connector.Error as exc:
            conn.close()
            raise TransactionError(_scrub(f"cannot begin: {exc}", secret)) from None
        expected = {"sql_mode": PINNED_SQL_MODE, "autocommit": "0", "in_transaction": "1"}
        for name, value in expected.items():
            if self._settings.get(name) != value:
                conn.close()
                raise TransactionError(
                    f"the server does not keep {name} = {value} for this session"
                )

    # The program's statements ---------------------------------------------------------------

    def execute(self, sql: str, params: Params = None) -> Reply:
        return guarded(lambda: self._execute(sql, params))

    def executemany(self, sql: str, seq: list[list | dict]) -> Reply:
        return guarded(lambda: self._executemany(sql, seq))

    def _execute(self, sql: str, params: Params) -> Reply:
        self._usable()
        if not isinstance(sql, str):
            raise StatementRefused("the statement must be text")
        values = _values(params)
        returns_rows = self._verdicts.returns_rows(sql)
        return self._statement(lambda: self._run(sql, [values], returns_rows))

    def _executemany(self, sql: str, seq: list[list | dict]) -> Reply:
        self._usable()
        if not isinstance(sql, str):
            raise StatementRefused("the statement must be text")
        if not isinstance(seq, list | tuple):
            raise StatementFailed("executemany needs a list of parameter sets")
        batch = [_values(params) for params in seq]
        self._verdicts.returns_rows(sql)
        return self._statement(lambda: self._run(sql, batch, False), batch=True)

    def _run(self, sql: str, batch: list[list[object]], returns_rows: bool) -> Reply:
        """Prepare the checked text (one statement: the server refuses more), execute it
        for each parameter set; rows are read one by one under the reply's caps and the rest
        drained, so the statement's effect stays whole."""
        prepared = self._prepare(sql)
        wanted = len(prepared["parameters"])
        total, last_id = 0, None
        rows = Rows(self._max_rows, self._max_reply_bytes)
        columns: list[str] | None = None
        for values in batch:
            if len(values) != wanted:
                raise StatementFailed(
                    f"the statement has {wanted} ? placeholder(s), {len(values)} value(s) came"
                )
            result = self._conn.cmd_stmt_execute(
                prepared["statement_id"], data=tuple(values), parameters=prepared["parameters"]
            )
            if isinstance(result, dict):
                total += int(result.get("affected_rows") or 0)
                last_id = int(result.get("insert_id") or 0) or last_id
                continue
            columns = [str(column[0]) for column in result[1]]
            self._conn.unread_result = True
            while True:
                row, _ = self._conn.get_row(binary=True, columns=result[1])
                if row is None:
                    break
                rows.add(row)
        if columns is not None and returns_rows:
            return Reply(columns, rows.rows, rows.seen, rows.truncated)
        return Reply(None, [], total, False, last_id)

    def _prepare(self, sql: str) -> dict[str, Any]:
        """The server's prepared statement for this exact text, prepared once per session.

        A loop's statement then costs one round trip for its execution (and one for the
        settings read), and no COM_STMT_CLOSE, which has no reply: a small write right after
        it waits for the server's delayed ACK (Nagle), tens of milliseconds per statement.
        """
        found = self._statements.get(sql)
        if found is not None:
            self._statements.move_to_end(sql)
            return found
        prepared: dict[str, Any] = dict(self._conn.cmd_stmt_prepare(sql.encode("utf-8")))
        self._statements[sql] = prepared
        if len(self._statements) > _PREPARED_STATEMENTS:
            _, oldest = self._statements.popitem(last=False)
            with contextlib.suppress(mysql.connector.Error):
                self._conn.cmd_stmt_close(oldest["statement_id"])
        return prepared

    def _statement(self, run: Callable[[], Reply], *, batch: bool = False) -> Reply:
        """One statement (or batch), then the check of the session's settings and transaction."""
        savepoint = "undoable_batch"
        with self._on_connection():
            try:
                if batch:
                    self._host_query(f"SAVEPOINT {savepoint}")
                try:
                    reply = run()
                except (mysql.connector.Error, StatementFailed, TypeError, ValueError) as exc:
                    message = _scrub(str(exc).strip() or type(exc).__name__, self._secret)
                    self._after_failure(message, savepoint if batch else None)
                    raise StatementFailed(message) from None
                if batch:
                    self._host_query(f"RELEASE SAVEPOINT {savepoint}")
                self._check(self._read_settings())
            except (mysql.connector.Error, OSError) as exc:
                if self._cancelled:
                    self._stop("a cancel came as the statement ended")
                self._stop(_scrub(f"the database connection failed: {exc}", self._secret))
        return reply

    def _after_failure(self, message: str, savepoint: str | None) -> None:
        if not self._conn.is_connected():
            self._stop(f"{message} (and the connection was lost)")
        settings = self._read_settings()
        if settings.get("in_transaction") != "1":
            self._stop(f"{message} (the server rolled the whole transaction back)")
        if savepoint is not None:
            self._host_query(f"ROLLBACK TO SAVEPOINT {savepoint}")
        self._check(settings)

    # The session's own state ----------------------------------------------------------------

    def _host_query(self, text: str) -> None:
        """One of the host's fixed texts (never the program's)."""
        self._conn.cmd_query(text)

    def _read_settings(self) -> dict[str, str]:
        names = (*_SETTINGS, *(name for name, _ in self._fixed))
        columns = ", ".join(f"@@session.{name}" for name in names)
        result = self._conn.cmd_query(f"SELECT {columns}")
        rows, _ = self._conn.get_rows()
        values = [_text(value) for value in rows[0]] if rows and "columns" in result else []
        read = dict(zip(names, values, strict=False))
        # The status flags of that reply: a transaction the server ended is no longer "in".
        read["in_transaction"] = "1" if self._conn.in_transaction else "0"
        return read

    def _check(self, now: dict[str, str]) -> None:
        if now.get("in_transaction") != "1":
            self._stop("the transaction ended outside Undoable's control")
        for name, value in self._settings.items():
            if now.get(name) != value:
                self._stop(
                    f"the statement changed the session variable {name} (from {value!r} to "
                    f"{now.get(name)!r}); Undoable fixes how statements are read and how long "
                    "they may run"
                )

    def _stop(self, why: str) -> NoReturn:
        """End the run's transaction here: roll it all back, refuse every later statement."""
        with contextlib.suppress(mysql.connector.Error, OSError):
            self._conn.rollback()
        self._broken = f"{why}; the run's changes were rolled back and the run stops"
        raise RunStopped(self._broken)

    def _usable(self) -> None:
        if self._broken is not None:
            raise StatementFailed(self._broken)

    @contextlib.contextmanager
    def _on_connection(self) -> Iterator[None]:
        self._cancelled = False
        self._idle.clear()
        try:
            yield
        finally:
            self._idle.set()

    def cancel(self) -> None:
        """End the statement in flight, if any; it fails and the transaction stays usable.

        Callable from any thread, and bounded: KILL QUERY from a second connection (tried
        again if the statement had not reached the server yet); if the statement still runs
        after that, the connection is cut under it, and the server rolls the transaction back.
        """
        for _ in range(_CANCEL_TRIES):
            if self._idle.is_set():
                return
            self._cancelled = True
            with contextlib.suppress(mysql.connector.Error, OSError, ValueError):
                killer = self._connect(_KILL_TIMEOUT_S)
                try:
                    killer.cmd_query(f"KILL QUERY {self._conn_id}")
                finally:
                    killer.close()
            if self._idle.wait(_CANCEL_WAIT_S):
                return
        logger.warning("a db statement ignored KILL QUERY; cutting its connection")
        sock = getattr(getattr(self._conn, "_socket", None), "sock", None)
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._idle.wait(_CANCEL_WAIT_S)

    # Keep and Undo ----------------------------------------------------------------------------

    def commit(self) -> None:
        self._usable()
        self._end(self._conn.commit)

    def rollback(self) -> None:
        self._end(self._conn.rollback)

    def _end(self, action: Callable[[], None]) -> None:
        try:
            action()
        except mysql.connector.Error as exc:
            raise TransactionError(_scrub(f"MariaDB: {exc}", self._secret)) from None
        finally:
            self._broken = self._broken or "the transaction has ended"

    def close(self) -> None:
        try:
            if self._conn.is_connected():
                self._conn.rollback()
        except (mysql.connector.Error, OSError):
            pass  # closing the connection rolls back on the server anyway
        finally:
            with contextlib.suppress(mysql.connector.Error, OSError):
                self._conn.close()
            self._broken = self._broken or "the session is closed"


def _fixed_variables(flavour: str, statement_timeout_s: float) -> tuple[tuple[str, str], ...]:
    """The session variables the host sets, and then watches with the others.

    The statement time limit (MariaDB: seconds, every statement; MySQL: milliseconds, SELECT
    only, the run's wall time bounds the rest), and no server-side end of the held
    transaction while it waits for Keep or Discard: the idle connection's limit at its most,
    MariaDB's idle-transaction limits off.
    """
    if flavour == "mariadb":
        return (
            ("max_statement_time", f"{max(statement_timeout_s, 0.001):.3f}"),
            ("wait_timeout", str(_MAX_WAIT_TIMEOUT_S)),
            ("idle_transaction_timeout", "0"),
            ("idle_readonly_transaction_timeout", "0"),
            ("idle_write_transaction_timeout", "0"),
        )
    return (
        ("max_execution_time", str(max(1, int(statement_timeout_s * 1000)))),
        ("wait_timeout", str(_MAX_WAIT_TIMEOUT_S)),
    )


def _no_delay(conn: Any) -> None:
    """TCP_NODELAY on the connection's socket (the driver sets none): a statement's small
    writes go out at once instead of waiting for the server's delayed ACK. Best effort: the
    driver keeps its socket in a private attribute; without it only speed is lost."""
    sock = getattr(getattr(conn, "_socket", None), "sock", None)
    if isinstance(sock, socket.socket) and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _values(params: Params) -> list[object]:
    values = driver_params(params)
    if values is None:
        return []
    if isinstance(values, dict):
        raise StatementFailed(
            "MariaDB/MySQL statements take ? placeholders and a list of values, not names"
        )
    return list(values)


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def _scrub(message: str, secret: str) -> str:
    return message.replace(secret, "***") if secret else message


__all__ = ["SCHEMES", "MariaDbSession", "open_mariadb"]
