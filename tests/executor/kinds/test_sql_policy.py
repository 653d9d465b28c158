"""The PostgreSQL statement policy (PostgreSQL's own parser) and SQLite's authorizer decision."""

from __future__ import annotations

import sqlite3

import pytest

from executor.kinds.errors import StatementFailed, StatementRefused
from executor.kinds.sql_policy import check_postgres, sqlite_authorize

REFUSED = {
    "dollar-quoted COMMIT": "SELECT $$'$$; UPDATE t SET x=1; COMMIT; SELECT $$'$$",
    "COMMIT behind a comment": "/* ; */ COMMIT",
    "two statements": "SELECT 1; SELECT 2",
    "COMMIT": "COMMIT",
    "END": "END",
    "ROLLBACK": "ROLLBACK",
    "ABORT": "ABORT",
    "BEGIN": "BEGIN",
    "START TRANSACTION": "START TRANSACTION",
    "PREPARE TRANSACTION": "PREPARE TRANSACTION 'x'",
    "COMMIT PREPARED": "COMMIT PREPARED 'x'",
    "SAVEPOINT": "SAVEPOINT a",
    "RELEASE": "RELEASE SAVEPOINT a",
    "ROLLBACK TO": "ROLLBACK TO SAVEPOINT a",
    "set_config": "SELECT set_config('role', 'postgres', false)",
    "qualified set_config": "SELECT pg_catalog.set_config('role', 'postgres', false)",
    "quoted set_config": "SELECT \"pg_catalog\".\"set_config\"('role', 'x', false)",
    "set_config in a default": "CREATE TABLE t (x text DEFAULT set_config('role', 'x', true))",
    "set_config in a CTE": "WITH a AS (SELECT set_config('a', 'b', false)) SELECT * FROM a",
    "dblink_exec": "SELECT dblink_exec('host=evil', 'COMMIT')",
    "dblink": "SELECT * FROM dblink('host=evil', 'SELECT 1') AS t(x int)",
    "pg_terminate_backend": "SELECT pg_terminate_backend(1)",
    "pg_cancel_backend": "SELECT pg_cancel_backend(1)",
    "pg_reload_conf": "SELECT pg_reload_conf()",
    "pg_read_file": "SELECT pg_read_file('/etc/passwd')",
    "pg_ls_dir": "SELECT pg_ls_dir('.')",
    "pg_notify": "SELECT pg_notify('c', 'x')",
    "session advisory lock": "SELECT pg_advisory_lock(1)",
    "pg_switch_wal": "SELECT pg_switch_wal()",
    "lo_import": "SELECT lo_import('/etc/passwd')",
    "lo_export": "SELECT lo_export(1, '/tmp/x')",
    "query_to_xml runs unchecked SQL": "SELECT query_to_xml('SELECT 1', true, true, '')",
    "COPY TO PROGRAM": "COPY t TO PROGRAM 'id'",
    "COPY FROM file": "COPY t FROM '/etc/passwd'",
    "COPY TO STDOUT": "COPY t TO STDOUT",
    "COPY query": "COPY (SELECT 1) TO STDOUT",
    "SET ROLE": "SET ROLE postgres",
    "SET SESSION AUTHORIZATION": "SET SESSION AUTHORIZATION postgres",
    "SET statement_timeout": "SET statement_timeout = 0",
    "SET LOCAL statement_timeout": "SET LOCAL statement_timeout = 0",
    "SET standard_conforming_strings": "SET standard_conforming_strings = off",
    "SET TRANSACTION": "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
    "RESET ALL": "RESET ALL",
    "RESET ROLE": "RESET ROLE",
    "LISTEN": "LISTEN x",
    "NOTIFY": "NOTIFY x",
    "UNLISTEN": "UNLISTEN *",
    "DO": "DO $$ BEGIN COMMIT; END $$",
    "CALL": "CALL p()",
    "CREATE FUNCTION": "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE PROCEDURE": "CREATE PROCEDURE p() LANGUAGE sql AS 'SELECT 1'",
    "CREATE TRIGGER": "CREATE TRIGGER t AFTER INSERT ON t EXECUTE FUNCTION f()",
    "trigger inside CREATE SCHEMA": (
        "CREATE SCHEMA s CREATE TABLE t (x int) "
        "CREATE TRIGGER tr AFTER INSERT ON t EXECUTE FUNCTION f()"
    ),
    "PREPARE": "PREPARE q AS SELECT 1",
    "EXECUTE": "EXECUTE q",
    "DEALLOCATE": "DEALLOCATE ALL",
    "DECLARE": "DECLARE c CURSOR FOR SELECT 1",
    "FETCH": "FETCH c",
    "LOAD": "LOAD 'plpgsql'",
    "VACUUM": "VACUUM",
    "ANALYZE": "ANALYZE t",
    "CHECKPOINT": "CHECKPOINT",
    "ALTER SYSTEM": "ALTER SYSTEM SET work_mem = '1GB'",
    "CREATE DATABASE": "CREATE DATABASE x",
    "DROP DATABASE": "DROP DATABASE x",
    "CREATE EXTENSION": "CREATE EXTENSION dblink",
    "DISCARD": "DISCARD ALL",
    "CREATE ROLE": "CREATE ROLE x SUPERUSER",
    "GRANT a role": "GRANT pg_read_server_files TO x",
    "ALTER ROLE RENAME": "ALTER ROLE postgres RENAME TO x",
    "EXPLAIN of a refused statement": "EXPLAIN ANALYZE SELECT pg_terminate_backend(1)",
    "empty": "",
    "only a semicolon": ";",
    "NUL byte": "SELECT 1\x00; COMMIT",
    "lone surrogate": "SELECT '\udc80'",
    "deep parentheses": "SELECT " + "(" * 10_000 + "1" + ")" * 10_000,
    "deep function calls": "SELECT " + "f(" * 10_000 + "1" + ")" * 10_000,
    "a left-deep chain of 500,000 operators": "SELECT " + "+".join(["1"] * 500_000),
    # Issue 41: system catalogs (pg_settings' rule calls set_config), and sequence rewinds.
    "UPDATE pg_settings": "UPDATE pg_settings SET setting = 'off' WHERE name = 'x'",
    "UPDATE pg_catalog.pg_settings": "UPDATE pg_catalog.pg_settings SET setting = '0'",
    "a catalog write in a CTE": "WITH u AS (UPDATE pg_settings SET setting = 1) SELECT 1",
    "INSERT into a catalog": "INSERT INTO pg_catalog.pg_description VALUES (1, 1, 0, 'x')",
    "DELETE from information_schema": "DELETE FROM information_schema.sql_features",
    "MERGE into a catalog": "MERGE INTO pg_settings USING t ON true WHEN MATCHED THEN DELETE",
    "TRUNCATE a catalog": "TRUNCATE t, pg_catalog.pg_shdescription",
    "ALTER TABLE of a catalog": "ALTER TABLE pg_class ADD COLUMN x int",
    "setval": "SELECT setval('s', 1)",
    "qualified setval": "SELECT pg_catalog.setval('s', 1, false)",
    "setval in a CTE": "WITH r AS (SELECT setval('s', 1)) INSERT INTO t SELECT * FROM r",
    "ALTER SEQUENCE RESTART": "ALTER SEQUENCE s RESTART",
    "ALTER SEQUENCE RESTART WITH": "ALTER SEQUENCE s INCREMENT 2 RESTART WITH 1",
    "identity RESTART": "ALTER TABLE t ALTER COLUMN id RESTART WITH 1",
    "identity SET ... RESTART": "ALTER TABLE t ALTER COLUMN id SET INCREMENT BY 2 RESTART",
}

