"""The db kind on SQLite in real bwrap sandboxes: the host holds the transaction until Keep or
Discard."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from db_runs import run_db, run_past_its_end, switch_off, switch_off_sqlite_guards

from executor.kinds.db import SqliteTarget
from executor.kinds.errors import NothingPending
from executor.kinds.fs import FsWorkspace


@pytest.fixture
def workspace(place: Path) -> FsWorkspace:
    root = place / "files"
    root.mkdir()
    with sqlite3.connect(root / "app.db") as conn:
        conn.execute("CREATE TABLE accounts (name TEXT, balance INTEGER)")
        conn.executemany("INSERT INTO accounts VALUES (?, ?)", [("ana", 10), ("bo", 20)])
    conn.close()
    return FsWorkspace(root, place / "state")


@pytest.fixture
def target(workspace: FsWorkspace) -> SqliteTarget:
    return SqliteTarget(workspace=workspace, path="app.db")


def rows(workspace: FsWorkspace, sql: str) -> list[tuple]:
    conn = sqlite3.connect(workspace.root / "app.db")
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_a_created_table_is_gone_after_undo(backend, limits, place, workspace, target):
    code = "db.execute('CREATE TABLE users (name TEXT)')"
    result, outcome = run_db(backend, limits, place, target, code)
    assert result.ok, result.stderr
    assert outcome.pending is not None
    outcome.pending.undo()
    assert rows(workspace, "SELECT name FROM sqlite_master WHERE name='users'") == []
    assert workspace.pending() is None


def test_three_inserted_users_are_there_after_keep(backend, limits, place, workspace, target):
    code = (
        "db.execute('CREATE TABLE users (name TEXT)')\n"
        "db.executemany('INSERT INTO users VALUES (?)', [('a',), ('b',), ('c',)])\n"
        "print(len(db.execute('SELECT * FROM users')))\n"
    )
    result, outcome = run_db(backend, limits, place, target, code)
    assert "3 row(s) affected" in result.stdout
    # A statement without a row count says it was done, never "-1 row(s) affected".
    assert "[db] CREATE TABLE users (name TEXT) -> done\n" in result.stdout
    assert "-1" not in result.stdout
    assert "3\n" in result.stdout
    assert rows(workspace, "SELECT count(*) FROM sqlite_master WHERE name='users'") == [(0,)]
    outcome.pending.keep()
    assert rows(workspace, "SELECT count(*) FROM users") == [(3,)]
    assert [e["sql"] for e in outcome.log.entries][0] == "CREATE TABLE users (name TEXT)"
    with pytest.raises(NothingPending):
        outcome.pending.undo()


def test_rows_and_bytes_come_back_as_python_values(backend, limits, place, target):
    code = (
        "db.execute('CREATE TABLE blobs (b BLOB, f REAL, n)')\n"
        "db.execute('INSERT INTO blobs VALUES (?, ?, ?)', [b'\\x00\\xff', 1.5, None])\n"
        "print(db.execute('SELECT b, f, n FROM blobs') == [(b'\\x00\\xff', 1.5, None)])\n"
    )
    result, outcome = run_db(backend, limits, place, target, code)
    assert result.stdout.splitlines()[-1] == "True", result.stdout + result.stderr
    outcome.pending.undo()


def test_added_balances_are_unchanged_after_undo(backend, limits, place, workspace, target):
    code = "print(db.execute('UPDATE accounts SET balance = balance + 500').rowcount)"
    result, outcome = run_db(backend, limits, place, target, code)
    assert result.stdout.startswith("[db] UPDATE accounts SET balance = balance + 500 -> 2 row(s)")
    outcome.pending.undo()
    assert rows(workspace, "SELECT name, balance FROM accounts ORDER BY name") == [
        ("ana", 10),
        ("bo", 20),
    ]


def test_the_code_cannot_commit_behind_the_persons_back(backend, limits, place, workspace, target):
    code = (
        "db.execute('DELETE FROM accounts')\n"
        "db.commit()\n"
        "for sql in ('COMMIT', 'END', 'select 1; COMMIT', 'PRAGMA journal_mode=OFF'):\n"
        "    try:\n"
        "        db.execute(sql)\n"
        "    except db.Error as exc:\n"
        "        print('refused:', sql)\n"
    )
    result, outcome = run_db(backend, limits, place, target, code)
    assert result.stdout.count("refused:") == 4, result.stdout + result.stderr
    assert outcome.log.refused == 4
    outcome.pending.undo()
    assert rows(workspace, "SELECT count(*) FROM accounts") == [(2,)]


def test_a_failing_program_leaves_the_database_as_it_was(backend, limits, place, workspace, target):
    code = "db.execute('DROP TABLE accounts')\nraise RuntimeError('boom')"
    result, outcome = run_db(backend, limits, place, target, code)
    assert "RuntimeError: boom" in result.stderr
    assert outcome.pending is None
    assert rows(workspace, "SELECT count(*) FROM accounts") == [(2,)]
    assert workspace.pending() is None


BAIT_SQL = "SELECT secret FROM bait.t"


def attach_host_file(bait: Path) -> str:
    """Code that asks the host's SQLite to open a file of the host (the app's own database):
    SQLite itself refuses ATTACH and VACUUM inside a transaction, so it tries COMMIT first."""
    return (
        f"for sql in ('COMMIT', {f'ATTACH DATABASE {str(bait)!r} AS bait'!r}, "
        f"{f'VACUUM INTO {str(bait) + chr(46) + chr(99)!r}'!r}, {BAIT_SQL!r}):\n"
        "    try:\n"
        "        print('ran:', db.execute(sql))\n"
        "    except db.Error as exc:\n"
        "        print('refused:', exc)\n"
    )


def host_file_breaches(backend, limits, place, target, bait: Path) -> list[str]:
    """What the run got of, or did to, files of the host through the host's connection."""
    result, outcome = run_db(backend, limits, place, target, attach_host_file(bait))
    if outcome.pending is not None:
        outcome.pending.undo()
    found = []
    if "host-secret" in result.stdout:
        found.append("read a table of a host file through ATTACH")
    if Path(f"{bait}.c").exists():
        found.append("wrote a host file through VACUUM INTO")
    return found


