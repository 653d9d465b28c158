"""The `rest` kind's network: an allowlisting HTTP(S) proxy that lives outside the sandbox.

The sandbox keeps its own empty network namespace (loopback only). Its one way out is a unix
socket, bound in at /run/undoable/egress.sock, served by `EgressProxy` (egress_proxy.py) on the
host; an in-sandbox forwarder (egress_forwarder.py) exposes it as 127.0.0.1:PROXY_PORT and the
program gets HTTP_PROXY/HTTPS_PROXY pointing there. The proxy answers CONNECT (https) and
absolute-form requests (http), and only for a destination in the run's `allowed_hosts`:

    "api.example.com"        ports 80 and 443 of that name
    "127.0.0.1:8080"         that port only

It resolves the name itself and connects to the checked address; loopback, private,
link-local and other internal addresses are refused unless the server sets allow_private. A
plain-http request goes on as one request of the proxy's own, its Host the checked authority
(egress_http.py); a CONNECT tunnel is the program's (its TLS server name and inner Host too).
Anything else (raw sockets, UDP, DNS) has no route at all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path

from executor.kinds import run_socket
from executor.kinds.egress_proxy import DEFAULT_PORTS, EgressProxy, allowed, parse_target
from executor.kinds.job import Job
from executor.limits import Limits
from executor.policy.mounts import CONTROL_DIR, Mount
from executor.result import RunResult
from executor.spec import RunSpec

__all__ = [
    "DEFAULT_PORTS",
    "PROXY_PORT",
    "EgressProxy",
    "RestJob",
    "allowed",
    "parse_target",
    "prepared",
    "rest_prepare",
    "with_forward_output",
]

PROXY_PORT = 3128
_FORWARDER = Path(__file__).with_name("egress_forwarder.py")
_RELAY = Path(__file__).with_name("relay.py")


def rest_prepare(
    spec: RunSpec, folder: Path, *, allow_private: bool, uid: int | None
) -> tuple[RunSpec, list[Mount], EgressProxy]:
    """Wrap `spec` so its program runs behind the forwarder, with the proxy serving `folder`.

    The program itself is unchanged; it is started by a small bash wrapper once the
    forwarder's port is open. `folder` is bind-mounted read-only at /run/undoable.
    """
    proxy = EgressProxy(folder, spec.allowed_hosts, allow_private=allow_private, uid=uid)
    (folder / "forwarder.py").write_text(_FORWARDER.read_text())
    (folder / "relay.py").write_text(_RELAY.read_text())  # the forwarder's one import
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

    @property
    def proxy(self) -> EgressProxy:
        return self._proxy

    def finish(self, result: RunResult | None) -> list[str]:
        """Close the proxy; the destinations it refused ("host:port why"), for the report."""
        self._proxy.close()
        return list(self._proxy.refused)


@contextlib.contextmanager
def prepared(
    spec: RunSpec,
    *,
    limits: Limits,
    control_base: Path,
    uid: int | None,
    allow_private: bool = False,
) -> Iterator[RestJob]:
    """A rest-kind run: the program behind the forwarder, the proxy serving a fresh folder.

    `uid` is the sandbox's host uid (sandbox_host_uid(backend); None: this process's): only
    that run's sandbox can reach the folder and the proxy's socket (run_socket.py).
    """
    folder = run_socket.control_folder(control_base, prefix="rest-", uid=uid)
    proxy: EgressProxy | None = None
    try:
        wrapped, mounts, proxy = rest_prepare(spec, folder, allow_private=allow_private, uid=uid)
        yield RestJob(wrapped, limits, tuple(mounts), proxy)
    finally:
        if proxy is not None:
            proxy.close()
        shutil.rmtree(folder, ignore_errors=True)