ALLOWED = {
    "select": "SELECT * FROM t WHERE x = 1",
    "select with a trailing semicolon and comment": "SELECT 1; -- done",
    "insert": "INSERT INTO t (x) VALUES (1), (2) RETURNING x",
    "update": "UPDATE t SET x = x + 1",
    "delete": "DELETE FROM t WHERE x > 1",
    "merge": "MERGE INTO t USING s ON t.x = s.x WHEN MATCHED THEN DELETE",
    "data-modifying CTE": "WITH d AS (DELETE FROM t RETURNING *) SELECT count(*) FROM d",
    "create table": "CREATE TABLE t (x serial PRIMARY KEY, y text DEFAULT now()::text)",
    "create table as": "CREATE TABLE u AS SELECT * FROM t",
    "select into": "SELECT * INTO u FROM t",
    "alter table": "ALTER TABLE t ADD COLUMN z int",
    "rename a table": "ALTER TABLE t RENAME TO u",
    "drop table": "DROP TABLE t",
    "create index": "CREATE INDEX i ON t (x)",
    "create view": "CREATE VIEW v AS SELECT x FROM t",
    "create sequence": "CREATE SEQUENCE s",
    "create type": "CREATE TYPE mood AS ENUM ('sad', 'ok')",
    "create schema": "CREATE SCHEMA s CREATE TABLE t (x int)",
    "comment": "COMMENT ON TABLE t IS 'x'",
    "truncate": "TRUNCATE t",
    "lock": "LOCK TABLE t IN EXCLUSIVE MODE",
    "grant on a table": "GRANT SELECT ON t TO PUBLIC",
    "show": "SHOW work_mem",
    "SET LOCAL of a planner setting": "SET LOCAL enable_seqscan = off",
    "EXPLAIN ANALYZE DELETE (runs inside the held transaction)": "EXPLAIN ANALYZE DELETE FROM t",
    "allowed pg_ functions": "SELECT pg_typeof(1), pg_sleep(0), pg_advisory_xact_lock(1)",
    "ordinary functions": "SELECT count(*), lower('A'), now(), nextval('s') FROM t",
    "text that looks like SQL": "SELECT 'COMMIT; SET ROLE x', $$; COMMIT$$, \"pg_ls_dir\" FROM t",
    "percent signs": "SELECT '%s %(x)s %%' LIKE '%'",
    "reading pg_settings": "SELECT name, setting FROM pg_settings",
    "a table of ones own named pg_*": "UPDATE public.pg_x SET y = 1",
    "other sequence changes": "ALTER SEQUENCE s INCREMENT 2 MAXVALUE 1000",
    "TRUNCATE ... RESTART IDENTITY (transactional, under an exclusive lock)": (
        "TRUNCATE t RESTART IDENTITY"
    ),
    "a long flat insert": "INSERT INTO t VALUES "
    + ", ".join(f"({i}, 'x', NULL)" for i in range(5000)),
}


