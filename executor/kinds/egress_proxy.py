"""The host side of the rest kind's network: one run's allowlisting HTTP(S) proxy.

See egress.py for where it sits. It serves all of a run's connections on one thread: a
selector loop accepts, reads each request head against a deadline (HEAD_TIMEOUT_S, then 408),
decides (allowlist, then netpolicy's address check), connects upstream without blocking, then
relays both ways through bounded buffers (relay.Tunnel); a plain-http request is re-sent as the
proxy's own on the way (egress_http.py: the checked Host, one request per connection). At most
MAX_CONNECTIONS are open at once per run; past that a connection is answered 503 and counted
in `refused`.

The upstream connect is non-blocking (the loop watches it with its own deadline) so a
destination that never answers stalls only its own connection. Name resolution does block the
loop, but only for names in the run's own allowlist, and only this run's proxy.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import selectors
import socket
import threading
import time
from pathlib import Path
from typing import Any

from executor.kinds import egress_http, netpolicy, relay, run_socket

logger = logging.getLogger(__name__)

DEFAULT_PORTS = (80, 443)
_MAX_HEAD = 64 * 1024
# Per run: connections open at once, and how long a client has to send its request head.
MAX_CONNECTIONS = 32
HEAD_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0


def parse_target(authority: str) -> tuple[str, int | None]:
    """("host", port) from "host", "host:port" or "[v6]:port"."""
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = authority.rpartition(":") if ":" in authority else (authority, "", "")
    if port and not port.isdigit():
        raise ValueError(f"bad port in {authority!r}")
    return host.lower().rstrip("."), int(port) if port else None


def allowed(host: str, port: int, allowed_hosts: tuple[str, ...]) -> bool:
    for entry in allowed_hosts:
        name, fixed = parse_target(entry)
        if name == host.lower().rstrip(".") and port in ((fixed,) if fixed else DEFAULT_PORTS):
            return True
    return False


class EgressProxy:
    """Serves one run's proxy socket in `folder` until close(), on one thread for all of it.

    One selector loop accepts, reads each request head against a deadline, decides, connects
    upstream without blocking, then relays both ways through bounded buffers (relay.Tunnel).
    At most MAX_CONNECTIONS are open at once; more are answered 503 and counted in `refused`.
    """

    def __init__(
        self,
        folder: Path,
        allowed_hosts: tuple[str, ...],
        *,
        allow_private: bool,
        uid: int | None,
    ):
        self.allowed_hosts = tuple(allowed_hosts)
        self.allow_private = allow_private
        self.refused: list[str] = []  # "host:port why", for the run's report
        self.accepted = 0  # connections accepted so far, refused ones included
        self.over_cap = 0  # of those, refused for MAX_CONNECTIONS
        # Read once: a run keeps the limits it started with.
        self.max_connections = MAX_CONNECTIONS
        self.head_timeout_s = HEAD_TIMEOUT_S
        self.path = Path(folder) / "egress.sock"
        self._uid = uid  # the sandbox's host uid: only its run may connect (run_socket.py)
        self._conns: set[_Conn] = set()
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._server = run_socket.listen(self.path, uid=uid, backlog=128)
        self._sel.register(self._server, relay.READ, _ACCEPT)
        self._sel.register(self._wake_r, relay.READ, _WAKE)
        self._accept_paused_until: float | None = None
        self._stopping = False
        self._accepted_cond = threading.Condition()
        self._thread = threading.Thread(target=self._serve, name="undoable-egress", daemon=True)
        self._thread.start()

    def wait_accepted(self, count: int, timeout_s: float) -> bool:
        """Block until `count` connections were accepted (monitoring and tests)."""
        with self._accepted_cond:
            return self._accepted_cond.wait_for(lambda: self.accepted >= count, timeout_s)

    def close(self) -> None:
        """Stop the loop, close every connection and the socket; no thread outlives this."""
        if not self._stopping:
            self._stopping = True
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")
        self._thread.join()
        self._wake_w.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _serve(self) -> None:
        try:
            while not self._stopping:
                for key, mask in self._sel.select(self._next_timeout()):
                    sock = key.fileobj
                    if key.data is _ACCEPT:
                        self._accept()
                    elif (
                        isinstance(key.data, _Conn)
                        and isinstance(sock, socket.socket)
                        and sock.fileno() >= 0  # not closed earlier in this batch
                    ):
                        self._on_event(key.data, sock, mask)
                self._expire(time.monotonic())
        except Exception:
            logger.exception("egress proxy loop failed")
        finally:
            for conn in list(self._conns):
                self._drop(conn)
            self._sel.close()
            self._server.close()
            self._wake_r.close()

    def _next_timeout(self) -> float | None:
        deadlines = [c.deadline for c in self._conns if c.deadline is not None]
        if self._accept_paused_until is not None:
            deadlines.append(self._accept_paused_until)
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def _accept(self) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, _ = self._server.accept()
            except BlockingIOError:
                return
            except OSError:
                # Out of descriptors: stop accepting for a moment instead of spinning on it.
                logger.exception("egress proxy cannot accept")
                self._sel.unregister(self._server)
                self._accept_paused_until = time.monotonic() + _ACCEPT_PAUSE_S
                return
            refusal = run_socket.peer_refusal(sock, uid=self._uid, folder=self.path.parent)
            if refusal is not None:
                logger.warning("egress proxy refused a connection", extra={"why": refusal})
                sock.close()
                continue
            with self._accepted_cond:
                self.accepted += 1
                self._accepted_cond.notify_all()
            if len(self._conns) >= self.max_connections:
                self._refuse_over_cap(sock)
                continue
            sock.setblocking(False)
            conn = _Conn(sock, time.monotonic() + self.head_timeout_s)
            self._conns.add(conn)
            self._sel.register(sock, relay.READ, conn)

    def _refuse_over_cap(self, sock: socket.socket) -> None:
        self.over_cap += 1
        line = (
            f"too many connections: {self.over_cap} refused, "
            f"at most {self.max_connections} open at once"
        )
        if self.over_cap == 1:
            logger.info("egress connection cap reached", extra={"max": self.max_connections})
            self.refused.append(line)
            self._over_cap_line = len(self.refused) - 1
        else:
            self.refused[self._over_cap_line] = line
        _answer(sock, "503 Service Unavailable", line)

    def _on_event(self, conn: _Conn, sock: socket.socket, mask: int) -> None:
        if conn.tunnel is not None:
            conn.tunnel.handle(sock, mask)
            if conn.tunnel.done:
                self._drop(conn)
        elif sock is conn.upstream:
            self._connected(conn)
        else:
            self._read_head(conn)

    def _read_head(self, conn: _Conn) -> None:
        try:
            chunk = conn.client.recv(_MAX_HEAD + 1 - len(conn.head))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        conn.head += chunk
        if b"\r\n\r\n" in conn.head:
            self._decide(conn)
        elif not chunk or len(conn.head) > _MAX_HEAD:
            self._reject(conn, "403 Forbidden", "incomplete or oversized request head")

    def _decide(self, conn: _Conn) -> None:
        head = bytes(conn.head)
        try:
            method, target = _request_line(head)
            if method == "CONNECT":
                host, port = parse_target(target)
                port = port or 443
            else:
                # Read whole by h11: its target is the one checked, its Host is rewritten.
                conn.request = egress_http.ForwardedRequest(head, max_head=_MAX_HEAD)
                host, port, path = _absolute(conn.request.target)
            conn.addresses = self._resolve(host, port)
            if conn.request is not None:
                conn.to_upstream = conn.request.start(host=host, port=port, path=path)
        except (ValueError, netpolicy.EgressRefused) as exc:
            self._reject(conn, "403 Forbidden", str(exc))
            return
        if method == "CONNECT":
            conn.to_client = b"HTTP/1.1 200 Connection established\r\n\r\n"
            conn.to_upstream = head.partition(b"\r\n\r\n")[2]
        # The client's further bytes wait in the kernel until the tunnel is up.
        self._sel.unregister(conn.client)
        self._connect_next(conn)

    def _resolve(self, host: str, port: int) -> list[tuple[int, Any]]:
        if not allowed(host, port, self.allowed_hosts):
            self.refused.append(f"{host}:{port} not allowed")
            logger.info("egress refused", extra={"host": host, "port": port})
            raise netpolicy.EgressRefused(f"{host}:{port} is not in this run's allowed hosts")
        try:
            # Blocks this run's loop for the lookup: only names from its allowlist get here.
            return netpolicy.resolve(host, port, allow_private=self.allow_private)
        except netpolicy.EgressRefused as exc:
            self.refused.append(f"{host}:{port} {exc}")
            raise

    def _connect_next(self, conn: _Conn) -> None:
        """Start a non-blocking connect to the next checked address, or refuse when none is left."""
        while conn.addresses:
            family, sockaddr = conn.addresses.pop(0)
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError as exc:
                conn.error = str(exc)
                continue
            sock.setblocking(False)
            err = sock.connect_ex(sockaddr)
            if err in (0, errno.EINPROGRESS):
                conn.upstream = sock
                conn.deadline = time.monotonic() + CONNECT_TIMEOUT_S
                self._sel.register(sock, relay.WRITE, conn)
                return
            sock.close()
            conn.error = f"[Errno {err}] {os.strerror(err)}"
        self._reject(conn, "403 Forbidden", conn.error or "cannot connect")

    def _connected(self, conn: _Conn) -> None:
        upstream = conn.upstream
        assert upstream is not None
        self._sel.unregister(upstream)
        err = upstream.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            upstream.close()
            conn.upstream = None
            conn.error = f"[Errno {err}] {os.strerror(err)}"
            self._connect_next(conn)
            return
        conn.deadline = None
        conn.tunnel = relay.Tunnel(
            self._sel,
            conn.client,
            upstream,
            to_a=conn.to_client,
            to_b=conn.to_upstream,
            data=conn,
            from_a=conn.request,
        )

    def _expire(self, now: float) -> None:
        if self._accept_paused_until is not None and now >= self._accept_paused_until:
            self._accept_paused_until = None
            self._sel.register(self._server, relay.READ, _ACCEPT)
        for conn in [c for c in self._conns if c.deadline is not None and now >= c.deadline]:
            if conn.upstream is None:
                self._reject(conn, "408 Request Timeout", "no complete request head in time")
            else:
                self._sel.unregister(conn.upstream)
                conn.upstream.close()
                conn.upstream = None
                conn.error = "connect timed out"
                self._connect_next(conn)

    def _reject(self, conn: _Conn, status: str, why: str) -> None:
        _answer(conn.client, status, f"undoable egress proxy refused this request: {why}")
        self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        self._conns.discard(conn)
        if conn.tunnel is not None:
            conn.tunnel.close()
            return
        for sock in (conn.client, conn.upstream):
            if sock is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self._sel.unregister(sock)
                sock.close()


_ACCEPT = "accept"
_WAKE = "wake"
_ACCEPT_BATCH = 64  # accepts per loop turn, so a connect flood does not starve the tunnels
_ACCEPT_PAUSE_S = 0.5


class _Conn:
    """One client connection: its head, then its upstream connect, then its tunnel."""

    def __init__(self, client: socket.socket, deadline: float) -> None:
        self.client = client
        self.deadline: float | None = deadline  # head, then connect; None once relaying
        self.head = bytearray()
        self.addresses: list[tuple[int, Any]] = []
        self.upstream: socket.socket | None = None
        self.error = ""
        self.to_client = b""
        self.to_upstream = b""
        self.request: egress_http.ForwardedRequest | None = None  # plain http: re-sent by us
        self.tunnel: relay.Tunnel | None = None


def _answer(sock: socket.socket, status: str, message: str) -> None:
    """A short plain-text answer, sent without blocking (it fits a fresh socket's buffer)."""
    body = f"{message}\n".encode()
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        sock.send(
            f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nConnection: close\r\n".encode()
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
    sock.close()


def _request_line(data: bytes) -> tuple[str, str]:
    """The method and target of a request head (a plain-http one is then read whole by h11)."""
    parts = data.partition(b"\r\n")[0].decode("latin-1").split(" ")
    if len(parts) != 3:
        raise ValueError("malformed request line")
    return parts[0].upper(), parts[1]


def _absolute(target: str) -> tuple[str, int, str]:
    """host, port and origin-form path of an absolute-form http:// request target."""
    if not target.lower().startswith("http://"):
        raise ValueError("only http:// requests and CONNECT go through this proxy")
    authority, slash, path = target[7:].partition("/")
    authority = authority.rpartition("@")[2]  # userinfo never chooses the host
    host, port = parse_target(authority)
    return host, port or 80, slash + path or "/"
