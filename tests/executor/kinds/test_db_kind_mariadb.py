"""The db kind on a real MariaDB server: the host holds the connection, the sandbox asks.

DDL commits implicitly on MariaDB and MySQL, so each refusal here guards Undo itself: a
statement that slipped through would commit the run's earlier changes behind the person's
back. Each attack is a deny test, and a sabotage test (its guard switched off in the db
process) that shows the breach.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import mysql.connector
import pytest
from db_runs import in_db_process, run_db, run_past_its_end

from executor.kinds.db import ServerTarget
from tests.servers import PASSWORD, MariaDbDatabase, MariaDbServer

pytestmark = pytest.mark.mariadb
CANARY = "canary-7f3e1b"


@pytest.fixture(scope="module")
def server(mariadb_server: MariaDbServer) -> Iterator[MariaDbDatabase]:
    """A database of this module's own on the session's MariaDB server."""
    with mariadb_server.database() as database:
        yield database


def connect(server: MariaDbDatabase):
    return mysql.connector.connect(
        host="127.0.0.1",
        port=int(server.url.rsplit(":", 1)[1].split("/")[0]),
        user="root",
        password=PASSWORD,
        database=server.name,
        use_pure=True,
        autocommit=True,
    )


@pytest.fixture
def url(server: MariaDbDatabase) -> Iterator[str]:
    conn = connect(server)
    try:
        cur = conn.cursor()
        cur.execute("DROP TABLE IF EXISTS accounts, copied, t2")
        cur.execute(
            "CREATE TABLE accounts (id INT AUTO_INCREMENT PRIMARY KEY, name TEXT, "
            "balance INT) ENGINE=InnoDB"
        )
        cur.execute("CREATE TABLE copied (line TEXT) ENGINE=InnoDB")
        cur.execute("INSERT INTO accounts (name, balance) VALUES ('ana', 10), ('bo', 20)")
    finally:
        conn.close()
    yield server.url


def start(backend, limits, place, url, code, *, hide_env=("DATABASE_URL",)):
    return run_db(
        backend,
        limits,
        place,
        ServerTarget(url=url),
        code,
        env={"DATABASE_URL": url},
        hide_env=hide_env,
    )


def fetch(server: MariaDbDatabase, sql: str) -> list[tuple]:
    conn = connect(server)
    try:
        cur = conn.cursor()
        cur.execute(sql)
        return [tuple(row) for row in cur.fetchall()]
    finally:
        conn.close()


def balances(server: MariaDbDatabase) -> list[tuple]:
    return fetch(server, "SELECT name, balance FROM accounts ORDER BY name")


UNCHANGED = [("ana", 10), ("bo", 20)]
ADD_500 = "db.execute('UPDATE accounts SET balance = balance + 500')\n"


def test_the_scheme_picks_the_engine():
    assert ServerTarget(url="mariadb://u:p@h/d").engine == "mariadb"
    assert ServerTarget(url="mysql://u:p@h/d").engine == "mariadb"
    assert ServerTarget(url="postgresql://u:p@h/d").engine == "postgres"


def test_added_balances_are_unchanged_after_undo(backend, limits, place, url, server):
    result, outcome = start(backend, limits, place, url, ADD_500 + "print('done')")
    assert "done" in result.stdout, result.stdout + result.stderr
    assert balances(server) == UNCHANGED  # nothing is committed before the choice
    outcome.pending.undo()
    assert balances(server) == UNCHANGED


def test_added_balances_are_there_after_keep(backend, limits, place, url, server):
    code = ADD_500 + (
        "db.execute('INSERT INTO accounts (name, balance) VALUES (?, ?)', ['cy', 30])\n"
        "print(list(db.execute('SELECT name, balance FROM accounts ORDER BY name')))\n"
    )
    result, outcome = start(backend, limits, place, url, code)
    assert "('cy', 530)" not in result.stdout, result.stdout + result.stderr
    assert "('ana', 510)" in result.stdout, result.stdout + result.stderr
    outcome.pending.keep()
    assert balances(server) == [("ana", 510), ("bo", 520), ("cy", 30)]


# Each attack runs after the +500 update: an attack that commits (implicitly, or by running a
# second statement) leaves the update in place after Undo.
def attempt(sql: str) -> str:
    return ADD_500 + (
        "try:\n"
        f"    db.execute({sql!r})\n"
        "    print('ran')\n"
        "except db.Error as exc:\n"
        "    print('refused:', exc)\n"
        "try:\n"
        "    print('sql_mode', list(db.execute('SELECT @@sql_mode')))\n"
        "except db.Error as exc:\n"
        "    print('after:', exc)\n"
    )


def run_attack(backend, limits, place, url, server, sql: str) -> tuple[str, list[str]]:
    """The program's output and the breaches: balances committed behind Undo, or a run that
    went on (a change offered for Keep) with the session's sql_mode changed."""
    result, outcome = start(backend, limits, place, url, attempt(sql))
    seen = result.stdout + result.stderr
    breaches = []
    if outcome.pending is not None:
        if "ANSI_QUOTES" not in seen.partition("sql_mode")[2]:
            breaches.append(f"the run went on with another sql_mode: {seen}")
        outcome.pending.undo()
    now = balances(server)
    if now != UNCHANGED:
        breaches.append(f"committed behind Undo: {now}")
    return seen, breaches


