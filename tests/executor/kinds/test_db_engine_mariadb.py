"""The MariaDB/MySQL session and its policy on their own: no sandbox, a real MariaDB server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from executor.kinds.db_engines import DbSession, engine_for_url, open_mariadb
from executor.kinds.errors import RunStopped, StatementFailed, StatementRefused
from executor.kinds.sql_policy_mysql import check_mysql
from tests.servers import PASSWORD, MariaDbDatabase, MariaDbServer

ALLOWED = [
    ("SELECT * FROM accounts", True),
    ("WITH x AS (SELECT 1) SELECT * FROM x", True),
    ("SELECT 1 UNION SELECT 2", True),
    ("SELECT 'it''s', \"name\" FROM `accounts` -- a comment", True),
    ("SELECT * FROM accounts FOR UPDATE", True),
    ("INSERT INTO accounts (name, balance) VALUES (?, ?)", False),
    ("INSERT INTO accounts SET name = 'x' ON DUPLICATE KEY UPDATE balance = 1", False),
    ("UPDATE accounts SET balance = balance + 500 WHERE name = ?", False),
    ("DELETE FROM accounts WHERE name = 'x' RETURNING name", True),
    ("EXPLAIN SELECT 1", True),
    ("DESCRIBE accounts", True),
    ("SHOW TABLES", True),
]

REFUSED = [
    ("SELECT 1; SELECT 2", "one statement per call"),
    ("SELECT /*!50000 1 */", "executable comments"),
    ("SELECT /*M!100000 1 */", "executable comments"),
    ("SELECT 1 --1", "without a space"),
    ("START TRANSACTION", "transaction control"),
    ("COMMIT", "transaction control"),
    ("SAVEPOINT a", "transaction control"),
    ("XA START 'x'", "transaction control"),
    ("SET sql_mode = ''", "SET is not allowed"),
    ("SET SESSION autocommit = 1", "SET is not allowed"),
    ("SET STATEMENT max_statement_time = 0 FOR SELECT 1", "SET is not allowed"),
    ("LOCK TABLES accounts WRITE", "LOCK TABLES"),
    ("UNLOCK TABLES", "UNLOCK TABLES"),
    ("LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE accounts", "LOAD DATA"),
    ("SELECT * FROM accounts INTO OUTFILE '/tmp/x'", "OUTFILE"),
    ("SELECT 1 INTO DUMPFILE '/tmp/x'", "DUMPFILE"),
    ("SELECT name INTO @v FROM accounts", "SELECT ... INTO"),
    ("SELECT LOAD_FILE('/etc/passwd')", "LOAD_FILE"),
    ("SELECT 'load_file' AS word", "LOAD_FILE"),  # anywhere: no misread quote can hide it
    ("SELECT GET_LOCK('a', 1)", "GET_LOCK"),
    ("HANDLER accounts OPEN", "HANDLER"),
    ("GRANT ALL ON *.* TO x", "user and grant management"),
    ("CREATE USER x", "user and grant management"),
    ("DROP ROLE r", "user and grant management"),
    ("UPDATE mysql.user SET password = ''", "system schemas"),
    ("ALTER TABLE accounts ADD COLUMN note TEXT", "commits implicitly"),
    ("CREATE TABLE t (a INT)", "commits implicitly"),
    ("CREATE TEMPORARY TABLE t (a INT)", "commits implicitly"),
    ("DROP TABLE accounts", "commits implicitly"),
    ("TRUNCATE accounts", "commits implicitly"),
    ("RENAME TABLE accounts TO a2", "commits implicitly"),
    ("CALL p()", "procedural"),
    ("DO 1", "procedural"),
    ("PREPARE s FROM 'SELECT 1'", "procedural"),
    ("REPLACE INTO accounts VALUES ('x', 1)", "no tree"),
    ("", "empty statement"),
    ("/* nothing */", "empty statement"),
]


@pytest.mark.parametrize(("sql", "returns_rows"), ALLOWED)
def test_allowed_statements_pass_with_their_row_verdict(sql: str, returns_rows: bool) -> None:
    assert check_mysql(sql) is returns_rows


@pytest.mark.parametrize(("sql", "reason"), REFUSED)
def test_refused_statements_say_why(sql: str, reason: str) -> None:
    with pytest.raises(StatementRefused, match=reason.replace(".", r"\.").replace("(", r"\(")):
        check_mysql(sql)


def test_the_url_scheme_picks_the_engine_and_an_unknown_one_is_refused() -> None:
    assert engine_for_url("mariadb://u:p@h/d") == "mariadb"
    assert engine_for_url("MySQL://u:p@h/d") == "mariadb"
    assert engine_for_url("postgresql://u:p@h/d") == "postgres"
    assert engine_for_url("host=h dbname=d") == "postgres"
    with pytest.raises(StatementRefused, match="postgresql://, mysql:// or mariadb://") as caught:
        engine_for_url("oracle://u:secret-pw@h/d")
    assert "secret-pw" not in str(caught.value)


def test_url_options_are_refused() -> None:
    with pytest.raises(StatementRefused, match="may not set options"):
        open_mariadb(
            "mariadb://u:p@127.0.0.1/d?local_infile=1", allow_private=True, statement_timeout_s=5
        )


# The session, on the real server ------------------------------------------------------------


@pytest.fixture(scope="module")
def server(mariadb_server: MariaDbServer) -> Iterator[MariaDbDatabase]:
    with mariadb_server.database() as database:
        yield database


def admin(server: MariaDbDatabase, sql: str) -> list[tuple]:
    return server.sql(sql)


@pytest.fixture
def session(server: MariaDbDatabase) -> Iterator[DbSession]:
    admin(server, "DROP TABLE IF EXISTS accounts")
    admin(
        server,
        "CREATE TABLE accounts (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(20) UNIQUE, "
        "balance INT, note BLOB) ENGINE=InnoDB",
    )
    admin(server, "INSERT INTO accounts (name, balance) VALUES ('ana', 10), ('bo', 20)")
    opened = open_mariadb(server.url, allow_private=True, statement_timeout_s=5)
    yield opened
    opened.close()


def test_rows_come_back_json_safe(session: DbSession) -> None:
    session.execute("UPDATE accounts SET note = ? WHERE name = 'ana'", [{"$bytes": "AAE="}])
    reply = session.execute(
        "SELECT name, CAST(1.5 AS DECIMAL(4,2)) AS d, note, NULL AS n FROM accounts ORDER BY name"
    )
    assert reply.columns == ["name", "d", "note", "n"]
    assert reply.rows[0] == ["ana", "1.50", {"$bytes": "AAE="}, None]


def test_a_failing_statement_is_undone_alone(server: MariaDbDatabase, session: DbSession) -> None:
    session.execute("UPDATE accounts SET balance = 99 WHERE name = 'ana'")
    with pytest.raises(StatementFailed, match="Duplicate entry"):
        session.execute("INSERT INTO accounts (name, balance) VALUES ('bo', 1)")
    with pytest.raises(StatementFailed, match="Duplicate entry"):
        session.executemany(
            "INSERT INTO accounts (name, balance) VALUES (?, ?)", [["cy", 1], ["bo", 2]]
        )
    session.commit()
    assert admin(server, "SELECT name, balance FROM accounts ORDER BY name") == [
        ("ana", 99),
        ("bo", 20),
    ]


def test_rollback_discards_and_the_server_sees_nothing_before(
    server: MariaDbDatabase, session: DbSession
) -> None:
    reply = session.execute("INSERT INTO accounts (name, balance) VALUES (?, ?)", ["cy", 30])
    assert reply.rowcount == 1 and reply.lastrowid
    assert admin(server, "SELECT COUNT(*) FROM accounts") == [(2,)]
    session.rollback()
    assert admin(server, "SELECT COUNT(*) FROM accounts") == [(2,)]


def test_named_placeholders_and_wrong_counts_fail_clearly(session: DbSession) -> None:
    with pytest.raises(StatementFailed, match="\\? placeholders and a list"):
        session.execute("SELECT ?", {"a": 1})
    with pytest.raises(StatementFailed, match="1 \\? placeholder"):
        session.execute("SELECT ?", [1, 2])


# A stored routine runs under the sql_mode it was created with (and the server restores the
# session's after it), but a session variable such as the time limit it sets stays set.
def test_a_function_that_changes_a_session_variable_stops_the_run(
    server: MariaDbDatabase, session: DbSession
) -> None:
    admin(server, "DROP FUNCTION IF EXISTS loosen")
    admin(
        server,
        "CREATE FUNCTION loosen() RETURNS INT NOT DETERMINISTIC "
        "BEGIN SET SESSION max_statement_time = 0; RETURN 1; END",
    )
    session.execute("UPDATE accounts SET balance = 0")
    with pytest.raises(RunStopped, match="max_statement_time"):
        session.execute("SELECT loosen()")
    with pytest.raises(StatementFailed, match="rolled back"):
        session.execute("SELECT 1")
    assert admin(server, "SELECT SUM(balance) FROM accounts") == [(30,)]


def test_the_statement_time_limit_ends_a_long_statement(server: MariaDbDatabase) -> None:
    session = open_mariadb(server.url, allow_private=True, statement_timeout_s=0.5)
    try:
        with pytest.raises(StatementFailed, match="max_statement_time"):
            session.execute("SELECT SLEEP(5)")
        assert session.execute("SELECT 1").rows == [[1]]
    finally:
        session.close()


def test_a_wrong_password_names_no_secret(server: MariaDbDatabase) -> None:
    url = server.url.replace(PASSWORD, "not-the-password-9")
    with pytest.raises(Exception, match="cannot connect") as caught:  # noqa: PT011
        open_mariadb(url, allow_private=True, statement_timeout_s=5)
    assert "not-the-password-9" not in str(caught.value)