@pytest.fixture
def bait(place: Path) -> Path:
    path = place / "host-app.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (secret TEXT)")
        conn.execute("INSERT INTO t VALUES ('host-secret')")
    conn.close()
    return path


def test_deny_the_code_cannot_open_host_files_through_the_hosts_sqlite(
    backend, limits, place, target, bait
):
    assert host_file_breaches(backend, limits, place, target, bait) == []


@pytest.mark.sabotage
def test_sabotage_without_the_authorizer_the_code_reads_host_files(
    backend, limits, place, target, bait, monkeypatch
):
    switch_off_sqlite_guards(monkeypatch)
    assert host_file_breaches(backend, limits, place, target, bait) != []


# Issue 41, finding 2 on SQLite: a statement the run started must end with the run (a Stop, a
# crash or its wall time), not when the session's own deadline comes.
ENDLESS = (
    "db.execute('WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
    "SELECT count(*) FROM c')\n"
)


def endless_breaches(backend, place, target) -> list[str]:
    _, found = run_past_its_end(backend, place, target, ENDLESS)
    return found


def test_deny_a_long_sqlite_statement_ends_with_its_run(backend, place, workspace, target):
    assert endless_breaches(backend, place, target) == []
    assert rows(workspace, "SELECT count(*) FROM accounts") == [(2,)]


@pytest.mark.sabotage
def test_sabotage_without_the_interrupt_a_sqlite_statement_outlives_its_run(
    backend, place, target, monkeypatch
):
    switch_off(monkeypatch, "sqlite cancel")
    assert endless_breaches(backend, place, target) != []
