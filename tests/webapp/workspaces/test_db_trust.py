"""Issue 13's db findings, each tried through the real web flow (embedded runner, real bwrap).

Every deny test has a sabotage twin that switches its protection off and must see the breach:
a deny check that cannot fail would prove nothing.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.test import override_settings

from executor.kinds import db_slots
from tests.factories import QueryFactory
from tests.servers import PASSWORD, PostgresDatabase, PostgresServer
from webapp.runs import runner, services
from webapp.runs.models import Run, RunStatus
from webapp.workspaces import db_runs as workspace_db_runs
from webapp.workspaces import services as ws
from webapp.workspaces.models import ChangeStatus, PendingChange

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "executor" / "kinds"))
from db_runs import (  # noqa: E402
    switch_off,
    switch_off_postgres_parser,
    switch_off_sqlite_guards,
)

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")


@pytest.fixture(scope="module")
def server(postgres_server: PostgresServer) -> Iterator[PostgresDatabase]:
    """A database of this module's own on the session's PostgreSQL server."""
    with postgres_server.database() as database:
        yield database


@pytest.fixture
def url(server: PostgresDatabase) -> str:
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS accounts")
        conn.execute("CREATE TABLE accounts (name TEXT, balance INTEGER)")
        conn.execute("INSERT INTO accounts VALUES ('ana', 10), ('bo', 20)")
    return server.url


def balances(url: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT name, balance FROM accounts ORDER BY name").fetchall()


def run_pending(code: str, *, url: str = "", **query: Any) -> tuple[Run, PendingChange]:
    """Run a db query to its end; return the run and its change (pending, if it succeeded)."""
    names = ["DATABASE_URL"] if url else []
    query = QueryFactory(kind="db", forward_code=code, credential_names=names, **query)
    run = services.query_run(query=query, credentials={"DATABASE_URL": url} if url else {})
    assert runner.wait(run.pk, 60), f"run {run.pk} did not finish"
    run.refresh_from_db()
    return run, PendingChange.objects.get(run=run)


def output(run: Run) -> str:
    return "".join(run.chunks.values_list("text", flat=True))


def discarded(change: PendingChange) -> PendingChange:
    return ws.change_discard(change=change)


# Finding 1: the code replaced the sandboxed driver's decision and committed itself.
# Finding 2: a dollar-quoted string hid a COMMIT from the hand-written statement splitter.
COMMIT_ITSELF = r"""
import gc, json, socket, struct, sys
db.execute("UPDATE accounts SET balance = balance + 500")
tries = [
    "COMMIT",
    "END",
    "SELECT $$'$$; UPDATE accounts SET balance = 0; COMMIT; SELECT $$'$$",
    "/* ; */ COMMIT",
    "SELECT pg_catalog.set_config('transaction_read_only', 'off', false); COMMIT",
]
for sql in tries:
    try:
        db.execute(sql)
    except db.Error as exc:
        print("refused:", str(exc)[:60])
raw = socket.socket(socket.AF_UNIX)
raw.connect("/run/undoable/db.sock")
for op in ({"op": "commit", "sql": ""}, {"op": "execute", "sql": "COMMIT"}):
    body = json.dumps(op).encode()
    raw.sendall(struct.pack(">I", len(body)) + body)
    print("raw:", raw.recv(200)[4:60])
main = sys.modules["__main__"]
for obj in gc.get_objects():
    for name in ("commit", "decide", "finish"):
        if hasattr(obj, name) and callable(getattr(obj, name)):
            try:
                getattr(obj, name)()
            except Exception:
                pass
db.commit()
"""


def self_commit_breaches(url: str) -> list[str]:
    run, change = run_pending(COMMIT_ITSELF, url=url)
    assert run.status == RunStatus.SUCCEEDED, output(run)
    found = []
    if balances(url) != [("ana", 10), ("bo", 20)]:
        found.append(f"committed before any choice: {balances(url)}")
    if change.status == ChangeStatus.PENDING and discarded(change).status != ChangeStatus.DISCARDED:
        found.append("Discard failed")
    if balances(url) != [("ana", 10), ("bo", 20)]:
        found.append(f"Undo did not roll back: {balances(url)}")
    return found


@pytest.mark.postgres
def test_deny_the_code_cannot_commit_its_own_transaction(url):
    assert self_commit_breaches(url) == []


@pytest.mark.postgres
@pytest.mark.sabotage
def test_sabotage_without_the_parser_the_code_commits_itself(url, monkeypatch):
    switch_off_postgres_parser(monkeypatch)
    switch_off(monkeypatch, "extended protocol")  # alone, it keeps a text to one statement
    assert self_commit_breaches(url) != []


# Finding 2 too: `db._conn.info.password` revealed the credential, printed reversed.
HUNT_CREDENTIAL = """
import gc, os
found = [os.environ.get('DATABASE_URL', ''), open('/proc/self/environ', 'rb').read().decode()]
found += [repr(vars(o)) for o in gc.get_objects() if hasattr(o, '__dict__')][:5000]
try:
    found.append(db._conn.info.password)
