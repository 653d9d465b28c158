"""The db kind on a real PostgreSQL server: the host holds the connection, the sandbox asks."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from db_runs import run_db, run_past_its_end, switch_off, switch_off_postgres_parser

from executor.errors import ExecutorError
from executor.kinds.db import PostgresTarget
from tests.servers import PASSWORD, PostgresDatabase, PostgresServer

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def server(postgres_server: PostgresServer) -> Iterator[PostgresDatabase]:
    """A database of this module's own on the session's PostgreSQL server."""
    with postgres_server.database() as database:
        yield database


@pytest.fixture
def url(server: PostgresDatabase) -> Iterator[str]:
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS users, accounts")
        conn.execute("CREATE TABLE accounts (name TEXT, balance INTEGER)")
        conn.execute("INSERT INTO accounts VALUES ('ana', 10), ('bo', 20)")
    yield server.url


def start(backend, limits, place, url, code, *, allow_private=True, hide_env=("DATABASE_URL",)):
    return run_db(
        backend,
        limits,
        place,
        PostgresTarget(url=url),
        code,
        env={"DATABASE_URL": url},
        hide_env=hide_env,
        allow_private=allow_private,
    )


def fetch(url: str, sql: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


def test_a_created_table_is_gone_after_undo(backend, limits, place, url):
    result, outcome = start(
        backend, limits, place, url, "db.execute('CREATE TABLE users (name TEXT)')"
    )
    assert result.ok, result.stderr
    outcome.pending.undo()
    assert fetch(url, "SELECT to_regclass('users')::text") == [(None,)]


def test_three_inserted_users_are_there_after_keep(backend, limits, place, url):
    code = (
        "db.execute('CREATE TABLE users (name TEXT)')\n"
        "db.execute(\"INSERT INTO users VALUES ('a'), ('b'), ('c')\")\n"
        "db.execute('INSERT INTO users VALUES (%s)', ['d'])\n"
    )
    result, outcome = start(backend, limits, place, url, code)
    assert "3 row(s) affected" in result.stdout, result.stdout + result.stderr
    assert fetch(url, "SELECT to_regclass('users')::text") == [(None,)]
    outcome.pending.keep()
    assert fetch(url, "SELECT count(*) FROM users") == [(4,)]


def test_added_balances_are_unchanged_after_undo(backend, limits, place, url):
    code = "db.execute('UPDATE accounts SET balance = balance + 500')"
    _, outcome = start(backend, limits, place, url, code)
    outcome.pending.undo()
    assert fetch(url, "SELECT name, balance FROM accounts ORDER BY name") == [
        ("ana", 10),
        ("bo", 20),
    ]


def test_a_database_on_the_hosts_loopback_is_refused_without_the_setting(
    backend, limits, place, url
):
    with pytest.raises(ExecutorError, match="internal address"):
        start(backend, limits, place, url, "db.execute('SELECT 1')", allow_private=False)


# Finding 2: a dollar-quoted string hid a COMMIT from the old hand-written splitter.
DOLLAR_COMMIT = (
    "try:\n"
    "    db.execute(\"SELECT $$'$$; UPDATE accounts SET balance = 0; COMMIT; SELECT $$'$$\")\n"
    "except db.Error as exc:\n"
    "    print('refused:', exc)\n"
)


def dollar_quote_breaches(backend, limits, place, url) -> list[str]:
    result, outcome = start(backend, limits, place, url, DOLLAR_COMMIT)
    if outcome.pending is not None:
        outcome.pending.undo()
    balances = fetch(url, "SELECT balance FROM accounts ORDER BY name")
    return [] if balances == [(10,), (20,)] else [f"committed behind Undo: {balances}"]


def test_deny_a_dollar_quoted_commit_is_refused(backend, limits, place, url):
    assert dollar_quote_breaches(backend, limits, place, url) == []


def test_deny_without_the_parser_the_protocol_still_runs_one_statement(
    backend, limits, place, url, monkeypatch
):
    switch_off_postgres_parser(monkeypatch)
    assert dollar_quote_breaches(backend, limits, place, url) == []


@pytest.mark.sabotage
def test_sabotage_without_the_parser_a_dollar_quoted_commit_commits(
    backend, limits, place, url, monkeypatch
):
    switch_off_postgres_parser(monkeypatch)
    switch_off(monkeypatch, "extended protocol")
    assert dollar_quote_breaches(backend, limits, place, url) != []


# Finding 2 too: the connection and its password were one attribute away (db._conn).
HUNT_CREDENTIAL = """
import gc, os
found = [os.environ.get('DATABASE_URL', '')]
for name in os.listdir('/run/undoable'):
    try:
        found.append(open('/run/undoable/' + name, errors='replace').read())
    except OSError:
        pass
