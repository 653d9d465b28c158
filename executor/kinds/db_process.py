"""A db run's session in a process of its own (executor/kinds/db_child.py), driven from here.

    session = db_process.start("sqlite", {"path": ..., "memory_bytes": ...}, caps=..., owner=...)
    broker = session.serve(folder / "db.sock", uid=uid)  # the child serves the sandbox
    broker.stop(); broker.log                     # the run ended: what its statements did
    session.commit(); session.close()             # the DbSession interface PendingDb drives

The web process keeps only this proxy: the sandbox's statements go straight to the child (one
hop, as when the broker was a thread here), and SQLite's memory and temporary files, and
PostgreSQL's result buffers, are the child's, under the child's limits. The child is
trusted, yet its replies are read as data: each is one frame under a size cap, checked for
shape before it becomes a Reply or a statement log, and a child that dies or answers out of
shape ends the session (the transaction is rolled back with the child; nothing is committed).

Start-up: a spare child, its modules already loaded, waits for the next run, and a new spare
is started behind each one taken, so a run does not pay for the interpreter's start. Every
child is started by one long-lived thread, because PR_SET_PDEATHSIG fires when the thread that
started the child ends, not only when the process does.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from executor.errors import ExecutorError
from executor.kinds import db_slots, db_wire
from executor.kinds.db_broker import LOG_STATEMENTS, StatementLog
from executor.kinds.db_child import CANCEL_SIGNAL, MAX_REPLY_BYTES, MAX_REQUEST_BYTES
from executor.kinds.db_values import JsonValue, Params, Reply
from executor.kinds.errors import StatementFailed, StatementRefused, TransactionError
from executor.kinds.netpolicy import EgressRefused

logger = logging.getLogger(__name__)

DEFAULT_MEMORY_MIB = 512
_ROOT = str(Path(__file__).resolve().parents[2])


def child_code(prelude: str = "") -> str:
    """The child's program, run as `python -I -c CODE FD PARENT_PID`: no shell, no imports
    steered by the environment. `prelude` runs first (the sabotage tests switch a guard off
    in the child with it)."""
    start = "from executor.kinds.db_child import main\nmain()\n"
    return f"import sys\nsys.path.insert(0, {_ROOT!r})\n{prelude}\n{start}"


CHILD_CODE = child_code()
_ENV = {"MALLOC_ARENA_MAX": "1", "LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"}
_ERRORS: dict[str, type[Exception]] = {
    "refused": StatementRefused,
    "failed": StatementFailed,
    "transaction": TransactionError,
    "egress": EgressRefused,
}
MAX_ERROR_CHARS = 4000
MAX_LOG_CHARS = 1000
CLOSE_WAIT_S = 10.0


class _Child:
    def __init__(self, code: str) -> None:
        self.code = code
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-c", code, str(theirs.fileno()), str(os.getpid())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=_ENV,
                cwd="/",
                start_new_session=True,  # a signal to the web process's group is not its
            )
        except BaseException:
            self.sock.close()
            raise
        finally:
            theirs.close()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait()
        self.sock.close()


class _Spawner:
    """Starts every child on one thread that lives as long as the process; keeps one spare."""

    def __init__(self) -> None:
        self._thread = concurrent.futures.ThreadPoolExecutor(1, "undoable-db-spawner")
        self._lock = threading.Lock()
        self._spare: concurrent.futures.Future[_Child] | None = None

    def take(self) -> _Child:
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is None:
            started = self._thread.submit(_Child, CHILD_CODE)  # ahead of the next spare
        with self._lock:
            if self._spare is None:
                self._spare = self._thread.submit(_Child, CHILD_CODE)
        if spare is None:
            return started.result()
        with contextlib.suppress(Exception):
            child = spare.result()
            if child.code == CHILD_CODE and child.process.poll() is None:
                return child
            child.kill()
        return self._thread.submit(_Child, CHILD_CODE).result()


_spawner = _Spawner()


def _fresh_spawner() -> None:
    # A forked process has none of its parent's threads: it starts children with its own.
    global _spawner
    _spawner = _Spawner()


os.register_at_fork(after_in_child=_fresh_spawner)


class DbProcess:
    """The DbSession of a db run, served by its own child process (see the module's text)."""

    def __init__(self, engine: str, child: _Child, slots: db_slots.Slots) -> None:
        self.engine = engine
        self._child = child
        self._slots = slots
        self._lock = threading.Lock()  # one request and its reply at a time
        self._lost: str | None = None
        self._closed = False

    @property
    def pid(self) -> int:
        return self._child.process.pid

    def execute(self, sql: str, params: Params = None) -> Reply:
        return _reply(self._call({"op": "execute", "sql": sql, "params": params}, StatementFailed))

    def executemany(self, sql: str, seq: list[list | dict]) -> Reply:
        return _reply(self._call({"op": "executemany", "sql": sql, "seq": seq}, StatementFailed))

    def commit(self) -> None:
        self._call({"op": "commit"}, TransactionError)

    def rollback(self) -> None:
        self._call({"op": "rollback"}, TransactionError)

    def rollback_checked(self) -> dict[str, Any] | None:
        """PostgreSQL: roll back, with the touched tables' digests in the run's snapshot and
        after ({before, after, tables}, checked for shape); None when it could not (close()
        then rolls back)."""
        digests = self._call({"op": "rollback_checked"}, TransactionError).get("digests")
        if digests is None:
            return None
        if not (
            isinstance(digests, dict)
            and type(digests.get("before")) is str
            and type(digests.get("after")) is str
            and isinstance(digests.get("tables"), list)
            and all(type(name) is str for name in digests["tables"])
        ):
            raise TransactionError("the database process sent a rollback check out of shape")
        return digests

    def rehearsal_begin(self) -> None:
        """Have the child note the state a rehearsal starts from (db_digest); it stays in the
        child."""
        self._call({"op": "rehearsal_begin"}, TransactionError)

    def rehearsal_verdict(self) -> dict[str, Any]:
        """The state now against the rehearsal's start: {restored, diff, counters, before,
        after}, checked for shape. The transaction ends (rolled back): the child reads the
        state the rehearsal began from once the programs' changes are gone."""
        verdict = self._call({"op": "rehearsal_verdict"}, TransactionError).get("verdict")
        if not (
            isinstance(verdict, dict)
            and type(verdict.get("restored")) is bool
            and isinstance(verdict.get("diff"), list)
            and isinstance(verdict.get("counters"), dict)
            and type(verdict.get("before")) is str
            and type(verdict.get("after")) is str
        ):
            raise TransactionError("the database process sent a state comparison out of shape")
        return verdict

    def cancel(self) -> None:
        """Ask the child to stop its running statement: a signal, out of band of the socket
        (Popen signals only a child it has not reaped, so never a reused pid)."""
        self._child.process.send_signal(CANCEL_SIGNAL)

    def close(self) -> None:
        """Close the session (rolling back what is open) and end the child; never blocks for
        long: a child that does not answer in time is killed, which rolls back as well."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._lock.acquire(timeout=CLOSE_WAIT_S):
                try:
                    if self._lost is None:
                        self._child.sock.settimeout(CLOSE_WAIT_S)
                        with contextlib.suppress(OSError, db_wire.WireError):
                            self._exchange({"op": "close"})
                finally:
                    self._lock.release()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._child.process.wait(timeout=CLOSE_WAIT_S)
        finally:
            self._child.kill()
            self._slots.release()

    def serve(self, path: Path, *, uid: int | None) -> ServedBroker:
        """Have the child serve the sandbox's statements on a unix socket at `path` (its
        DbBroker, admitting only the sandbox of host uid `uid`: run_socket.py), so a statement
        costs one hop, sandbox to db process, as before."""
        self._call({"op": "serve", "path": str(path), "uid": uid}, TransactionError)
        return ServedBroker(self)

    def stop_serving(self) -> StatementLog:
        """Stop the child's broker; what its statements did, read as data under caps."""
        return _statement_log(self._call({"op": "stop"}, TransactionError).get("log"))

    def open(self, message: dict[str, Any]) -> None:
        self._call({"op": "open", **message}, TransactionError)

    def _call(self, message: dict[str, Any], failure: type[Exception]) -> dict[str, Any]:
        with self._lock:
            if self._lost is not None:
                raise failure(self._lost)
            if self._closed:
                raise failure("the database session is closed")
            try:
                reply = self._exchange(message)
            except (TypeError, ValueError) as exc:  # nothing was sent: the session is as it was
                raise failure(f"the request cannot be sent: {exc}") from None
            except (OSError, db_wire.WireError) as exc:
                raise failure(self._lose(str(exc), gone=True)) from None
            if reply.get("ok") is True:
                return reply
            error_class = _ERRORS.get(str(reply.get("kind")))
            error = reply.get("error")
            if error_class is None or not isinstance(error, str):
                raise failure(self._lose("it answered out of shape", gone=False))
        raise error_class(error[:MAX_ERROR_CHARS])

    def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        db_wire.send(self._child.sock, message, MAX_REQUEST_BYTES)
        return db_wire.receive(self._child.sock, MAX_REPLY_BYTES)

    def _lose(self, why: str, *, gone: bool) -> str:
        """The child is gone or broken: end it; the transaction dies with it."""
        with contextlib.suppress(subprocess.TimeoutExpired):  # how it ended, before we end it
            self._child.process.wait(timeout=1 if gone else 0)
        code = self._child.process.returncode
        self._child.kill()
        if code is not None and code < 0:
            how = f"was killed by {_signal_name(-code)}"
        elif code is not None:
            how = f"ended with status {code}"
        else:
            how = f"failed ({why})"
        self._lost = (
            f"the database process {how}; the transaction was rolled back and this run's "
            "changes are gone"
        )
        logger.warning("db process lost", extra={"engine": self.engine, "why": self._lost})
        return self._lost


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class ServedBroker:
    """The broker as DbJob sees it: stop() ends the serving and fetches the statement log."""

    def __init__(self, process: DbProcess) -> None:
        self._process = process
        self.log = StatementLog()

    def stop(self) -> None:
        try:
            self.log = self._process.stop_serving()
        except ExecutorError as exc:  # the child is gone: its transaction is too, Keep says so
            logger.warning("db broker stop failed", extra={"error": str(exc)})