except AttributeError:
    pass
print(' '.join(found)[::-1])
"""


def credential_breaches(url: str) -> list[str]:
    run, change = run_pending(HUNT_CREDENTIAL, url=url)
    discarded(change)
    seen = output(run)
    return [
        where for where, text in (("plain", PASSWORD), ("reversed", PASSWORD[::-1])) if text in seen
    ]


@pytest.mark.postgres
def test_deny_the_program_never_holds_the_database_credential(url):
    assert credential_breaches(url) == []


@pytest.mark.postgres
@pytest.mark.sabotage
def test_sabotage_a_credential_left_in_the_environment_is_found(url, monkeypatch):
    options = workspace_db_runs.db_options
    monkeypatch.setattr(workspace_db_runs, "db_options", lambda *a: {**options(*a), "hide_env": ()})
    assert credential_breaches(url) != []


# A host-side SQLite connection must not become the program's way to files of the host.
def attach_code(bait: Path) -> str:
    return (
        f"attach = \"ATTACH DATABASE '{bait}' AS bait\"\n"
        "for sql in ('COMMIT', attach, 'SELECT secret FROM bait.t'):\n"
        "    try:\n"
        "        print('ran:', db.execute(sql))\n"
        "    except db.Error as exc:\n"
        "        print('refused:', exc)\n"
    )


def host_file_breaches(bait: Path) -> list[str]:
    run, change = run_pending(attach_code(bait))
    if change.status == ChangeStatus.PENDING:
        discarded(change)
    return ["read a host file through ATTACH"] if "host-secret" in output(run) else []


@pytest.fixture
def bait(workspaces_root: Path) -> Path:
    path = workspaces_root / "host-app.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (secret TEXT)")
        conn.execute("INSERT INTO t VALUES ('host-secret')")
    conn.close()
    return path


def test_deny_a_sqlite_run_cannot_attach_a_host_file(bait):
    assert host_file_breaches(bait) == []


@pytest.mark.sabotage
def test_sabotage_without_the_authorizer_a_sqlite_run_reads_a_host_file(bait, monkeypatch):
    switch_off_sqlite_guards(monkeypatch)
    assert host_file_breaches(bait) != []


def test_a_sqlite_run_kept_only_by_the_persons_keep():
    code = "db.execute('CREATE TABLE t (x)')\ndb.execute('INSERT INTO t VALUES (1)')\ndb.commit()\n"
    run, change = run_pending(code)
    workspace = ws.workspace_for_query(run.query)
    assert change.status == ChangeStatus.PENDING
    assert not (workspace.root / "database.sqlite3").exists()
    assert ws.change_keep(change=change).status == ChangeStatus.KEPT
    kept = workspace.root / "database.sqlite3"
    assert sqlite3.connect(kept).execute("SELECT x FROM t").fetchall() == [(1,)]
    assert kept.stat().st_mode & 0o7777 == 0o644


# Issue 41: every running or pending db run holds a db process; a person's count is capped.
def cap_breaches() -> list[str]:
    code = "db.execute('CREATE TABLE t (x)')"
    first = QueryFactory(kind="db", forward_code=code)
    with override_settings(UNDOABLE_DB_PROCESSES_PER_USER=1):
        _, held_change = run_pending(code, owner=first.owner)
        second = services.query_run(
            query=QueryFactory(kind="db", forward_code=code, owner=first.owner)
        )
        assert runner.wait(second.pk, 60), f"run {second.pk} did not finish"
        second.refresh_from_db()
        discarded(held_change)
        third, third_change = run_pending(code, owner=first.owner)
        discarded(third_change)
    found = []
    if second.status != RunStatus.FAILED or "per person" not in second.error:
        found.append(f"a second db run of one person: {second.status} {second.error!r}")
    if third.status != RunStatus.SUCCEEDED:
        found.append(f"the slot was not freed by Undo: {third.status} {third.error!r}")
    return found


def test_deny_a_person_past_the_db_process_cap_gets_a_clear_error():
    assert cap_breaches() == []


@pytest.mark.sabotage
def test_sabotage_without_the_cap_db_processes_pile_up(monkeypatch):
    monkeypatch.setattr(db_slots, "acquire", lambda caps, owner: db_slots.Slots([]))
    assert cap_breaches() != []


# Issue 41, finding 1: UPDATE pg_settings turned standard_conforming_strings off, and the server
# then read one checked statement as three (the simple protocol runs them all): an UPDATE was
# committed before anyone chose and a refused CREATE FUNCTION persisted after Undo.
SETTINGS_CHAIN = r"""
db.execute("UPDATE accounts SET balance = balance + 1000")
for sql in (
    "UPDATE pg_settings SET setting = 'off' WHERE name = 'standard_conforming_strings'",
    "UPDATE accounts SET balance = balance WHERE balance <> length('x\\', $$'); COMMIT; "
    "CREATE FUNCTION smuggled_web() RETURNS int LANGUAGE sql AS 'SELECT 1'; -- $$)",
):
    try:
        db.execute(sql)
    except db.Error as exc:
        print('refused:', exc)
