"""A db rehearsal reads the rows of the tables the programs touched only: each way a table can
be touched without the programs' statements naming it is seen (a trigger's write, a TRUNCATE),
the state before is the one the transaction began from (not another session's later commit),
and a row's text keeps what SQLite's quote() would cut. Each with the protection switched off
in the db process, where the verdict is read (sabotage)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from db_runs import in_db_process

from executor.kinds import rehearsal
from executor.kinds.db import PostgresTarget, SqliteTarget
from executor.kinds.job import Job
from executor.kinds.sandbox import sandbox_host_uid
from executor.result import RunResult
from executor.spec import RunSpec
from tests.executor.kinds.undo_pairs import (
    postgres_reset,
    reverse_for,
    runner,
    sqlite_workspace,
)
from tests.servers import PostgresDatabase, PostgresServer

TRIGGER_PAIR = (
    "db.execute(\"UPDATE events SET what = 'stop'\")",
    "db.execute(\"UPDATE events SET what = 'start'\")",
)
# SQLite's authorizer names no table to the host: nothing is seen written.
AUTHORIZER_RECORD_OFF = (
    "from executor.kinds import db_sqlite\n"
    "db_sqlite._WRITES_ARG1 = frozenset()\n"
    "db_sqlite._WRITES_ARG2 = frozenset()\n"
)


def sqlite_rehearsal(
    backend, limits, place, forward: str, reverse: str, setup: str = ""
) -> rehearsal.Rehearsal:
    workspace = sqlite_workspace(place)
    if setup:
        with sqlite3.connect(workspace.root / "app.db") as conn:
            conn.execute(setup)
        conn.close()
    return rehearsal.rehearse_db(
        RunSpec(code=forward),
        reverse_for(reverse),
        limits=limits,
        target=SqliteTarget(workspace=workspace, path="app.db"),
        control_base=place,
        run_id="rehearsal",
        run=runner(backend),
        owner_uid=sandbox_host_uid(backend),
    )


def test_deny_a_table_only_a_trigger_writes_is_read(backend, limits, place):
    verdict = sqlite_rehearsal(backend, limits, place, *TRIGGER_PAIR)
    assert verdict.reverse is not None and verdict.reverse.ok
    assert verdict.restored is False
    assert [(d["table"], d["extra"]) for d in verdict.diff] == [("audit", 2)]


@pytest.mark.sabotage
def test_sabotage_without_the_authorizers_record_a_trigger_write_passes(
    backend, limits, place, monkeypatch
):
    in_db_process(monkeypatch, AUTHORIZER_RECORD_OFF)
    verdict = sqlite_rehearsal(backend, limits, place, *TRIGGER_PAIR)
    assert verdict.restored is True  # wrong: audit holds two rows more


# A text holding a NUL, which SQLite's quote() cuts there; the reverse program restores it
# with another byte after the NUL.
WITH_NUL = "INSERT INTO settings VALUES ('nul', 'a' || char(0) || 'b')"
NUL_PAIR = (
    "db.execute(\"UPDATE settings SET value = 'z' WHERE key = 'nul'\")",
    "db.execute(\"UPDATE settings SET value = 'a' || char(0) || 'c' WHERE key = 'nul'\")",
)


def test_deny_a_text_that_differs_after_its_nul_differs(backend, limits, place):
    verdict = sqlite_rehearsal(backend, limits, place, *NUL_PAIR, setup=WITH_NUL)
    assert verdict.restored is False
    assert verdict.diff[0]["missing_rows"] == ["(key, value) = ('nul', TX'610062')"]
    assert verdict.diff[0]["extra_rows"] == ["(key, value) = ('nul', TX'610063')"]


@pytest.mark.sabotage
def test_sabotage_quote_alone_cuts_a_text_at_its_nul(backend, limits, place, monkeypatch):
    in_db_process(
        monkeypatch,
        "from executor.kinds import db_digest\n"
        "db_digest._sqlite_value = lambda column: f'quote({column})'\n",
    )
    verdict = sqlite_rehearsal(backend, limits, place, *NUL_PAIR, setup=WITH_NUL)
    assert verdict.restored is True  # wrong: the text after the NUL differs


@pytest.fixture(scope="module")
def pg_database(postgres_server: PostgresServer) -> Iterator[PostgresDatabase]:
    with postgres_server.database() as database:
        yield database


AUDITED = [
    "DROP TABLE IF EXISTS audit",
    "CREATE TABLE audit (what text)",
    "CREATE OR REPLACE FUNCTION users_audit() RETURNS trigger LANGUAGE plpgsql AS"
    " $$ BEGIN INSERT INTO audit VALUES ('upd'); RETURN NEW; END $$",
    "CREATE TRIGGER users_audit AFTER UPDATE ON users FOR EACH ROW EXECUTE FUNCTION users_audit()",
]


def pg_rehearsal(
    backend,
    limits,
    place,
    url: str,
    forward: str,
    reverse: str,
    between: Callable[[], None] | None = None,
) -> rehearsal.Rehearsal:
    run = runner(backend)
    runs: list[Any] = []

    def run_then(job: Job) -> RunResult:
        result = run(job)
        runs.append(result)
        if between is not None and len(runs) == 1:
            between()  # after the forward program, before the reverse one
        return result

    return rehearsal.rehearse_db(
        RunSpec(code=forward),
        reverse_for(reverse),
        limits=limits,
        target=PostgresTarget(url=url),
        control_base=place,
        run_id="rehearsal",
        run=run_then,
        owner_uid=sandbox_host_uid(backend),
        allow_private=True,
    )


def pg_setup(url: str, statements: list[str]) -> None:
    postgres_reset(url)
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


BALANCE_PAIR = (
    "db.execute('UPDATE users SET balance = balance + 1')",
    "db.execute('UPDATE users SET balance = balance - 1')",
)


@pytest.mark.postgres
def test_deny_a_postgres_table_only_a_trigger_writes_is_read(backend, limits, place, pg_database):
    pg_setup(pg_database.url, AUDITED)
    verdict = pg_rehearsal(backend, limits, place, pg_database.url, *BALANCE_PAIR)
    assert verdict.restored is False
    assert [(d["table"], d["extra"]) for d in verdict.diff] == [("public.audit", 6)]


@pytest.mark.sabotage
@pytest.mark.postgres
def test_sabotage_without_the_transactions_write_counts_a_trigger_write_passes(
    backend, limits, place, pg_database, monkeypatch
):
    pg_setup(pg_database.url, AUDITED)
    in_db_process(
        monkeypatch,
        "from executor.kinds import db_postgres\n"
        "db_postgres.postgres_written = lambda conn: set()\n",
    )
    verdict = pg_rehearsal(backend, limits, place, pg_database.url, *BALANCE_PAIR)
    assert verdict.restored is True  # wrong: audit holds six rows more


TRUNCATE_PAIR = ("db.execute('TRUNCATE tags')", "print('nothing to give back')")


@pytest.mark.postgres
def test_deny_a_truncated_table_is_read(backend, limits, place, pg_database):
    postgres_reset(pg_database.url)
    verdict = pg_rehearsal(backend, limits, place, pg_database.url, *TRUNCATE_PAIR)
    assert verdict.restored is False
    assert [(d["table"], d["missing"]) for d in verdict.diff] == [("public.tags", 3)]


@pytest.mark.sabotage
@pytest.mark.postgres
def test_sabotage_without_the_storage_files_a_truncate_passes(
    backend, limits, place, pg_database, monkeypatch
):
    postgres_reset(pg_database.url)
    in_db_process(
        monkeypatch,
        "from executor.kinds import db_postgres\n"
        "db_postgres.postgres_touched = lambda begun, now, written: set(written)\n",
    )
    verdict = pg_rehearsal(backend, limits, place, pg_database.url, *TRUNCATE_PAIR)
    assert verdict.restored is True  # wrong: tags lost its three rows


def another_session_adds_a_user(url: str) -> Callable[[], None]:
    def add() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO users (id, name) VALUES (9, 'zed')")

    return add


@pytest.mark.postgres
def test_deny_another_sessions_commit_is_not_the_programs_change(
    backend, limits, place, pg_database
):
    postgres_reset(pg_database.url)
    verdict = pg_rehearsal(
        backend,
        limits,
        place,
        pg_database.url,
        *BALANCE_PAIR,
        between=another_session_adds_a_user(pg_database.url),
    )
    assert verdict.restored is True, verdict.diff


@pytest.mark.sabotage
@pytest.mark.postgres
def test_sabotage_without_the_snapshot_another_sessions_commit_counts(
    backend, limits, place, pg_database, monkeypatch
):
    postgres_reset(pg_database.url)
    in_db_process(
        monkeypatch,
        "from executor.kinds import db_postgres\n"
        "db_postgres._import_snapshot = lambda reader, snapshot: None\n",
    )
    verdict = pg_rehearsal(
        backend,
        limits,
        place,
        pg_database.url,
        *BALANCE_PAIR,
        between=another_session_adds_a_user(pg_database.url),
    )
    assert verdict.restored is False  # wrong: the programs gave the state back
    assert verdict.diff[0]["missing"] == 1