MULTI = "UPDATE accounts SET balance = 0; COMMIT"
EXECUTABLE_COMMENT = "/*!CREATE TABLE t2 AS*/ SELECT 1 AS one"
SET_SQL_MODE = "SET sql_mode = ''"
ALTER = "ALTER TABLE accounts ADD COLUMN note TEXT"


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        (MULTI, "one statement per call"),
        (EXECUTABLE_COMMENT, "executable comments"),
        (SET_SQL_MODE, "SET is not allowed"),
        (ALTER, "commits implicitly"),
    ],
    ids=["multi-statement", "executable-comment", "set-sql-mode", "alter-table"],
)
def test_deny_statements_that_would_commit_or_change_the_session_are_refused(
    backend, limits, place, url, server, sql, reason
):
    seen, breaches = run_attack(backend, limits, place, url, server, sql)
    assert f"refused by Undoable: {reason}" in seen or reason in seen, seen
    assert breaches == []


# Every statement passes (as one that may return rows: the session reads whatever comes).
POLICY_OFF = "from executor.kinds import db_mariadb\ndb_mariadb.check_mysql = lambda sql: True\n"
# Statements by the text protocol, with multi-statements and LOCAL INFILE on: what the server
# would run if the host sent the program's text as a query (a LOAD or a text with `;`; the
# rest stays prepared, so the program can read its rows).
TEXT_PROTOCOL = """
import mysql.connector
from executor.kinds import db_mariadb
from executor.kinds.db_values import Reply
class _Flags:
    MULTI_STATEMENTS = 0
    LOCAL_FILES = 0
db_mariadb.ClientFlag = _Flags
_connect = mysql.connector.connect
def _loose(**options):
    options["allow_local_infile"] = True
    return _connect(**options)
mysql.connector.connect = _loose
_prepared = db_mariadb.MariaDbSession._run
def _as_text(self, sql, batch, returns_rows):
    if sql.startswith("LOAD"):  # only cmd_query answers the server's request for the file
        self._conn.cmd_query(sql)
    elif ";" in sql:
        for result in self._conn.cmd_query_iter(sql):
            if "columns" in result:
                self._conn.get_rows()
    else:
        return _prepared(self, sql, batch, returns_rows)
    return Reply(None, [], 0, False)
db_mariadb.MariaDbSession._run = _as_text
"""
SETTINGS_CHECK_OFF = (
    "from executor.kinds import db_mariadb\n"
    "db_mariadb.MariaDbSession._check = lambda self, now: None\n"
)


def test_deny_without_the_policy_the_prepared_protocol_runs_one_statement(
    backend, limits, place, url, server, monkeypatch
):
    in_db_process(monkeypatch, POLICY_OFF)
    seen, breaches = run_attack(backend, limits, place, url, server, MULTI)
    assert "SQL syntax" in seen, seen  # the server refused the second statement
    assert breaches == []


@pytest.mark.sabotage
def test_sabotage_without_policy_and_prepared_protocol_a_commit_commits(
    backend, limits, place, url, server, monkeypatch
):
    in_db_process(monkeypatch, POLICY_OFF + TEXT_PROTOCOL)
    _, breaches = run_attack(backend, limits, place, url, server, MULTI)
    assert breaches != []


@pytest.mark.sabotage
def test_sabotage_without_the_comment_check_an_executable_comment_commits(
    backend, limits, place, url, server, monkeypatch
):
    in_db_process(
        monkeypatch,
        "import re\nfrom executor.kinds import sql_policy_mysql\n"
        "sql_policy_mysql._EXECUTABLE_COMMENT = re.compile(r'(?!)')\n",
    )
    _, breaches = run_attack(backend, limits, place, url, server, EXECUTABLE_COMMENT)
    assert breaches != []


@pytest.mark.sabotage
def test_sabotage_without_the_refusal_an_alter_table_commits(
    backend, limits, place, url, server, monkeypatch
):
    in_db_process(monkeypatch, POLICY_OFF)
    _, breaches = run_attack(backend, limits, place, url, server, ALTER)
    assert any("committed behind Undo" in breach for breach in breaches), breaches


def test_deny_without_the_policy_the_settings_check_stops_a_set(
    backend, limits, place, url, server, monkeypatch
):
    in_db_process(monkeypatch, POLICY_OFF)
    seen, breaches = run_attack(backend, limits, place, url, server, SET_SQL_MODE)
    assert "changed the session variable sql_mode" in seen, seen
    assert breaches == []


@pytest.mark.sabotage
def test_sabotage_without_policy_and_settings_check_the_run_goes_on_unpinned(
    backend, limits, place, url, server, monkeypatch
):
    in_db_process(monkeypatch, POLICY_OFF + SETTINGS_CHECK_OFF)
    _, breaches = run_attack(backend, limits, place, url, server, SET_SQL_MODE)
    assert any("another sql_mode" in breach for breach in breaches), breaches