"""


def settings_chain_breaches(url: str) -> list[str]:
    run, change = run_pending(SETTINGS_CHAIN, url=url)
    found = []
    if balances(url) != [("ana", 10), ("bo", 20)]:
        found.append("committed before any choice")
    if change.status == ChangeStatus.PENDING:
        discarded(change)
    if balances(url) != [("ana", 10), ("bo", 20)]:
        found.append("Discard left an UPDATE in place")
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT to_regproc('smuggled_web')").fetchone() != (None,):
            found.append("a refused CREATE FUNCTION persisted")
            conn.execute("DROP FUNCTION smuggled_web()")
    return found


@pytest.mark.postgres
def test_deny_a_settings_change_cannot_smuggle_a_commit(url):
    assert settings_chain_breaches(url) == []


@pytest.mark.postgres
@pytest.mark.sabotage
def test_sabotage_without_its_three_layers_the_settings_chain_commits(url, monkeypatch):
    switch_off(monkeypatch, "catalog writes", "settings check", "extended protocol")
    assert len(settings_chain_breaches(url)) == 3


# Issue 41, finding 2: a statement outlived its run. After Stop, finishing the run waited for
# the statement (until the session's own time limit), so the run stayed `running` and held a
# runner thread and the PostgreSQL session.
def active_sleeps(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE state = 'active' "
            "AND query LIKE '%pg_sleep(900)%' AND pid <> pg_backend_pid()"
        ).fetchall()
    return [pid for (pid,) in rows]


def stopped_sleep_breaches(url: str) -> list[str]:
    query = QueryFactory(
        kind="db",
        forward_code="db.execute('SELECT pg_sleep(900)')",
        credential_names=["DATABASE_URL"],
    )
    run = services.query_run(query=query, credentials={"DATABASE_URL": url})
    for _ in range(600):
        if active_sleeps(url):
            break
        time.sleep(0.05)
    assert active_sleeps(url), "the statement never started"
    assert runner.cancel(run.pk)  # the person's Stop
    found = []
    # Its own limit, the wall time, is 60 s; without the cancel, the db process is waited for
    # (10 s) and closed (10 s) before it is killed.
    if not runner.wait(run.pk, 8):
        found.append("the run still holds its runner thread 8 s after Stop")
        found += [f"statement {pid} still active" for pid in active_sleeps(url)]
        with psycopg.connect(url, autocommit=True) as conn:
            for pid in active_sleeps(url):
                conn.execute("SELECT pg_cancel_backend(%s)", [pid])
        assert runner.wait(run.pk, 60)
    found += [f"statement {pid} still active after the run" for pid in active_sleeps(url)]
    run.refresh_from_db()
    if run.status == RunStatus.RUNNING:
        found.append("the run is still running")
    return found


@pytest.mark.postgres
def test_deny_stop_ends_the_runs_statement(url):
    assert stopped_sleep_breaches(url) == []


@pytest.mark.postgres
@pytest.mark.sabotage
def test_sabotage_without_the_cancel_a_stopped_runs_statement_holds_a_thread(url, monkeypatch):
    switch_off(monkeypatch, "postgres cancel")
    assert len(stopped_sleep_breaches(url)) >= 2