found += [repr(vars(o)) for o in gc.get_objects() if hasattr(o, '__dict__')][:5000]
print(' '.join(found)[::-1])
try:
    db._conn.commit()
except AttributeError:
    print('no connection here')
"""


def credential_breaches(backend, limits, place, url, hide_env=("DATABASE_URL",)) -> list[str]:
    result, outcome = start(backend, limits, place, url, HUNT_CREDENTIAL, hide_env=hide_env)
    if outcome.pending is not None:
        outcome.pending.undo()
    seen = result.stdout + result.stderr
    return [
        where for where, text in (("plain", PASSWORD), ("reversed", PASSWORD[::-1])) if text in seen
    ]


def test_deny_the_code_cannot_find_the_credential(backend, limits, place, url):
    assert credential_breaches(backend, limits, place, url) == []


@pytest.mark.sabotage
def test_sabotage_a_credential_left_in_the_environment_is_found(backend, limits, place, url):
    assert credential_breaches(backend, limits, place, url, hide_env=()) != []


# Issue 41, finding 1: an allowed UPDATE of pg_settings turned standard_conforming_strings off
# (its rule calls set_config), and the server then read one checked statement as three, sent
# together by the simple protocol: an earlier UPDATE committed before anyone chose, and a
# refused CREATE FUNCTION persisted. Three layers stop it, each alone: writes to the system
# catalogs are refused, the watched settings are read back after every statement, and every
# statement travels by the extended protocol (one statement per message).
SETTINGS_CHAIN = r"""
db.execute("UPDATE accounts SET balance = balance + 1000")
for sql in (
    "UPDATE pg_settings SET setting = 'off' WHERE name = 'standard_conforming_strings'",
    "UPDATE accounts SET balance = balance WHERE balance <> length('x\\', $$'); COMMIT; "
    "CREATE FUNCTION smuggled() RETURNS int LANGUAGE sql AS 'SELECT 1'; -- $$)",
):
    try:
        db.execute(sql)
        print('ran:', sql[:40])
    except db.Error as exc:
        print('refused:', exc)
