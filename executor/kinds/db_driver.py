"""The in-sandbox database driver (stdlib + sqlite3/psycopg2 of the sandbox's python3).

Run as the sandbox program. It opens the connection, starts a transaction, runs the person's
code (/run/undoable/user.py) with a `db` object whose commit/rollback/close do nothing, shows
what each statement did, then tells the host "pending" on /run/undoable/control.sock and waits
for "commit" or "rollback". No answer within the timeout, or a lost host: rollback.
"""

import json
import os
import re
import select
import socket
import sqlite3
import sys
import traceback

CTL = "/run/undoable"
SHOW_ROWS = 20
# Statements that would end or escape the transaction the sandbox holds for Keep/Undo.
_TX_CONTROL = re.compile(
    r"^\s*(commit|end|rollback|abort|begin|start\s+transaction|prepare\s+transaction|vacuum)\b",
    re.IGNORECASE,
)
_SQLITE_DENY = {sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH}


def _statements(sql):
    """Split on semicolons outside quotes and comments (enough to spot a COMMIT)."""
    out, buf, quote, i = [], [], None, 0
    while i < len(sql):
        ch = sql[i]
        if quote:
            buf.append(ch)
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            buf.append(ch)
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = len(sql) if j < 0 else j
            continue
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = len(sql) if j < 0 else j + 2
            continue
        elif ch == ";":
            out.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
        i += 1
    out.append("".join(buf))
    return [s for s in out if s.strip()]


def _guard(sql):
    for statement in _statements(sql):
        if _TX_CONTROL.match(statement):
            raise PermissionError(
                "transaction control is not allowed here: Undoable holds the transaction "
                "open until you choose Keep (commit) or Undo (rollback)"
            )


def _show(sql, cursor):
    first = " ".join(sql.split())[:80]
    if cursor.description:
        rows = cursor.fetchall()
        names = [d[0] for d in cursor.description]
        print(f"[db] {first} -> {len(rows)} row(s)")
        print("     " + " | ".join(names))
        for row in rows[:SHOW_ROWS]:
            print("     " + " | ".join(repr(v) for v in row))
        if len(rows) > SHOW_ROWS:
            print(f"     ... {len(rows) - SHOW_ROWS} more")
        return rows
    print(f"[db] {first} -> {cursor.rowcount} row(s) affected")
    return []


class Result(list):
    """Rows of a SELECT (a list) plus the affected row count."""

    rowcount = -1


class Db:
    """What the person's code gets as `db`: statements run inside the held transaction."""

    def __init__(self, conn):
        self._conn = conn

    def execute(self, sql, params=()):
        _guard(sql)
        cursor = self._conn.cursor()
        cursor.execute(sql, params)
        result = Result(_show(sql, cursor))
        result.rowcount = cursor.rowcount
        return result

    def executemany(self, sql, seq):
        _guard(sql)
        cursor = self._conn.cursor()
        cursor.executemany(sql, seq)
        first = " ".join(sql.split())[:80]
        print(f"[db] {first} -> {cursor.rowcount} row(s) affected")
        return cursor.rowcount

    def query(self, sql, params=()):
        return self.execute(sql, params)

    def commit(self):
        print("[db] commit() deferred: choose Keep to commit", file=sys.stderr)

    def rollback(self):
        print("[db] rollback() deferred: choose Undo to roll back", file=sys.stderr)

    def close(self):
        pass


def _open(config):
    if config["engine"] == "sqlite":
        conn = sqlite3.connect(config["sqlite_path"], isolation_level=None)

        def authorize(action, arg1, arg2, dbname, source):
            if action in _SQLITE_DENY:
                return sqlite3.SQLITE_DENY
            if action == sqlite3.SQLITE_PRAGMA and arg1 in ("journal_mode", "writable_schema"):
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK

        conn.execute("BEGIN IMMEDIATE")  # before the authorizer, which forbids BEGIN
        conn.set_authorizer(authorize)

        def finish(commit):
            conn.set_authorizer(None)
            conn.execute("COMMIT" if commit else "ROLLBACK")

        return conn, lambda: conn.in_transaction, finish
    import psycopg2

    url = os.environ.pop(config["url_env"])  # the person's code never sees the credential
    conn = psycopg2.connect(url, host=CTL + "/pg", port=5432)
    conn.autocommit = False
    cur = conn.cursor()
    cur.execute("SELECT pg_current_xact_id()::text")
    xid = cur.fetchone()[0]

    def same_transaction():
        if conn.get_transaction_status() != 2:  # TRANSACTION_STATUS_INTRANS
            return False
        cur.execute("SELECT pg_current_xact_id()::text")
        return cur.fetchone()[0] == xid

    def finish_pg(commit):
        conn.commit() if commit else conn.rollback()

    return conn, same_transaction, finish_pg


def _wait_decision(ctl, timeout_s):
    ready, _, _ = select.select([ctl], [], [], timeout_s)
    if not ready:
        return "timeout"
    line = ctl.makefile("r").readline().strip()
    return line if line in ("commit", "rollback") else "rollback"


def main():
    with open(CTL + "/db.json") as f:
        config = json.load(f)
    ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ctl.connect(CTL + "/control.sock")

    def tell(**event):
        ctl.sendall((json.dumps(event) + "\n").encode())

    conn, same_transaction, finish = _open(config)
    with open(CTL + "/user.py") as f:
        source = f.read()
    scope = {"__name__": "__main__", "db": Db(conn)}
    try:
        exec(compile(source, "<string>", "exec"), scope)  # noqa: S102 - the sandboxed program
    except SystemExit as exc:
        failed = exc.code not in (None, 0)
    except BaseException as exc:
        tb = exc.__traceback__
        traceback.print_exception(type(exc), exc, tb.tb_next if tb else None)
        failed = True
    else:
        failed = False
    sys.stdout.flush()
    if failed or not same_transaction():
        if not failed:
            print("[db] the transaction was ended by the code; rolling back", file=sys.stderr)
        finish(False)
        tell(event="rolled_back", reason="failed")
        sys.exit(1)
    timeout_s = config["timeout_s"]
    print(
        "[db] transaction pending: Keep commits it, Undo rolls it back "
        f"(automatic rollback in {timeout_s:g} s)"
    )
    sys.stdout.flush()
    tell(event="pending", timeout_s=timeout_s)
    decision = _wait_decision(ctl, timeout_s)
    if decision == "commit":
        finish(True)
        print("[db] committed")
        tell(event="committed")
    else:
        finish(False)
        reason = "timeout" if decision == "timeout" else "undo"
        print("[db] rolled back" + (" after timeout" if reason == "timeout" else ""))
        tell(event="rolled_back", reason=reason)
    conn.close()


main()
