"""A rehearsal's verdict reads the rows of the touched tables only, and ends the transaction:
the sessions themselves (no sandbox), a real SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from executor.kinds import db_digest, db_postgres, db_sqlite
from executor.kinds.db_engines import open_postgres, open_sqlite
from tests.servers import PostgresDatabase, PostgresServer

SETUP = [
    "CREATE TABLE accounts (name TEXT, balance INTEGER)",
    "INSERT INTO accounts VALUES ('ana', 10), ('bo', 20)",
    "CREATE TABLE ledger (what TEXT)",
    "INSERT INTO ledger VALUES ('opened')",
]


@pytest.fixture
def db_file(tmp_path: Path) -> Path:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        for statement in SETUP:
            conn.execute(statement)
    conn.close()
    return path


def test_sqlite_reads_the_touched_tables_rows_only(db_file: Path, monkeypatch) -> None:
    read: list[str] = []
    rows = db_digest._sqlite_rows
    monkeypatch.setattr(
        db_digest, "_sqlite_rows", lambda conn, name: (read.append(name), rows(conn, name))[1]
    )
    original = db_file.read_bytes()
    session = open_sqlite(db_file, max_bytes=8 << 20)
    try:
        session.rehearsal_begin()
        assert read == []  # the start notes the catalog only
        session.execute("UPDATE accounts SET balance = balance + 1 WHERE name = 'ana'")
        verdict = session.rehearsal_verdict()
    finally:
        session.close()
    assert read == ["accounts", "accounts"]  # as it stands, then as it was
    assert verdict["restored"] is False
    [rows_diff] = verdict["diff"]
    assert rows_diff["missing_rows"] == ["(name, balance) = ('ana', 10)"]
    assert rows_diff["extra_rows"] == ["(name, balance) = ('ana', 11)"]
    assert db_file.read_bytes() == original  # rolled back


def test_sqlite_a_table_whose_schema_moved_is_read(db_file: Path) -> None:
    session = open_sqlite(db_file, max_bytes=8 << 20)
    try:
        session.rehearsal_begin()
        session.execute("ALTER TABLE ledger ADD COLUMN note TEXT DEFAULT 'x'")
        verdict = session.rehearsal_verdict()
    finally:
        session.close()
    assert [d["change"] for d in verdict["diff"]] == ["schema", "rows"]


@pytest.fixture(scope="module")
def pg_database(postgres_server: PostgresServer) -> Iterator[PostgresDatabase]:
    with postgres_server.database() as database:
        yield database


@pytest.mark.postgres
def test_postgres_reads_the_touched_tables_rows_only(pg_database, monkeypatch) -> None:
    with psycopg.connect(pg_database.url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS accounts, ledger")
        for statement in SETUP:
            conn.execute(statement)
    read: list[set[str]] = []
    state = db_postgres.postgres_state

    def recording(conn, catalog, rows_of):
        read.append(set(rows_of))
        return state(conn, catalog, rows_of)

    monkeypatch.setattr(db_postgres, "postgres_state", recording)
    session = open_postgres(
        pg_database.url, allow_private=True, statement_timeout_s=30, repeatable_read=True
    )
    try:
        session.rehearsal_begin()
        session.execute("UPDATE accounts SET balance = balance + 1 WHERE name = 'ana'")
        verdict = session.rehearsal_verdict()
    finally:
        session.close()
    assert read == [{"public.accounts"}, {"public.accounts"}]
    assert verdict["restored"] is False
    [rows_diff] = verdict["diff"]
    assert rows_diff["missing_rows"] == ["(ana,10)"]
    assert rows_diff["extra_rows"] == ["(ana,11)"]
    with psycopg.connect(pg_database.url) as conn:  # rolled back
        assert conn.execute("SELECT balance FROM accounts WHERE name = 'ana'").fetchone() == (10,)


def test_sqlite_a_long_row_is_kept_as_its_hash_and_shown_by_its_start(db_file: Path) -> None:
    with sqlite3.connect(db_file) as conn:
        conn.execute("INSERT INTO ledger VALUES (?)", ("a" * 1000,))
    conn.close()
    session = open_sqlite(db_file, max_bytes=8 << 20)
    try:
        session.rehearsal_begin()
        session.execute("UPDATE ledger SET what = substr(what, 1, 999) || 'b' WHERE what LIKE 'a%'")
        verdict = session.rehearsal_verdict()
    finally:
        session.close()
    [rows_diff] = verdict["diff"]
    [missing], [extra] = rows_diff["missing_rows"], rows_diff["extra_rows"]
    assert missing.startswith("(what) = ('aaaa") and extra.startswith("(what) = ('aaaa")
    assert missing != extra  # the same first characters, another hash
    assert len(missing) < db_digest.MAX_ROW_CHARS + 20


def rehearse_a_trigger_added_after_its_statement_ran(db_file: Path) -> dict:
    """The same UPDATE text twice (SQLite's statement cache), a trigger created between: the
    second run re-prepares it, with the trigger's write, past the authorizer again."""
    session = open_sqlite(db_file, max_bytes=8 << 20)
    try:
        session.rehearsal_begin()
        session.execute("UPDATE accounts SET balance = balance + 1")
        session.execute("UPDATE accounts SET balance = balance - 1")
        session.execute(
            "CREATE TRIGGER log AFTER UPDATE ON accounts BEGIN INSERT INTO ledger VALUES ('x'); END"
        )
        session.execute("UPDATE accounts SET balance = balance + 1")
        session.execute("DROP TRIGGER log")
        session.execute("UPDATE accounts SET balance = balance - 1")
        return session.rehearsal_verdict()
    finally:
        session.close()


def test_deny_a_trigger_added_after_its_statement_ran_is_seen(db_file: Path) -> None:
    verdict = rehearse_a_trigger_added_after_its_statement_ran(db_file)
    assert verdict["restored"] is False
    assert [(d["table"], d["extra"]) for d in verdict["diff"]] == [("ledger", 2)]


@pytest.mark.sabotage
def test_sabotage_without_the_authorizers_record_the_triggers_write_passes(
    db_file: Path, monkeypatch
) -> None:
    monkeypatch.setattr(db_sqlite, "_WRITES_ARG1", frozenset())
    monkeypatch.setattr(db_sqlite, "_WRITES_ARG2", frozenset())
    verdict = rehearse_a_trigger_added_after_its_statement_ran(db_file)
    assert verdict["restored"] is True  # wrong: ledger holds two rows more
