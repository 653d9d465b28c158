"""The host end of a db run: statements from the sandbox, one per call, on the host's connection.

The database connection and its transaction live here, in the trusted process, never in the
sandbox: the program only holds a unix socket (bound in at /run/undoable/db.sock) and asks.
Each request is one statement; the session (executor/kinds/db_engines.py) checks it with the
database's own parser and runs it. Keep and Undo are the host's calls on the session, made
after the sandbox is gone, so nothing the program does can commit, roll back or see the
credential.

One thread serves every client of the run through a selector: a program that opens sockets
and never writes costs a few bytes each, not a thread, and at most MAX_CLIENTS at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import selectors
import socket
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor.kinds import run_socket
from executor.kinds.db_engines import DbSession, Reply
from executor.kinds.errors import RunStopped, StatementFailed, StatementRefused

logger = logging.getLogger(__name__)

MAX_CLIENTS = 8
MAX_REQUEST_BYTES = 1 << 20  # one statement with its parameters
MAX_BATCH = 100_000  # parameter sets of one executemany
LOG_STATEMENTS = 200  # statements remembered for the change list; the rest are counted
# After the session's cancel() (itself bounded), how long stop() waits for the serving thread.
STOP_JOIN_S = 10.0
_HEADER = struct.Struct(">I")


@dataclass
class StatementLog:
    """What the run's statements did, for the change list (the first LOG_STATEMENTS)."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    total: int = 0
    refused: int = 0
    stopped: str | None = None  # why the session ended the run's transaction itself (RunStopped)

    def note(self, sql: str, outcome: str, *, refused: bool = False) -> None:
        self.total += 1
        self.refused += refused
        if len(self.entries) < LOG_STATEMENTS:
            self.entries.append({"sql": " ".join(sql.split())[:200], "outcome": outcome})


class _Client:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.events = selectors.EVENT_READ


class DbBroker:
    """Serves `session` on the unix socket at `path` until stop().

    `path` is in the run's control folder (run_socket.control_folder); `uid` is the sandbox's
    host uid. Only the run's sandbox can connect (run_socket.py); anyone else is hung up on.
    """

    def __init__(self, path: Path, session: DbSession, *, uid: int | None) -> None:
        self.path = Path(path)
        self.session = session
        self.log = StatementLog()
        self._uid = uid
        self._selector = selectors.DefaultSelector()
        self._server = run_socket.listen(self.path, uid=uid, backlog=MAX_CLIENTS)
        self._selector.register(self._server, selectors.EVENT_READ)
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._clients: dict[socket.socket, _Client] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="undoable-db-broker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving (the sandbox ended): end the statement in flight, close every socket.

        The session stays open for Keep or Undo. Bounded: no statement starts once stopping,
        and the session's cancel() ends the one in flight, so none holds this thread (or the
        caller's) past the run.
        """
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self.session.cancel()
        self._thread.join(STOP_JOIN_S)
        if self._thread.is_alive():
            logger.error("the db broker did not stop after its statement was cancelled")
        for sock in [self._server, self._wake_r, self._wake_w, *self._clients]:
            sock.close()
        self._clients.clear()
        self._selector.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _serve(self) -> None:
        try:
            while not self._stopping:
                for key, events in self._selector.select():
                    if key.fileobj is self._server:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        return
                    else:
                        self._service(self._clients[key.fileobj], events)  # type: ignore[index]
        except Exception:
            logger.exception("db broker failed")

    def _accept(self) -> None:
        try:
            sock, _ = self._server.accept()
        except OSError:
            return
        refusal = run_socket.peer_refusal(sock, uid=self._uid, folder=self.path.parent)
        if refusal is not None:
            logger.warning("db broker refused a connection", extra={"why": refusal})
            sock.close()
            return
        if len(self._clients) >= MAX_CLIENTS:
            sock.close()
            return
        sock.setblocking(False)
        self._clients[sock] = _Client(sock)
        self._selector.register(sock, selectors.EVENT_READ)

    def _drop(self, client: _Client) -> None:
        self._selector.unregister(client.sock)
        del self._clients[client.sock]
        client.sock.close()

    def _service(self, client: _Client, events: int) -> None:
        try:
            if events & selectors.EVENT_WRITE:
                del client.outbox[: client.sock.send(client.outbox)]
            if events & selectors.EVENT_READ:
                data = client.sock.recv(65536)
                if not data:
                    self._drop(client)
                    return
                client.inbox += data
                if len(client.inbox) > 2 * MAX_REQUEST_BYTES:  # pipelined without reading
                    self._drop(client)
                    return
            # One request at a time per client: the next is read once the reply is sent.
            if not client.outbox and len(client.inbox) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(client.inbox)
                if size > MAX_REQUEST_BYTES:
                    with contextlib.suppress(OSError):
                        client.sock.send(_frame({"ok": False, "error": "statement too large"}))
                    self._drop(client)
                    return
                if len(client.inbox) >= _HEADER.size + size:
                    body = bytes(client.inbox[_HEADER.size : _HEADER.size + size])
                    del client.inbox[: _HEADER.size + size]
                    client.outbox += _frame(self._answer(body))
                    del client.outbox[: client.sock.send(client.outbox)]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._drop(client)
            return
        wanted = selectors.EVENT_WRITE if client.outbox else selectors.EVENT_READ
        if wanted != client.events:  # one syscall saved per statement in the usual case
            client.events = wanted
            self._selector.modify(client.sock, wanted)

    def _answer(self, body: bytes) -> dict[str, Any]:
        try:
            request = json.loads(body)
            op, sql = request["op"], request["sql"]
            if not isinstance(sql, str):
                raise ValueError("sql must be a string")
        except (ValueError, KeyError, TypeError, RecursionError):
            return {"ok": False, "error": "malformed request"}
        if self._stopping:  # the run is over: stop() cancels what runs, nothing starts
            return {"ok": False, "error": "the run has ended: no more statements"}
        try:
            if op == "execute":
                reply = self.session.execute(sql, _params(request.get("params")))
            elif op == "executemany":
                seq = request.get("seq")
                if not isinstance(seq, list) or len(seq) > MAX_BATCH:
                    raise StatementRefused(f"executemany takes a list of at most {MAX_BATCH}")
                reply = self.session.executemany(sql, [_params(p) or [] for p in seq])
            else:
                return {"ok": False, "error": f"unknown operation {op!r}"}
        except StatementRefused as exc:
            self.log.note(sql, f"refused: {exc}", refused=True)
            return {"ok": False, "error": f"refused by Undoable: {exc}"}
        except StatementFailed as exc:
            if isinstance(exc, RunStopped):
                self.log.stopped = self.log.stopped or str(exc)
            self.log.note(sql, f"failed: {exc}")
            return {"ok": False, "error": str(exc)}
        self.log.note(sql, _summary(reply))
        return reply.message()


def _params(raw: object) -> list | dict | None:
    """Parameters as sent; their values (bytes as {"$bytes": b64}) are the session's to check."""
    if raw is None or isinstance(raw, (list, dict)):
        return raw
    raise StatementRefused("parameters must be a list or an object")


def _summary(reply: Reply) -> str:
    if reply.columns is None:
        return f"{reply.rowcount} row(s) affected"
    return f"{len(reply.rows)} row(s)"


def _frame(message: dict[str, Any]) -> bytes:
    data = json.dumps(message).encode()
    return _HEADER.pack(len(data)) + data
