"""The `db` object a db-kind program gets, and the runner that hands it over (sandbox side).

Copied into the run's control folder (/run/undoable/undoable_db.py) and run by the sandbox's
own python3, so it uses the standard library only. It holds no connection and no credential:
each call sends ONE statement over /run/undoable/db.sock to the host's broker
(executor/kinds/db_broker.py), which checks it with the database's own parser, runs it inside
the transaction the host holds, and answers with the rows. Nothing here is trusted: a program
that rewrites this module can only send other statements, which the host checks the same way.

Frames both ways: 4-byte big-endian length, then UTF-8 JSON. bytes travel as {"$bytes": b64}.
"""

import atexit
import base64
import json
import socket
import struct
import sys

SOCKET = "/run/undoable/db.sock"
SHOW_ROWS = 20
# Statements echoed to the output; past this a loop runs quietly and one line at the end counts
# the rest (the change list on the page has every statement).
ECHO_STATEMENTS = 20


class DbError(Exception):
    """The host refused the statement, or the database rejected it."""


class Result(list):
    """Rows of a statement (a list of tuples) plus rowcount, columns and lastrowid."""

    rowcount = -1
    columns = None
    lastrowid = None
    truncated = False


def _encode(value):
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"cannot send a {type(value).__name__} as a statement parameter")


def _decode(value):
    if isinstance(value, dict) and "$bytes" in value:
        return base64.b64decode(value["$bytes"])
    return value


class Db:
    Error = DbError

    def __init__(self, path=SOCKET):
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(path)
        self._inbox = bytearray()
        self._sent = 0
        atexit.register(self._summary)

    def _echo(self):
        self._sent += 1
        return self._sent <= ECHO_STATEMENTS

    def _summary(self):
        if self._sent > ECHO_STATEMENTS:
            print(f"[db] ... and {self._sent - ECHO_STATEMENTS} more statement(s), not echoed")

    def _call(self, message):
        data = json.dumps(message, default=_encode).encode()
        self._sock.sendall(struct.pack(">I", len(data)) + data)
        (size,) = struct.unpack(">I", self._read(4))
        reply = json.loads(self._read(size))  # one recv() of both, in the usual case
        if not reply.get("ok"):
            raise DbError(reply.get("error", "the statement failed"))
        return reply

    def _read(self, size):
        while len(self._inbox) < size:
            part = self._sock.recv(65536)
            if not part:
                raise DbError("the host closed the database channel")
            self._inbox += part
        data = bytes(self._inbox[:size])
        del self._inbox[:size]
        return data

    def execute(self, sql, params=None):
        reply = self._call({"op": "execute", "sql": sql, "params": params})
        result = Result(tuple(_decode(v) for v in row) for row in reply["rows"])
        result.rowcount = reply["rowcount"]
        result.columns = reply["columns"]
        result.lastrowid = reply.get("lastrowid")
        result.truncated = reply["truncated"]
        if self._echo():
            _show(sql, result)
        return result

    def executemany(self, sql, seq_of_params):
        reply = self._call({"op": "executemany", "sql": sql, "seq": list(seq_of_params)})
        if self._echo():
            print(f"[db] {_first(sql)} -> {_affected(reply['rowcount'])}")
        return reply["rowcount"]

    def query(self, sql, params=None):
        return self.execute(sql, params)

    def commit(self):
        print("[db] commit() deferred: choose Keep to commit", file=sys.stderr)

    def rollback(self):
        print("[db] rollback() deferred: choose Discard to roll back", file=sys.stderr)

    def close(self):
        pass


def _first(sql):
    return " ".join(str(sql).split())[:80]


def _affected(rowcount):
    # The drivers give -1 for a statement that has no row count (CREATE TABLE and other DDL).
    return "done" if rowcount < 0 else f"{rowcount} row(s) affected"


def _show(sql, result):
    if result.columns is None:
        print(f"[db] {_first(sql)} -> {_affected(result.rowcount)}")
        return
    more = " (more rows not fetched)" if result.truncated else ""
    print(f"[db] {_first(sql)} -> {len(result)} row(s){more}")
    print("     " + " | ".join(result.columns))
    for row in result[:SHOW_ROWS]:
        print("     " + " | ".join(repr(v) for v in row))
    if len(result) > SHOW_ROWS:
        print(f"     ... {len(result) - SHOW_ROWS} more")


def run_program(path):
    """Run the person's code (the file at `path`) with `db` in its globals, like a script."""
    with open(path) as f:
        source = f.read()
    scope = {"__name__": "__main__", "db": Db()}
    try:
        exec(compile(source, "<string>", "exec"), scope)  # noqa: S102 - the sandboxed program
    except SystemExit:
        raise
    except BaseException as exc:
        tb = exc.__traceback__
        sys.stdout.flush()
        sys.excepthook(type(exc), exc, tb.tb_next if tb else None)
        sys.exit(1)
