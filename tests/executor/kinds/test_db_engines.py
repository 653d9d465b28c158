"""The host's database sessions: a real SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from db_runs import switch_off_extended_protocol_here

from executor.kinds import db_postgres, db_sqlite
from executor.kinds.db_engines import DbSession, open_postgres, open_sqlite
from executor.kinds.errors import StatementFailed, StatementRefused, TransactionError
from executor.kinds.netpolicy import EgressRefused
from tests.servers import PASSWORD, PostgresDatabase, PostgresServer

DOLLAR_COMMIT = "SELECT $$'$$; UPDATE accounts SET balance = 0; COMMIT; SELECT $$'$$"


# SQLite ---------------------------------------------------------------------------------------


@pytest.fixture
def db_file(tmp_path: Path) -> Path:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE accounts (name TEXT UNIQUE, balance INTEGER)")
        conn.execute("INSERT INTO accounts VALUES ('ana', 10), ('bo', 20)")
    return path


@pytest.fixture
def lite(db_file: Path) -> Iterator[DbSession]:
    session = open_sqlite(db_file, max_bytes=8 << 20)
    yield session
    session.close()


def balances(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT name, balance FROM accounts ORDER BY name").fetchall()


def test_sqlite_commit_keeps_changes_and_ddl(db_file: Path, lite: DbSession) -> None:
    lite.execute("UPDATE accounts SET balance = ? WHERE name = ?", [99, "ana"])
    lite.execute("CREATE TABLE audit (x BLOB)")
    reply = lite.execute("INSERT INTO audit VALUES (:b)", {"b": {"$bytes": "AAE="}})
    assert reply.lastrowid == 1
    lite.commit()
    assert balances(db_file) == [("ana", 99), ("bo", 20)]
    with sqlite3.connect(db_file) as conn:
        assert conn.execute("SELECT x FROM audit").fetchall() == [(b"\x00\x01",)]


def test_sqlite_rollback_discards_changes_and_ddl(db_file: Path, lite: DbSession) -> None:
    lite.execute("DELETE FROM accounts")
    lite.execute("DROP TABLE accounts")
    lite.rollback()
    assert balances(db_file) == [("ana", 10), ("bo", 20)]


def test_sqlite_rows_come_back_json_safe(lite: DbSession) -> None:
    reply = lite.execute("SELECT name, balance, x'ff', 1.5, NULL FROM accounts ORDER BY name")
    assert reply.columns == ["name", "balance", "x'ff'", "1.5", "NULL"]
    assert reply.rows[0] == ["ana", 10, {"$bytes": "/w=="}, 1.5, None]
    assert (reply.rowcount, reply.truncated) == (2, False)


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("COMMIT", "transaction control"),
        ("ROLLBACK", "transaction control"),
        ("BEGIN", "transaction control"),
        ("SAVEPOINT x", "SAVEPOINT"),
        ("ATTACH '/tmp/evil.db' AS evil", "ATTACH"),
        ("PRAGMA journal_mode=OFF", "journal_mode"),
        ("PRAGMA writable_schema=1", "writable_schema"),
        ("PRAGMA max_page_count=999999999", "max_page_count"),
        ("SELECT * FROM pragma_database_list", "database_list"),
        ("SELECT load_extension('/tmp/x.so')", "load_extension"),
        ("SELECT 1; COMMIT", "one statement per call"),
    ],
)
def test_sqlite_refuses_and_the_transaction_stays_usable(
    db_file: Path, lite: DbSession, sql: str, why: str
) -> None:
    lite.execute("UPDATE accounts SET balance = 1")
    with pytest.raises(StatementRefused, match=why):
        lite.execute(sql)
    assert lite.execute("SELECT sum(balance) FROM accounts").rows == [[2]]
    lite.rollback()
    assert balances(db_file) == [("ana", 10), ("bo", 20)]


def test_sqlite_vacuum_into_cannot_write_a_file(tmp_path: Path, lite: DbSession) -> None:
    with pytest.raises((StatementRefused, StatementFailed)):
        lite.execute(f"VACUUM INTO '{tmp_path / 'copy.db'}'")
    assert not (tmp_path / "copy.db").exists()


def test_sqlite_a_failing_statement_leaves_the_rest(db_file: Path, lite: DbSession) -> None:
    lite.execute("UPDATE accounts SET balance = 5 WHERE name = 'bo'")
    with pytest.raises(StatementFailed, match="UNIQUE"):
        lite.execute("INSERT INTO accounts VALUES ('ana', 1)")
    lite.commit()
    assert balances(db_file) == [("ana", 10), ("bo", 5)]


def test_sqlite_a_hostile_schema_cannot_escape(tmp_path: Path, db_file: Path) -> None:
    with sqlite3.connect(db_file) as conn:
        conn.execute(
            "CREATE TRIGGER t AFTER UPDATE ON accounts "
            "BEGIN SELECT load_extension('/tmp/x.so'); END"
        )
        conn.execute("CREATE VIEW v AS SELECT * FROM pragma_database_list")
    session = open_sqlite(db_file, max_bytes=8 << 20)
    with pytest.raises(StatementRefused, match="load_extension.*trigger"):
        session.execute("UPDATE accounts SET balance = 0")
    with pytest.raises(
        (StatementRefused, StatementFailed), match="pragma_database_list|database_list"
    ):
        session.execute("SELECT * FROM v")
    assert session.execute("SELECT count(*) FROM accounts").rows == [[2]]
    session.close()


def test_sqlite_max_bytes_is_a_quota(db_file: Path) -> None:
    session = open_sqlite(db_file, max_bytes=64 << 10)
    with pytest.raises(StatementFailed, match="database or disk is full"):
        session.execute("CREATE TABLE big AS SELECT randomblob(500000) AS b")
    assert session.execute("SELECT count(*) FROM accounts").rows == [[2]]
    session.close()


def test_sqlite_the_deadline_interrupts_an_endless_query(db_file: Path) -> None:
    end = time.monotonic() + 0.2
    session = open_sqlite(db_file, max_bytes=8 << 20, deadline=lambda: end)
    endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT max(i) FROM n"
    with pytest.raises(StatementFailed, match="interrupted: the run's time is up"):
        session.execute(endless)
    session.close()


def test_sqlite_rows_are_capped(db_file: Path) -> None:
    session = open_sqlite(db_file, max_bytes=8 << 20, max_rows=10, max_reply_bytes=1 << 20)
    many = (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 50) SELECT i FROM n"
    )
    reply = session.execute(many)
    assert (len(reply.rows), reply.truncated) == (10, True)
    wide = session.execute("SELECT randomblob(600000) UNION ALL SELECT randomblob(600000)")
    assert (len(wide.rows), wide.truncated) == (1, True)
    session.close()


def test_sqlite_executemany_runs_one_statement_many_times(db_file: Path, lite: DbSession) -> None:
    reply = lite.executemany("INSERT INTO accounts VALUES (?, ?)", [["cy", 1], ["di", 2]])
    assert reply.rowcount == 2
    with pytest.raises(StatementRefused):
        lite.executemany("INSERT INTO accounts VALUES (?, ?); COMMIT", [["ed", 1]])
    lite.commit()
    assert len(balances(db_file)) == 4


@pytest.mark.sabotage
def test_sabotage_sqlite_without_the_authorizer_a_run_commits_itself(
    db_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_sqlite, "sqlite_authorize", lambda *args: None)
    session = open_sqlite(db_file, max_bytes=8 << 20)
    session.execute("UPDATE accounts SET balance = 0")
    with pytest.raises(StatementFailed):  # the savepoint is gone with the transaction
        session.execute("COMMIT")
    session.close()  # Undo comes too late: the program's COMMIT already kept its change
    assert balances(db_file) == [("ana", 0), ("bo", 0)]


# PostgreSQL -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(postgres_server: PostgresServer) -> Iterator[PostgresDatabase]:
    """A database of this module's own on the session's PostgreSQL server."""
    with postgres_server.database() as database:
        yield database


@pytest.fixture
def url(server: PostgresDatabase) -> str:
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS accounts, audit")
        conn.execute("CREATE TABLE accounts (name TEXT UNIQUE, balance INTEGER)")
        conn.execute("INSERT INTO accounts VALUES ('ana', 10), ('bo', 20)")
    return server.url


@pytest.fixture
def pg(url: str) -> Iterator[DbSession]:
    session = open_postgres(url, allow_private=True, statement_timeout_s=5)
    yield session
    session.close()


def pg_balances(url: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT name, balance FROM accounts ORDER BY name").fetchall()


@pytest.mark.postgres
def test_postgres_commit_keeps_changes_and_ddl(url: str, pg: DbSession) -> None:
    pg.execute("UPDATE accounts SET balance = %s WHERE name = %s", [99, "ana"])
    pg.execute("CREATE TABLE audit (x bytea, at timestamptz DEFAULT now())")
    pg.execute("INSERT INTO audit (x) VALUES (%(b)s)", {"b": {"$bytes": "AAE="}})
    assert pg_balances(url) == [("ana", 10), ("bo", 20)]  # nobody sees it before Keep
    pg.commit()
    assert pg_balances(url) == [("ana", 99), ("bo", 20)]
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT x FROM audit").fetchall() == [(b"\x00\x01",)]


@pytest.mark.postgres
def test_postgres_rollback_discards_changes_and_ddl(url: str, pg: DbSession) -> None:
    pg.execute("DELETE FROM accounts")
    pg.execute("CREATE TABLE audit (x int)")
    pg.rollback()
    assert pg_balances(url) == [("ana", 10), ("bo", 20)]
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT to_regclass('audit')::text").fetchall() == [(None,)]


@pytest.mark.postgres
def test_postgres_rows_come_back_json_safe(pg: DbSession) -> None:
    reply = pg.execute(
        "SELECT 1.50::numeric AS n, '\\xff'::bytea AS b, DATE '2024-01-02' AS d, "
        "'{\"a\": [1]}'::jsonb AS j, ARRAY[1, 2] AS a, NULL AS z, "
        "'00000000-0000-0000-0000-000000000001'::uuid AS u, 'NaN'::float8 AS f"
    )
    assert reply.columns == ["n", "b", "d", "j", "a", "z", "u", "f"]
    uuid = "00000000-0000-0000-0000-000000000001"
    assert reply.rows == [
        ["1.50", {"$bytes": "/w=="}, "2024-01-02", '{"a": [1]}', [1, 2], None, uuid, "nan"]
    ]


@pytest.mark.postgres
@pytest.mark.parametrize(
    "sql",
    [
        DOLLAR_COMMIT,
        "/* ; */ COMMIT",
        "SELECT pg_catalog.set_config('role', 'postgres', false)",
        "SELECT pg_terminate_backend(pg_backend_pid())",
        "COPY accounts TO PROGRAM 'id'",
        "SET ROLE postgres",
        "SET SESSION AUTHORIZATION postgres",
        "LISTEN x",
        "VACUUM",
        "DO $$ BEGIN COMMIT; END $$",
        "CALL p()",
    ],
)
def test_postgres_refuses_and_the_transaction_stays_usable(
    url: str, pg: DbSession, sql: str
) -> None:
    pg.execute("UPDATE accounts SET balance = 1")
    with pytest.raises(StatementRefused):
        pg.execute(sql)
    assert pg.execute("SELECT sum(balance) FROM accounts").rows == [[2]]
    assert pg_balances(url) == [("ana", 10), ("bo", 20)]
    pg.commit()
    assert pg_balances(url) == [("ana", 1), ("bo", 1)]


@pytest.mark.postgres
def test_postgres_parameters_are_bound_before_the_check(pg: DbSession) -> None:
    evil = "x'; COMMIT; --"
    pg.execute("UPDATE accounts SET name = %s WHERE name = 'ana'", [evil])
    assert pg.execute("SELECT name FROM accounts WHERE name = %s", [evil]).rows == [[evil]]
    assert pg.execute("SELECT '100%'").rows == [["100%"]]


@pytest.mark.postgres
@pytest.mark.parametrize(
    "value",
    ["x'); COMMIT; --", "\\'; COMMIT; --", "$$; COMMIT; SELECT $$", "%s %(a)s $1", "\\x00\\"],
)
def test_postgres_parameters_travel_apart_and_cannot_inject(
    url: str, pg: DbSession, value: str
) -> None:
    pg.execute("INSERT INTO accounts VALUES (%s, %s)", [value, 1])
    pg.execute("INSERT INTO accounts VALUES (%(name)s || '!', %(n)s)", {"name": value, "n": 2})
    reply = pg.execute("SELECT name FROM accounts WHERE balance < %s ORDER BY balance", [3])
    assert reply.rows == [[value], [value + "!"]]
    pg.rollback()
    assert pg_balances(url) == [("ana", 10), ("bo", 20)]


@pytest.mark.postgres
def test_postgres_the_policy_checks_the_text_the_server_runs(
    pg: DbSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[str] = []
    real = db_postgres.check_postgres
    monkeypatch.setattr(db_postgres, "check_postgres", lambda sql: checked.append(sql) or real(sql))
    update = "UPDATE accounts SET balance = %(b)s WHERE name = %(n)s OR %(b)s < 0"
    for i in range(50):
        pg.execute(update, {"b": i, "n": "ana"})
    assert pg.execute("SELECT $1::int + $2::int", [1, 2]).rows == [[3]]
    assert checked == [
        "UPDATE accounts SET balance = $1 WHERE name = $2 OR $1 < 0",
        "SELECT $1::int + $2::int",
    ]


def test_postgres_the_placeholder_converter_is_psycopgs() -> None:
    # Private psycopg API (psycopg>=3.2,<3.4): this fails loudly if it moves or changes.
    assert db_postgres._convert(b"SELECT %s, '%%', %b")[0] == b"SELECT $1, '%', $2"
    converted, parts, order = db_postgres._convert(b"SELECT %(a)s, %(b)s, %(a)s")
    assert (converted, order, len(parts)) == (b"SELECT $1, $2, $1", ["a", "b"], 4)


@pytest.mark.postgres
def test_postgres_a_cached_verdict_never_admits_another_text(url: str, pg: DbSession) -> None:
    for _ in range(2):
        assert pg.execute("SELECT pg_size_pretty(%s::bigint)", [1024]).rows == [["1024 bytes"]]
        with pytest.raises(StatementRefused, match="pg_read_file"):
            pg.execute("SELECT pg_read_file(%s)", ["/etc/passwd"])
    other = open_postgres(url, allow_private=True, statement_timeout_s=5)
    assert other.execute("SELECT pg_size_pretty(%s::bigint)", [1]).rows == [["1 bytes"]]
    other.close()


@pytest.mark.postgres
def test_postgres_a_new_session_consults_the_policy_afresh(
    url: str, pg: DbSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg.execute("UPDATE accounts SET balance = %s", [1])

    def refuse(sql: str) -> bool:
        raise StatementRefused("policy changed")

    monkeypatch.setattr(db_postgres, "check_postgres", refuse)
    fresh = open_postgres(url, allow_private=True, statement_timeout_s=5)
    with pytest.raises(StatementRefused, match="policy changed"):
        fresh.execute("UPDATE accounts SET balance = %s", [1])
    fresh.close()


@pytest.mark.postgres
def test_postgres_a_failing_bound_statement_leaves_the_transaction_usable(
    url: str, pg: DbSession
) -> None:
    insert = "INSERT INTO accounts VALUES (%s, %s)"
    for i in range(8):  # past psycopg's prepare threshold: the failing run is a prepared one
        pg.execute(insert, [f"n{i}", i])
    with pytest.raises(StatementFailed, match="duplicate key"):
        pg.execute(insert, ["ana", 1])
    with pytest.raises(StatementFailed, match="invalid input syntax"):
        pg.execute("UPDATE accounts SET balance = %s::int", ["many"])
    pg.execute(insert, ["cy", 3])
    assert pg.executemany(insert, [["di", 4], ["ed", 5]]).rowcount == 2
    with pytest.raises(StatementFailed, match="duplicate key"):
        pg.executemany(insert, [["fi", 6], ["bo", 7]])
    pg.commit()
    names = [name for name, _ in pg_balances(url)]
    assert names == sorted(["ana", "bo", "cy", "di", "ed", *(f"n{i}" for i in range(8))])


@pytest.mark.postgres
def test_postgres_a_failing_statement_does_not_abort_the_transaction(
    url: str, pg: DbSession
) -> None:
    pg.execute("UPDATE accounts SET balance = 5 WHERE name = 'bo'")
    with pytest.raises(StatementFailed, match="duplicate key"):
        pg.execute("INSERT INTO accounts VALUES ('ana', 1)")
    with pytest.raises(StatementFailed, match="does not exist"):
        pg.execute("SELECT * FROM nowhere")
    pg.execute("INSERT INTO accounts VALUES ('cy', 3)")
    pg.commit()
    assert pg_balances(url) == [("ana", 10), ("bo", 5), ("cy", 3)]


@pytest.mark.postgres
def test_postgres_the_statement_timeout_holds(url: str) -> None:
    session = open_postgres(url, allow_private=True, statement_timeout_s=0.2)
    with pytest.raises(StatementFailed, match="statement timeout"):
        session.execute("SELECT pg_sleep(30)")
    assert session.execute("SELECT 1").rows == [[1]]
    session.close()


@pytest.mark.postgres
def test_postgres_rows_are_capped_and_the_statement_stays_whole(url: str) -> None:
    session = open_postgres(url, allow_private=True, statement_timeout_s=5, max_rows=10)
    reply = session.execute(
        "INSERT INTO accounts SELECT 'n' || i, i FROM generate_series(1, 500) i RETURNING name"
    )
    assert (len(reply.rows), reply.truncated, reply.rowcount) == (10, True, 500)
    assert session.execute("SELECT count(*) FROM accounts").rows == [[502]]
    session.close()


@pytest.mark.postgres
def test_postgres_executemany(url: str, pg: DbSession) -> None:
    reply = pg.executemany("INSERT INTO accounts VALUES (%s, %s)", [["cy", 1], ["di", 2]])
    assert reply.rowcount == 2
    named = pg.executemany("INSERT INTO accounts VALUES (%(n)s, %(b)s)", [{"b": 3, "n": "ed"}])
    assert named.rowcount == 1
    pg.commit()
    assert len(pg_balances(url)) == 5


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("sql", "params"),
    [
        ("SELECT " + "(" * 10_000 + "1" + ")" * 10_000, None),
        ("SELECT " + "+".join(["1"] * 400_000), None),
        ("SELECT 1\x00; COMMIT", None),
        ("SELECT '\udc80'", None),
        ("SELECT %s", []),
        ("SELECT %s", [{"not": "bytes"}]),
        ("SELECT %s", [{"$bytes": "!!"}]),
        ("SELECT %(a)s", {"b": 1}),
    ],
)
def test_postgres_hostile_input_only_raises_policy_errors(
    pg: DbSession, sql: str, params: list | dict | None
) -> None:
    with pytest.raises((StatementRefused, StatementFailed)):
        pg.execute(sql, params)
    assert pg.execute("SELECT 1").rows == [[1]]


@pytest.mark.postgres
def test_postgres_the_password_never_shows(server: PostgresDatabase) -> None:
    wrong = server.url.replace(PASSWORD, "Wrong-" + PASSWORD)
    with pytest.raises(TransactionError) as failed:
        open_postgres(wrong, allow_private=True, statement_timeout_s=5)
    assert PASSWORD not in str(failed.value)
    session = open_postgres(server.url, allow_private=True, statement_timeout_s=5)
    for sql in [f"SELECT '{PASSWORD}'::int", f'SELECT * FROM "{PASSWORD}"']:
        with pytest.raises(StatementFailed) as error:
            session.execute(sql)
        assert PASSWORD not in str(error.value)
    session.close()


@pytest.mark.postgres
def test_postgres_refuses_private_addresses_unless_allowed(server: PostgresDatabase) -> None:
    with pytest.raises(EgressRefused):
        open_postgres(server.url, allow_private=False, statement_timeout_s=5)


@pytest.mark.postgres
@pytest.mark.parametrize(
    "suffix",
    ["?options=-c%20standard_conforming_strings%3Doff", "?sslkey=/etc/shadow", "?service=x"],
)
def test_postgres_refuses_url_settings_that_reach_host_files(
    server: PostgresDatabase, suffix: str
) -> None:
    with pytest.raises(StatementRefused, match="may not set"):
        open_postgres(server.url + suffix, allow_private=True, statement_timeout_s=5)


@pytest.mark.postgres
@pytest.mark.sabotage
def test_sabotage_postgres_without_the_policy_the_dollar_quote_commits(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Switched off: the parser check accepts everything, and the statement goes out by the
    # simple protocol (as the old in-sandbox driver sent it), which runs several commands.
    monkeypatch.setattr(db_postgres, "check_postgres", lambda sql: True)
    monkeypatch.setattr(
        db_postgres.PostgresSession,
        "_run",
        lambda self, cur, text, values, rows: (
            psycopg.ClientCursor(self._conn).execute(text) and db_postgres.Reply(None, [], 0, False)
        ),
    )
    session = open_postgres(url, allow_private=True, statement_timeout_s=5)
    with pytest.raises(StatementFailed):  # the host's RELEASE finds its savepoint committed
        session.execute(DOLLAR_COMMIT)
    session.close()  # Undo comes too late
    assert pg_balances(url) == [("ana", 0), ("bo", 0)]


# Issue 41: one statement per protocol message, on every path a statement takes (no rows,
# rows, executemany), even when the text holds more than the parser saw.
SMUGGLED = {
    "no rows": lambda pg: pg.execute("UPDATE accounts SET balance = 0; COMMIT"),
    "rows": lambda pg: pg.execute("SELECT 1; UPDATE accounts SET balance = 0; COMMIT"),
    "executemany": lambda pg: pg.executemany("UPDATE accounts SET balance = 0; COMMIT", [[]]),
}


def smuggle_breaches(url: str, pg: DbSession, path: str) -> list[str]:
    try:
        SMUGGLED[path](pg)
    except StatementFailed as exc:
        if "multiple commands" not in str(exc) and "the run stops" not in str(exc):
            return [f"an unexpected failure: {exc}"]
    pg.rollback()
    return [] if pg_balances(url) == [("ana", 10), ("bo", 20)] else ["committed by the program"]


@pytest.mark.postgres
@pytest.mark.parametrize("path", sorted(SMUGGLED))
def test_deny_postgres_runs_one_statement_per_message(url, pg, path, monkeypatch) -> None:
    monkeypatch.setattr(db_postgres, "check_postgres", lambda sql: sql.startswith("SELECT"))
    assert smuggle_breaches(url, pg, path) == []


@pytest.mark.postgres
@pytest.mark.sabotage
@pytest.mark.parametrize("path", ["no rows", "executemany"])
def test_sabotage_postgres_without_the_extended_protocol_a_text_runs_several(
    url, pg, path, monkeypatch
) -> None:
    monkeypatch.setattr(db_postgres, "check_postgres", lambda sql: False)
    switch_off_extended_protocol_here(monkeypatch)
    assert smuggle_breaches(url, pg, path) == ["committed by the program"]


@pytest.mark.postgres
def test_postgres_cancel_from_another_thread_ends_the_statement(url, pg) -> None:
    # executed on a thread, as the broker does; cancel() comes from the one finishing the run
    failure: list[Exception] = []
    worker = threading.Thread(target=sleep_on, args=(pg, failure))
    worker.start()
    wait_until(lambda: active_sleeps(url))
    pg.cancel()
    worker.join()
    assert "canceling statement" in str(failure[0])
    assert active_sleeps(url) == []
    assert pg.execute("SELECT 1").rows == [[1]]  # the statement failed alone
    pg.commit()


def sleep_on(pg: DbSession, failure: list[Exception]) -> None:
    try:
        pg.execute("SELECT pg_sleep(60)")
    except StatementFailed as exc:
        failure.append(exc)


def wait_until(ready: Callable[[], object], within_s: float = 30) -> None:
    end = time.monotonic() + within_s
    while not ready():
        assert time.monotonic() < end, "the statement never started"
        time.sleep(0.05)


def active_sleeps(url: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE state = 'active' "
            "AND query LIKE '%pg_sleep(60)%' AND pid <> pg_backend_pid()"
        ).fetchall()


@pytest.mark.postgres
def test_postgres_a_statement_deaf_to_cancel_loses_its_connection(url, monkeypatch) -> None:
    assert sever_breaches(url, monkeypatch) == []


@pytest.mark.postgres
@pytest.mark.sabotage
def test_sabotage_postgres_without_the_cut_a_deaf_statement_holds_its_thread(
    url, monkeypatch
) -> None:
    monkeypatch.setattr(db_postgres.PostgresSession, "_sever", lambda self: None)
    assert sever_breaches(url, monkeypatch) == ["the statement still holds its thread"]


@pytest.mark.postgres
@pytest.mark.sabotage
def test_sabotage_postgres_without_the_check_interval_the_server_runs_on(url, monkeypatch) -> None:
    monkeypatch.setattr(db_postgres, "_NEWER_SETTINGS", "SELECT 1")
    monkeypatch.setitem(db_postgres._PINNED, "client_connection_check_interval", ("0",))
    assert sever_breaches(url, monkeypatch) == ["the server still runs the statement"]


def sever_breaches(url: str, monkeypatch) -> list[str]:
    """A statement the server does not stop on a cancel request (simulated: the request is
    never sent): cancel() must still free the thread waiting on it, and the server end it
    (its own statement_timeout, 120 s, out of play)."""
    monkeypatch.setattr(psycopg.Connection, "cancel_safe", lambda self, timeout=0: None)
    pg = open_postgres(url, allow_private=True, statement_timeout_s=120)
    failure: list[Exception] = []
    worker = threading.Thread(target=sleep_on, args=(pg, failure))
    worker.start()
    wait_until(lambda: active_sleeps(url))
    pg.cancel()
    found = []
    if worker.is_alive():
        found.append("the statement still holds its thread")
        with psycopg.connect(url, autocommit=True) as conn:
            for (pid,) in active_sleeps(url):
                conn.execute("SELECT pg_cancel_backend(%s)", [pid])
    worker.join()
    for _ in range(100):  # the server notices the cut within its check interval (1 s)
        if not active_sleeps(url):
            break
        time.sleep(0.1)
    else:
        found.append("the server still runs the statement")
        with psycopg.connect(url, autocommit=True) as conn:
            for (pid,) in active_sleeps(url):
                conn.execute("SELECT pg_cancel_backend(%s)", [pid])
    pg.close()
    return found