@pytest.mark.parametrize("sql", list(REFUSED.values()), ids=list(REFUSED))
def test_it_refuses(sql: str) -> None:
    with pytest.raises(StatementRefused):
        check_postgres(sql)


@pytest.mark.parametrize("sql", list(ALLOWED.values()), ids=list(ALLOWED))
def test_it_allows(sql: str) -> None:
    check_postgres(sql)


def test_the_dollar_quote_attack_is_refused_as_several_statements() -> None:
    with pytest.raises(StatementRefused, match="one statement per call"):
        check_postgres("SELECT $$'$$; UPDATE t SET x=1; COMMIT; SELECT $$'$$")


def test_a_refusal_names_what_and_why() -> None:
    with pytest.raises(StatementRefused, match="COMMIT is not allowed: Undoable holds"):
        check_postgres("COMMIT")
    with pytest.raises(StatementRefused, match=r"pg_catalog\.set_config\(\) is not allowed"):
        check_postgres("SELECT pg_catalog.set_config('role', 'x', false)")
    with pytest.raises(StatementRefused, match="COPY is not allowed: it reads or writes files"):
        check_postgres("COPY t TO PROGRAM 'id'")


def test_a_syntax_error_is_the_parsers_answer() -> None:
    with pytest.raises(StatementFailed, match="syntax error"):
        check_postgres("SELEC 1")


def test_it_says_which_statements_return_rows() -> None:
    assert check_postgres("SELECT 1") is True
    assert check_postgres("INSERT INTO t VALUES (1) RETURNING x") is True
    assert check_postgres("INSERT INTO t VALUES (1)") is False
    assert check_postgres("CREATE TABLE t (x int)") is False
    assert check_postgres("SELECT 1 INTO u") is False


def test_it_checks_statements_with_server_side_placeholders() -> None:
    assert check_postgres("INSERT INTO t VALUES ($1, $2)") is False
    assert check_postgres("SELECT x FROM t WHERE y = $1") is True
    with pytest.raises(StatementRefused, match="pg_read_file"):
        check_postgres("SELECT pg_read_file($1)")


@pytest.mark.parametrize(
    ("action", "arg1", "arg2"),
    [
        (sqlite3.SQLITE_TRANSACTION, "COMMIT", None),
        (sqlite3.SQLITE_SAVEPOINT, "RELEASE", "x"),
        (sqlite3.SQLITE_ATTACH, "/etc/passwd", None),
        (sqlite3.SQLITE_DETACH, "x", None),
        (sqlite3.SQLITE_PRAGMA, "journal_mode", "OFF"),
        (sqlite3.SQLITE_PRAGMA, "journal_mode", None),
        (sqlite3.SQLITE_PRAGMA, "writable_schema", "1"),
        (sqlite3.SQLITE_PRAGMA, "synchronous", "0"),
        (sqlite3.SQLITE_PRAGMA, "max_page_count", "999999"),
        (sqlite3.SQLITE_PRAGMA, "temp_store_directory", "/tmp"),
        (sqlite3.SQLITE_PRAGMA, "database_list", None),
        (sqlite3.SQLITE_PRAGMA, "user_version", "3"),
        (sqlite3.SQLITE_FUNCTION, None, "load_extension"),
        (sqlite3.SQLITE_FUNCTION, None, "fts3_tokenizer"),
        (sqlite3.SQLITE_CREATE_VTABLE, "t", "zipfile"),
    ],
)
def test_sqlite_refuses(action: int, arg1: str | None, arg2: str | None) -> None:
    assert sqlite_authorize(action, arg1, arg2)


@pytest.mark.parametrize(
    ("action", "arg1", "arg2"),
    [
        (sqlite3.SQLITE_SELECT, None, None),
        (sqlite3.SQLITE_INSERT, "t", None),
        (sqlite3.SQLITE_CREATE_TABLE, "t", None),
        (sqlite3.SQLITE_PRAGMA, "table_info", "t"),
        (sqlite3.SQLITE_PRAGMA, "user_version", None),
        (sqlite3.SQLITE_FUNCTION, None, "lower"),
        (sqlite3.SQLITE_CREATE_VTABLE, "t", "fts5"),
    ],
)
def test_sqlite_allows(action: int, arg1: str | None, arg2: str | None) -> None:
    assert sqlite_authorize(action, arg1, arg2) is None