"""
LAYERS = ("catalog writes", "settings check", "extended protocol")


@pytest.fixture
def app_url(server: PostgresDatabase, url: str) -> Iterator[str]:
    """The database as an application's own role sees it: no superuser, owns nothing of the
    catalogs, may create functions in public."""
    role = f"app_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}' NOSUPERUSER")
        conn.execute(f"GRANT ALL ON accounts TO {role}")
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {role}")
    yield url.replace("postgres:", f"{role}:", 1)
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("DROP FUNCTION IF EXISTS smuggled()")
        conn.execute(f"DROP OWNED BY {role}")
        conn.execute(f"DROP ROLE {role}")


def settings_chain_breaches(backend, limits, place, url) -> list[str]:
    result, outcome = start(backend, limits, place, url, SETTINGS_CHAIN)
    found = []
    if fetch(url, "SELECT balance FROM accounts ORDER BY name") != [(10,), (20,)]:
        found.append("an UPDATE was committed before anyone chose")
    if outcome.pending is not None:
        outcome.pending.undo()
    if fetch(url, "SELECT balance FROM accounts ORDER BY name") != [(10,), (20,)]:
        found.append("Undo left an UPDATE in place")
    if fetch(url, "SELECT to_regproc('smuggled')::text") != [(None,)]:
        found.append("a refused CREATE FUNCTION persisted")
    return found


@pytest.mark.parametrize(
    "off", [(), *[tuple(layer for layer in LAYERS if layer != kept) for kept in LAYERS]]
)
def test_deny_a_settings_change_cannot_smuggle_a_commit(
    backend, limits, place, app_url, off, monkeypatch
):
    switch_off(monkeypatch, *off)
    assert settings_chain_breaches(backend, limits, place, app_url) == []


def test_deny_the_settings_chain_says_why_it_stopped(backend, limits, place, app_url, monkeypatch):
    switch_off(monkeypatch, "catalog writes")
    result, outcome = start(backend, limits, place, app_url, SETTINGS_CHAIN)
    assert outcome.pending is None
    assert "changed the session setting standard_conforming_strings" in outcome.message
    assert "rolled back" in result.stdout, result.stdout + result.stderr


@pytest.mark.sabotage
def test_sabotage_without_all_three_layers_the_chain_commits(
    backend, limits, place, app_url, monkeypatch
):
    switch_off(monkeypatch, *LAYERS)
    assert set(settings_chain_breaches(backend, limits, place, app_url)) == {
        "an UPDATE was committed before anyone chose",
        "Undo left an UPDATE in place",
        "a refused CREATE FUNCTION persisted",
    }


# Issue 41, item 1's second half: PostgreSQL cannot stop a role from changing its own settings,
# and a function or trigger already in the database may call set_config. The host reads the
# watched settings back after every statement: a change rolls everything back and stops the run.
LOOSENERS = {
    name: f"PERFORM set_config('{name}', '{value}', false)"
    for name, value in (
        ("standard_conforming_strings", "off"),
        ("statement_timeout", "0"),
        ("search_path", "evil, pg_catalog"),
        ("client_encoding", "SJIS"),
        ("lock_timeout", "1"),
    )
}


@pytest.fixture
def loosener(server: PostgresDatabase, url: str, request) -> Iterator[str]:
    """A function and a trigger, defined by the database's owner, that change one setting."""
    body = LOOSENERS[request.param]
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(
            f"CREATE OR REPLACE FUNCTION loosen() RETURNS trigger LANGUAGE plpgsql AS "
            f"$f$ BEGIN {body}; RETURN NEW; END $f$"
        )
        conn.execute(
            "CREATE TRIGGER loosen BEFORE UPDATE ON accounts FOR EACH ROW EXECUTE FUNCTION loosen()"
        )
    yield request.param
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER IF EXISTS loosen ON accounts")
        conn.execute("DROP FUNCTION IF EXISTS loosen()")


AFTER_A_TRIGGER = """
db.execute("INSERT INTO accounts VALUES ('cy', 30)")
for sql in ("UPDATE accounts SET balance = balance + 1", "SELECT name FROM accounts"):
    try:
        print('ran:', db.execute(sql))
    except db.Error as exc:
        print('refused:', exc)
"""


def trigger_breaches(backend, limits, place, url, setting) -> list[str]:
    result, outcome = start(backend, limits, place, url, AFTER_A_TRIGGER)
    found = []
    if "ran: [('ana',)" in result.stdout:
        found.append("a statement ran under the changed setting")
    if outcome.pending is not None:
        found.append("Keep was offered for a run whose settings changed")
        outcome.pending.undo()
    elif f"changed the session setting {setting}" not in outcome.message:
        found.append(f"the run stopped without naming {setting}: {outcome.message}")
    return found


@pytest.mark.parametrize("loosener", sorted(LOOSENERS), indirect=True)
def test_deny_a_trigger_that_changes_a_setting_stops_the_run(backend, limits, place, url, loosener):
    assert trigger_breaches(backend, limits, place, url, loosener) == []
    assert fetch(url, "SELECT count(*) FROM accounts") == [(2,)]