def _statement_log(raw: object) -> StatementLog:
    if not isinstance(raw, dict):
        raise TransactionError("the database process sent no statement log")
    entries, total, refused = raw.get("entries"), raw.get("total"), raw.get("refused")
    stopped = raw.get("stopped")
    if not (
        isinstance(entries, list)
        and len(entries) <= LOG_STATEMENTS
        and all(
            isinstance(e, dict) and type(e.get("sql")) is str and type(e.get("outcome")) is str
            for e in entries
        )
        and type(total) is int
        and type(refused) is int
        and (stopped is None or type(stopped) is str)
    ):
        raise TransactionError("the database process sent a statement log out of shape")
    kept = [
        {"sql": e["sql"][:MAX_LOG_CHARS], "outcome": e["outcome"][:MAX_LOG_CHARS]} for e in entries
    ]
    return StatementLog(
        entries=kept,
        total=total,
        refused=refused,
        stopped=None if stopped is None else stopped[:MAX_ERROR_CHARS],
    )


def _reply(raw: dict[str, Any]) -> Reply:
    """A Reply from the child's answer, or StatementFailed when it is not one."""
    columns, rows = raw.get("columns"), raw.get("rows")
    rowcount, truncated, lastrowid = raw.get("rowcount"), raw.get("truncated"), raw.get("lastrowid")
    if not (
        (columns is None or (isinstance(columns, list) and all(type(c) is str for c in columns)))
        and isinstance(rows, list)
        and all(isinstance(row, list) for row in rows)
        and type(rowcount) is int
        and type(truncated) is bool
        and (lastrowid is None or type(lastrowid) is int)
    ):
        raise StatementFailed("the database process answered out of shape")
    typed_rows: list[list[JsonValue]] = rows
    return Reply(columns, typed_rows, rowcount, truncated, lastrowid)


def start(engine: str, message: dict[str, Any], *, slots: db_slots.Slots) -> DbProcess:
    """A child with `message` (its limits and target) opened; it owns `slots` from now on
    (db_slots.acquire), and frees them when it is closed. Raises the child's own error when
    the session cannot open."""
    try:
        child = _spawner.take()
    except BaseException:
        slots.release()
        raise
    session = DbProcess(engine, child, slots)
    try:
        session.open({"engine": engine, **message})
    except BaseException:
        session.close()
        raise
    logger.info("db process started", extra={"engine": engine, "pid": child.process.pid})
    return session


__all__ = ["DEFAULT_MEMORY_MIB", "DbProcess", "start"]
