"""The db kind on a real PostgreSQL server, reached only through the host-side relay."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from postgres_server import PostgresServer

from executor.kinds.db import DbTarget
from executor.kinds.db_run import DbRun
from executor.kinds.netpolicy import EgressRefused
from executor.spec import RunSpec

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    pg = PostgresServer()
    yield pg
    pg.stop()


@pytest.fixture
def url(server: PostgresServer) -> Iterator[str]:
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS users, accounts")
        conn.execute("CREATE TABLE accounts (name TEXT, balance INTEGER)")
        conn.execute("INSERT INTO accounts VALUES ('ana', 10), ('bo', 20)")
    yield server.url


def start(backend, limits, place, url, code, *, allow_private=True, timeout_s=60.0):
    return DbRun(
        backend,
        RunSpec(code=code, env={"DATABASE_URL": url}),
        limits=limits,
        target=DbTarget(postgres_url_env="DATABASE_URL"),
        control_base=place,
        run_id="pg1",
        allow_private=allow_private,
        timeout_s=timeout_s,
    )


def fetch(url: str, sql: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


def test_a_created_table_is_gone_after_undo(backend, limits, place, url):
    run = start(backend, limits, place, url, "db.execute('CREATE TABLE users (name TEXT)')")
    assert run.wait_pending()["event"] == "pending"
    run.undo()
    assert run.outcome == "rolled_back:undo"
    assert fetch(url, "SELECT to_regclass('users')::text") == [(None,)]


def test_three_inserted_users_are_there_after_keep(backend, limits, place, url):
    code = (
        "db.execute('CREATE TABLE users (name TEXT)')\n"
        "db.execute(\"INSERT INTO users VALUES ('a'), ('b'), ('c')\")\n"
    )
    run = start(backend, limits, place, url, code)
    assert run.wait_pending()["event"] == "pending"
    result = run.keep()
    assert "3 row(s) affected" in result.stdout
    assert fetch(url, "SELECT count(*) FROM users") == [(3,)]


def test_added_balances_are_unchanged_after_undo(backend, limits, place, url):
    run = start(
        backend, limits, place, url, "db.execute('UPDATE accounts SET balance = balance + 500')"
    )
    assert run.wait_pending()["event"] == "pending"
    run.undo()
    assert fetch(url, "SELECT name, balance FROM accounts ORDER BY name") == [
        ("ana", 10),
        ("bo", 20),
    ]


def test_the_code_cannot_see_the_url_or_open_a_second_connection(backend, limits, place, url):
    code = (
        "import os, psycopg2\n"
        "print('DATABASE_URL' in os.environ)\n"
        "try:\n"
        "    psycopg2.connect(host='/run/undoable/pg', port=5432, user='postgres',\n"
        "                     password='kinds-test-pw', dbname='postgres', connect_timeout=5)\n"
        "except psycopg2.OperationalError:\n"
        "    print('second connection refused')\n"
    )
    run = start(backend, limits, place, url, code)
    assert run.wait_pending()["event"] == "pending"
    result = run.undo()
    assert result.stdout.splitlines()[:2] == ["False", "second connection refused"]


def test_a_database_on_the_hosts_loopback_is_refused_without_the_setting(
    backend, limits, place, url
):
    with pytest.raises(EgressRefused, match="internal address"):
        start(backend, limits, place, url, "db.execute('SELECT 1')", allow_private=False)