@pytest.mark.sabotage
@pytest.mark.parametrize("loosener", ["standard_conforming_strings"], indirect=True)
def test_sabotage_without_the_settings_check_the_run_goes_on(
    backend, limits, place, url, loosener, monkeypatch
):
    switch_off(monkeypatch, "settings check")
    assert len(trigger_breaches(backend, limits, place, url, loosener)) == 2


# Issue 41, finding 5: setval() is not rolled back: a run that set a sequence back to 1 left it
# there after Undo, and later inserts collided. RESTART is refused with it (once kept, it hands
# out values other sessions already took).
REWINDS = """
for sql in (
    "SELECT setval('ids', 1)",
    "SELECT pg_catalog.setval('ids', 1, false)",
    "ALTER SEQUENCE ids RESTART WITH 1",
    "ALTER TABLE items ALTER COLUMN id RESTART WITH 1",
    "ALTER TABLE items ALTER COLUMN id SET GENERATED ALWAYS RESTART",
):
    try:
        db.execute(sql)
        print('ran:', sql)
    except db.Error as exc:
        print('refused:', exc)
"""


@pytest.fixture
def sequences(url: str) -> Iterator[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS items; DROP SEQUENCE IF EXISTS ids")
        conn.execute("CREATE SEQUENCE ids")
        conn.execute("SELECT nextval('ids') FROM generate_series(1, 5)")
        conn.execute("CREATE TABLE items (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY)")
        conn.execute("INSERT INTO items DEFAULT VALUES")
    yield url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS items; DROP SEQUENCE IF EXISTS ids")


def rewind_breaches(backend, limits, place, url) -> list[str]:
    result, outcome = start(backend, limits, place, url, REWINDS)
    found = [line for line in result.stdout.splitlines() if line.startswith("ran:")]
    outcome.pending.undo()
    if fetch(url, "SELECT nextval('ids')") != [(6,)]:
        found.append("the sequence was rewound behind Undo")
    return found


def test_deny_setval_and_restart_are_refused(backend, limits, place, sequences):
    assert rewind_breaches(backend, limits, place, sequences) == []


@pytest.mark.sabotage
def test_sabotage_without_the_refusal_setval_survives_undo(
    backend, limits, place, sequences, monkeypatch
):
    switch_off(monkeypatch, "sequence rewinds")
    found = rewind_breaches(backend, limits, place, sequences)
    assert "the sequence was rewound behind Undo" in found
    assert len(found) == 6


# Issue 41, finding 2: a statement outlived its run. finish() joined the broker with no cancel,
# so a run past its wall time stayed `running`, holding a runner thread and the session.
SLEEP_PAST_THE_END = {
    "wall time": "db.execute('SELECT pg_sleep(900)')\n",
    "crash": (
        "import os, threading, time\n"
        "threading.Thread(target=db.execute, args=('SELECT pg_sleep(900)',)).start()\n"
        "time.sleep(1)\n"
        "os._exit(0)\n"
    ),
}


def sleep_breaches(backend, place, url, how) -> list[str]:
    def active() -> list[str]:
        rows = fetch(
            url,
            "SELECT query FROM pg_stat_activity WHERE application_name = 'undoable' "
            "AND state = 'active' AND query LIKE '%pg_sleep%'",
        )
        return [f"still active on the server: {query}" for (query,) in rows]

    _, found = run_past_its_end(
        backend,
        place,
        PostgresTarget(url=url),
        SLEEP_PAST_THE_END[how],
        while_stuck=active,
    )
    return found


@pytest.mark.parametrize("how", sorted(SLEEP_PAST_THE_END))
def test_deny_a_statement_ends_with_its_run(backend, place, url, how):
    assert sleep_breaches(backend, place, url, how) == []


@pytest.mark.sabotage
def test_sabotage_without_the_cancel_a_statement_outlives_its_run(backend, place, url, monkeypatch):
    switch_off(monkeypatch, "postgres cancel")
    assert len(sleep_breaches(backend, place, url, "wall time")) == 2
