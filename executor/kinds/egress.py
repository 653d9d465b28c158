"""The `rest` kind's network: an allowlisting HTTP(S) proxy that lives outside the sandbox.

The sandbox keeps its own empty network namespace (loopback only). Its one way out is a unix
socket, bound in at /run/undoable/egress.sock, served by `EgressProxy` on the host; an
in-sandbox forwarder (egress_forwarder.py) exposes it as 127.0.0.1:PROXY_PORT and the program
gets HTTP_PROXY/HTTPS_PROXY pointing there. The proxy answers CONNECT (https) and absolute-form
requests (http), and only for a destination in the run's `allowed_hosts`:

    "api.example.com"        ports 80 and 443 of that name
    "127.0.0.1:8080"         that port only

It resolves the name itself and connects to the checked address; loopback, private,
link-local and other internal addresses are refused unless the server sets allow_private.
Anything else (raw sockets, UDP, DNS) has no route at all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from executor.kinds import netpolicy
from executor.kinds.job import Job
from executor.kinds.relay import pump
from executor.limits import Limits
from executor.policy.mounts import CONTROL_DIR, Mount
from executor.result import RunResult
from executor.spec import RunSpec

logger = logging.getLogger(__name__)

PROXY_PORT = 3128
DEFAULT_PORTS = (80, 443)
_MAX_HEAD = 64 * 1024
_FORWARDER = Path(__file__).with_name("egress_forwarder.py")


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
    """Serves one run's proxy socket in `folder` until close()."""

    def __init__(self, folder: Path, allowed_hosts: tuple[str, ...], *, allow_private: bool):
        self.allowed_hosts = tuple(allowed_hosts)
        self.allow_private = allow_private
        self.refused: list[str] = []  # "host:port why", for the run's report
        self.path = Path(folder) / "egress.sock"
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        os.chmod(self.path, 0o666)  # noqa: S103 - the sandbox's unprivileged uid must connect
        self._server.listen(64)
        threading.Thread(target=self._accept_loop, name="undoable-egress", daemon=True).start()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        try:
            head = _read_head(client)
            method, target, version, rest = _split_request(head)
            if method == "CONNECT":
                host, port = parse_target(target)
                port = port or 443
            else:
                host, port, target = _absolute(target)
            upstream = self._open(host, port)
        except (ValueError, netpolicy.EgressRefused, OSError) as exc:
            with contextlib.suppress(OSError):
                body = f"undoable egress proxy refused this request: {exc}\n".encode()
                client.sendall(
                    b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
            client.close()
            return
        if method == "CONNECT":
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            upstream.sendall(f"{method} {target} {version}\r\n".encode() + rest)
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
        pump(client, upstream)

    def _open(self, host: str, port: int) -> socket.socket:
        if not allowed(host, port, self.allowed_hosts):
            self.refused.append(f"{host}:{port} not allowed")
            logger.info("egress refused", extra={"host": host, "port": port})
            raise netpolicy.EgressRefused(f"{host}:{port} is not in this run's allowed hosts")
        try:
            return netpolicy.connect(host, port, allow_private=self.allow_private)
        except netpolicy.EgressRefused as exc:
            self.refused.append(f"{host}:{port} {exc}")
            raise

    def close(self) -> None:
        self._server.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def _read_head(client: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(4096)
        if not chunk or len(data) > _MAX_HEAD:
            raise ValueError("incomplete or oversized request head")
        data += chunk
    return data


def _split_request(data: bytes) -> tuple[str, str, str, bytes]:
    line, _, rest = data.partition(b"\r\n")
    parts = line.decode("latin-1").split(" ")
    if len(parts) != 3:
        raise ValueError("malformed request line")
    return parts[0].upper(), parts[1], parts[2], rest


def _absolute(target: str) -> tuple[str, int, str]:
    """host, port and origin-form path of an absolute-form http:// request target."""
    if not target.lower().startswith("http://"):
        raise ValueError("only http:// requests and CONNECT go through this proxy")
    authority, slash, path = target[7:].partition("/")
    authority = authority.rpartition("@")[2]  # userinfo never chooses the host
    host, port = parse_target(authority)
    return host, port or 80, slash + path or "/"


def rest_prepare(
    spec: RunSpec, folder: Path, *, allow_private: bool
) -> tuple[RunSpec, list[Mount], EgressProxy]:
    """Wrap `spec` so its program runs behind the forwarder, with the proxy serving `folder`.

    The program itself is unchanged; it is started by a small bash wrapper once the
    forwarder's port is open. `folder` is bind-mounted read-only at /run/undoable.
    """
    proxy = EgressProxy(folder, spec.allowed_hosts, allow_private=allow_private)
    (folder / "forwarder.py").write_text(_FORWARDER.read_text())
    ext = "py" if spec.language == "python" else "sh"
    (folder / f"program.{ext}").write_text(spec.code)
    run = "python3 -u" if spec.language == "python" else "bash"
    wrapper = (
        f"python3 -I {CONTROL_DIR}/forwarder.py {PROXY_PORT} || exit 125\n"
        f"exec {run} {CONTROL_DIR}/program.{ext}\n"
    )
    proxy_url = f"http://127.0.0.1:{PROXY_PORT}"
    env = {
        **spec.env,
        "HTTP_PROXY": proxy_url,
        "HTTPS_PROXY": proxy_url,
        "http_proxy": proxy_url,
        "https_proxy": proxy_url,
        "NO_PROXY": "",
    }
    wrapped = dataclasses.replace(spec, code=wrapper, language="bash", env=env)
    return wrapped, [Mount(folder, CONTROL_DIR)], proxy


FORWARD_OUTPUT_FILE = "forward_output.txt"
_ENV_MAX = 100_000  # one environment string must stay under the kernel's 128 KiB


def with_forward_output(spec: RunSpec, output: str) -> RunSpec:
    """The reverse run sees the forward run's output as $FORWARD_OUTPUT and a workdir file."""
    files = {**spec.files, FORWARD_OUTPUT_FILE: output.encode()}
    env = {**spec.env, "FORWARD_OUTPUT": output.replace("\x00", "")[-_ENV_MAX:]}
    return dataclasses.replace(spec, files=files, env=env)


class RestJob(Job):
    def __init__(
        self, spec: RunSpec, limits: Limits, mounts: tuple[Mount, ...], proxy: EgressProxy
    ):
        super().__init__(spec, limits, mounts)
        self._proxy = proxy

    def finish(self, result: RunResult | None) -> list[str]:
        """Close the proxy; the destinations it refused ("host:port why"), for the report."""
        self._proxy.close()
        return list(self._proxy.refused)


@contextlib.contextmanager
def prepared(
    spec: RunSpec, *, limits: Limits, control_base: Path, allow_private: bool = False
) -> Iterator[RestJob]:
    """A rest-kind run: the program behind the forwarder, the proxy serving a fresh folder."""
    folder = Path(tempfile.mkdtemp(prefix="rest-", dir=control_base))
    proxy: EgressProxy | None = None
    try:
        folder.chmod(0o755)
        wrapped, mounts, proxy = rest_prepare(spec, folder, allow_private=allow_private)
        yield RestJob(wrapped, limits, tuple(mounts), proxy)
    finally:
        if proxy is not None:
            proxy.close()
        shutil.rmtree(folder, ignore_errors=True)