# Files: INTO OUTFILE writes on the server's disk, LOAD DATA LOCAL reads the host's.
def outfile(server_folder: Path) -> Path:
    return server_folder / "out.csv"


def test_deny_into_outfile_is_refused(backend, limits, place, url, server, mariadb_server):
    target = outfile(mariadb_server.folder)
    target.unlink(missing_ok=True)
    sql = f"SELECT name FROM accounts INTO OUTFILE '{target}'"
    seen, _ = run_attack(backend, limits, place, url, server, sql)
    assert "OUTFILE is not allowed" in seen, seen
    assert not target.exists()


@pytest.mark.sabotage
def test_sabotage_without_the_file_checks_into_outfile_writes_a_file(
    backend, limits, place, url, server, mariadb_server, monkeypatch
):
    in_db_process(monkeypatch, POLICY_OFF)
    target = outfile(mariadb_server.folder)
    target.unlink(missing_ok=True)
    sql = f"SELECT name FROM accounts INTO OUTFILE '{target}'"
    run_attack(backend, limits, place, url, server, sql)
    assert target.exists()
    target.unlink()


@pytest.fixture
def host_file(tmp_path: Path) -> Path:
    """A file of the host's, which no run may read."""
    secret = tmp_path / "host-secret.txt"
    secret.write_text(CANARY + "\n")
    secret.chmod(0o644)
    return secret


def load_local(host_file: Path) -> str:
    return f"LOAD DATA LOCAL INFILE '{host_file}' INTO TABLE copied"


def test_deny_load_data_local_is_refused(backend, limits, place, url, server, host_file):
    seen, _ = run_attack(backend, limits, place, url, server, load_local(host_file))
    assert "LOAD DATA / LOAD XML / LOAD INDEX is not allowed" in seen, seen
    assert fetch(server, "SELECT COUNT(*) FROM copied") == [(0,)]


def test_deny_without_the_policy_load_data_local_still_fails(
    backend, limits, place, url, server, host_file, monkeypatch
):
    in_db_process(monkeypatch, POLICY_OFF)
    seen, _ = run_attack(backend, limits, place, url, server, load_local(host_file))
    assert CANARY not in seen
    assert "refused:" in seen, seen


@pytest.mark.sabotage
def test_sabotage_with_local_infile_on_load_data_reads_the_hosts_file(
    backend, limits, place, url, server, host_file, monkeypatch
):
    in_db_process(monkeypatch, POLICY_OFF + TEXT_PROTOCOL + SETTINGS_CHECK_OFF)
    code = f"db.execute({load_local(host_file)!r})\n"
    code += "print(list(db.execute('SELECT line FROM copied')))\n"
    result, outcome = start(backend, limits, place, url, code)
    if outcome.pending is not None:
        outcome.pending.undo()
    assert CANARY in result.stdout, result.stdout + result.stderr


# The credential: never in the sandbox's environment, files or output.
HUNT_CREDENTIAL = """
import gc, os
found = [repr(dict(os.environ))]
for name in os.listdir('/run/undoable'):
    try:
        found.append(open('/run/undoable/' + name, errors='replace').read())
    except OSError:
        pass
found += [repr(vars(o)) for o in gc.get_objects() if hasattr(o, '__dict__')][:5000]
print(' '.join(found)[::-1])
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


# A run that ends cancels its statement in flight (KILL QUERY).
def sleeping(server: MariaDbDatabase) -> list[str]:
    rows = fetch(
        server,
        "SELECT info FROM information_schema.processlist WHERE info LIKE 'SELECT SLEEP(600)%'",
    )
    return [f"still running on the server: {row[0]}" for row in rows]


def test_deny_a_statement_ends_with_its_run(backend, place, url, server):
    _, found = run_past_its_end(
        backend,
        place,
        ServerTarget(url=url),
        "db.execute('SELECT SLEEP(600)')",
        while_stuck=lambda: sleeping(server),
    )
    assert found == []


@pytest.mark.sabotage
def test_sabotage_without_the_cancel_a_statement_outlives_its_run(
    backend, place, url, server, monkeypatch
):
    in_db_process(
        monkeypatch,
        "from executor.kinds import db_mariadb\n"
        "db_mariadb.MariaDbSession.cancel = lambda self: None\n",
    )
    _, found = run_past_its_end(
        backend,
        place,
        ServerTarget(url=url),
        "db.execute('SELECT SLEEP(600)')",
        while_stuck=lambda: sleeping(server),
    )
    try:
        assert found != []
    finally:
        for (thread,) in fetch(
            server,
            "SELECT id FROM information_schema.processlist WHERE info LIKE 'SELECT SLEEP(600)%'",
        ):
            conn = connect(server)
            try:
                conn.cmd_query(f"KILL QUERY {int(thread)}")
            finally:
                conn.close()
