"""Verified undo on PostgreSQL: a rollback proves the tables the run touched are as the run
found them, and a rollback that does not restore them raises the alarm."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import psycopg
import pytest
from db_runs import in_db_process, run_db

from executor.kinds.db import PostgresTarget
from tests.servers import PostgresDatabase, PostgresServer

pytestmark = pytest.mark.postgres

# What a broken rollback does: it commits the run's changes instead.
ROLLBACK_COMMITS = (
    "from executor.kinds import db_rollback_check\n"
    "db_rollback_check._end_transaction = lambda conn: conn.commit()\n"
)
DIGEST_OFF = (
    "from executor.kinds import db_rollback_check\n"
    "from executor.kinds.db_digest import DbState\n"
    "db_rollback_check.postgres_state = lambda *args: DbState({}, {})\n"
)


@pytest.fixture(scope="module")
def server(postgres_server: PostgresServer) -> Iterator[PostgresDatabase]:
    with postgres_server.database() as database:
        yield database


@pytest.fixture
def url(server: PostgresDatabase) -> Iterator[str]:
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS accounts, audit_trail, made")
        conn.execute("CREATE TABLE accounts (name TEXT, balance INTEGER)")
        conn.execute("INSERT INTO accounts VALUES ('ana', 10), ('bo', 20)")
        conn.execute("CREATE TABLE audit_trail (what TEXT)")
        conn.execute(
            "CREATE OR REPLACE FUNCTION note() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN INSERT INTO audit_trail VALUES ('touched'); RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER noted AFTER UPDATE ON accounts FOR EACH ROW EXECUTE FUNCTION note()"
        )
    yield server.url


def undone(backend, limits, place, url, code):
    result, outcome = run_db(
        backend,
        limits,
        place,
        PostgresTarget(url=url),
        code,
        env={"DATABASE_URL": url},
        hide_env=("DATABASE_URL",),
    )
    assert outcome.pending is not None, result.stderr
    return outcome.pending.undo()


def alarms(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


UPDATE = "db.execute('UPDATE accounts SET balance = balance + 500')"


def test_a_rollback_proves_the_touched_tables_are_as_before(backend, limits, place, url, caplog):
    check = undone(
        backend, limits, place, url, UPDATE + "\ndb.execute('CREATE TABLE made (n int)')"
    )
    assert check is not None and check.matched and check.before
    # The trigger's write counts as touched, and so does the table the run created.
    assert check.tables == ("public.accounts", "public.audit_trail", "public.made")
    assert check.as_json()["tables"] == list(check.tables)
    assert not alarms(caplog)


def test_deny_a_rollback_that_does_not_restore_raises_the_alarm(
    backend, limits, place, url, caplog, monkeypatch
):
    in_db_process(monkeypatch, ROLLBACK_COMMITS)
    check = undone(backend, limits, place, url, UPDATE)
    assert check is not None and not check.matched
    [alarm] = alarms(caplog)
    assert "rollback left a state other than before the run" in alarm.getMessage()
    assert (alarm.before, alarm.after) == (check.before, check.after)  # type: ignore[attr-defined]


def test_sabotage_without_the_table_digests_the_broken_rollback_passes(
    backend, limits, place, url, caplog, monkeypatch
):
    in_db_process(monkeypatch, ROLLBACK_COMMITS + DIGEST_OFF)
    check = undone(backend, limits, place, url, UPDATE)
    assert check is not None and check.matched  # the verification switched off misses it
    assert not alarms(caplog)
