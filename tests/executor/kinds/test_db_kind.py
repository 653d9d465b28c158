"""The db kind on SQLite in real bwrap sandboxes: the transaction waits for Keep or Undo."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from executor.kinds.db import DbTarget
from executor.kinds.db_run import DbRun
from executor.kinds.fs import FsWorkspace
from executor.spec import RunSpec


@pytest.fixture
def workspace(place: Path) -> FsWorkspace:
    root = place / "files"
    root.mkdir()
    with sqlite3.connect(root / "app.db") as conn:
        conn.execute("CREATE TABLE accounts (name TEXT, balance INTEGER)")
        conn.executemany("INSERT INTO accounts VALUES (?, ?)", [("ana", 10), ("bo", 20)])
    conn.close()
    return FsWorkspace(root, place / "state")


def start(backend, limits, workspace, place, code, *, timeout_s=60.0):
    return DbRun(
        backend,
        RunSpec(code=code),
        limits=limits,
        target=DbTarget(sqlite_path="app.db"),
        control_base=place,
        run_id="r1",
        workspace=workspace,
        timeout_s=timeout_s,
    )


def rows(workspace: FsWorkspace, sql: str) -> list[tuple]:
    conn = sqlite3.connect(workspace.root / "app.db")
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_a_created_table_is_gone_after_undo(backend, limits, workspace, place):
    run = start(backend, limits, workspace, place, "db.execute('CREATE TABLE users (name TEXT)')")
    assert run.wait_pending()["event"] == "pending"
    result = run.undo()
    assert result.ok, result.stderr
    assert run.outcome == "rolled_back:undo"
    assert rows(workspace, "SELECT name FROM sqlite_master WHERE name='users'") == []
    assert workspace.pending() is None


def test_three_inserted_users_are_there_after_keep(backend, limits, workspace, place):
    code = (
        "db.execute('CREATE TABLE users (name TEXT)')\n"
        "db.executemany('INSERT INTO users VALUES (?)', [('a',), ('b',), ('c',)])\n"
        "print(len(db.execute('SELECT * FROM users')))\n"
    )
    run = start(backend, limits, workspace, place, code)
    assert run.wait_pending()["event"] == "pending"
    result = run.keep()
    assert run.outcome == "committed"
    assert "3 row(s) affected" in result.stdout
    assert "3\n" in result.stdout
    assert rows(workspace, "SELECT count(*) FROM users") == [(3,)]


def test_added_balances_are_unchanged_after_undo(backend, limits, workspace, place):
    code = "print(db.execute('UPDATE accounts SET balance = balance + 500').rowcount)"
    run = start(backend, limits, workspace, place, code)
    assert run.wait_pending()["event"] == "pending"
    result = run.undo()
    assert result.stdout.startswith("[db] UPDATE accounts SET balance = balance + 500 -> 2 row(s)")
    assert rows(workspace, "SELECT name, balance FROM accounts ORDER BY name") == [
        ("ana", 10),
        ("bo", 20),
    ]


def test_a_pending_transaction_rolls_back_by_itself_after_the_timeout(
    backend, limits, workspace, place
):
    run = start(
        backend, limits, workspace, place, "db.execute('DELETE FROM accounts')", timeout_s=1
    )
    assert run.wait_pending()["event"] == "pending"
    result = run.wait(timeout_s=30)
    assert run.outcome == "rolled_back:timeout"
    assert "rolled back after timeout" in result.stdout
    assert rows(workspace, "SELECT count(*) FROM accounts") == [(2,)]


def test_the_code_cannot_commit_behind_the_persons_back(backend, limits, workspace, place):
    code = "db.execute('DELETE FROM accounts')\ndb.commit()\ndb.execute('select 1; COMMIT')\n"
    run = start(backend, limits, workspace, place, code)
    assert run.wait_pending() == {"event": "rolled_back", "reason": "failed"}
    result = run.wait(timeout_s=30)
    assert result.exit_code == 1
    assert "transaction control is not allowed" in result.stderr
    assert rows(workspace, "SELECT count(*) FROM accounts") == [(2,)]


def test_a_failing_program_leaves_the_database_as_it_was(backend, limits, workspace, place):
    code = "db.execute('DROP TABLE accounts')\nraise RuntimeError('boom')"
    run = start(backend, limits, workspace, place, code)
    assert run.wait_pending()["event"] == "rolled_back"
    result = run.wait(timeout_s=30)
    assert "RuntimeError: boom" in result.stderr
    assert rows(workspace, "SELECT count(*) FROM accounts") == [(2,)]
    assert workspace.pending() is None
