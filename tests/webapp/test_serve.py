"""The web server as the product starts it (`python -m webapp.serve`, embedded mode, real bwrap
sandboxes) under 1,100 idle TCP connections nobody logged in for: started with the usual soft
open-files limit of 1,024, it raises its own, keeps answering the API, closes the connections
that send no request head, and refuses connections past its cap at once."""

from __future__ import annotations

import os
import resource
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.local_servers import free_port, wait_until
from tests.quota_mounts import remove_var_dir
from tests.webapp.fresh_interpreter import probe_state
from webapp.rlimits import open_files_limit_raise

REPO = Path(__file__).resolve().parents[2]
IDLE = 1_100
HEAD_TIMEOUT_S = 10.0
# webapp.serve.HEAD_DEADLINE_SPREAD: no head deadline falls before half its time (not imported
# here: importing webapp.serve installs Twisted's reactor in this process).
EARLIEST_CLOSE_S = HEAD_TIMEOUT_S / 2
SETUP_SCRIPT = """
from django.contrib.auth import get_user_model
from django.core.management import call_command
from webapp.agents.tokens import token_create
call_command("migrate", "--noinput", verbosity=0)
user = get_user_model().objects.create_user("idle-owner", password="not-used-here-77")
print(token_create(owner=user).secret)
"""


@dataclass(frozen=True)
class Template:
    var_dir: Path
    token: str


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    """A migrated var dir with a user and an API token; each server starts on a copy of it."""
    var_dir = tmp_path_factory.mktemp("serve-template")
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", SETUP_SCRIPT],
        env=server_env(var_dir),
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    return Template(var_dir=var_dir, token=done.stdout.strip().splitlines()[-1])


def server_env(var_dir: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "UNDOABLE_VAR_DIR": str(var_dir),
        "EXECUTOR_ROOTFS": str(REPO / "var" / "sandbox-rootfs"),
        "EXECUTOR_WARM_POOL_SIZE": "1",
        "UNDOABLE_RUNNER": "threads",
    }
    for name in ("REDIS_URL", "DATABASE_URL"):
        env.pop(name, None)
    return env


@contextmanager
def serving(
    template: Template, tmp_path: Path, *options: str, open_files: tuple[int, int]
) -> Iterator[str]:
    """`python -m webapp.serve` on a free port, started with the open-files limit `open_files`
    (soft, hard) as a host would give it; yields its URL."""
    # The session sandboxes' uid must traverse every parent of the var dir.
    var_dir = Path(tempfile.mkdtemp(prefix="undoable-serve-")) / "var"
    os.chmod(var_dir.parent, 0o711)
    shutil.copytree(template.var_dir, var_dir)
    port = free_port()
    log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        [sys.executable, "-m", "webapp.serve", "-b", "127.0.0.1", "-p", str(port), *options],
        env=server_env(var_dir),
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, open_files),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: healthy(url), timeout_s=60, what=f"{url}/healthz")
        yield url
    finally:
        process.kill()
        process.wait()
        log.close()
        remove_var_dir(var_dir.parent)


def healthy(url: str) -> bool:
    # The server closes the connection after answering, so it no longer counts against the cap.
    response = httpx.get(f"{url}/healthz", headers={"Connection": "close"}, timeout=2)
    return response.status_code == 200


def open_idle(url: str, count: int) -> list[socket.socket]:
    """`count` connections that never send a byte."""
    port = int(url.rsplit(":", 1)[1])
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        sockets.append(sock)
    return sockets


def closed_by_server(sockets: list[socket.socket], *, want: int, timeout_s: float) -> set[int]:
    """Indexes of the sockets the server closed, once `want` of them are or after `timeout_s`."""
    poller = select.poll()
    index = {sock.fileno(): i for i, sock in enumerate(sockets)}
    for fd in index:
        poller.register(fd, select.POLLIN)
    closed: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while True:
        for fd, _ in poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
            poller.unregister(fd)
            closed.add(index[fd])
        if len(closed) >= want or time.monotonic() >= deadline:
            return closed


def api(url: str, token: str, path: str, body: dict[str, object], timeout_s: float) -> int | str:
    """The status of a POST to the API, or the name of the error that stopped it (a timeout, a
    connection closed with no answer)."""
    headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
    try:
        return httpx.post(url + path, json=body, headers=headers, timeout=timeout_s).status_code
    except httpx.TransportError as exc:
        return type(exc).__name__


@pytest.fixture
def many_files() -> None:
    open_files_limit_raise()  # this process's end of every idle connection is a descriptor too


def test_exec_and_sessions_answer_past_1100_idle_connections_that_the_head_timeout_closes(
    template, tmp_path, many_files
):
    options = ("--head-timeout-s", str(HEAD_TIMEOUT_S))
    with serving(template, tmp_path, *options, open_files=(1024, 4096)) as url:
        opened = time.monotonic()
        idle = open_idle(url, IDLE)
        exec_status = api(url, template.token, "/api/v1/exec", {"code": "print(6*7)"}, 30)
        session_status = api(url, template.token, "/api/v1/sessions", {}, 30)
        answered_s = time.monotonic() - opened
        still_open = IDLE - len(closed_by_server(idle, want=IDLE, timeout_s=0))
        closed = closed_by_server(idle, want=IDLE, timeout_s=HEAD_TIMEOUT_S + 10)
        closed_s = time.monotonic() - opened
    assert (exec_status, session_status, still_open) == (200, 201, IDLE), answered_s
    assert (len(closed), closed_s >= EARLIEST_CLOSE_S) == (IDLE, True)


def test_connections_past_the_cap_are_closed_at_once_and_a_freed_slot_serves_again(
    template, tmp_path
):
    options = ("--max-connections", "20", "--head-timeout-s", "60")
    with serving(template, tmp_path, *options, open_files=(1024, 4096)) as url:
        idle = open_idle(url, 25)
        refused = closed_by_server(idle, want=5, timeout_s=5)
        still_open = 25 - len(closed_by_server(idle, want=25, timeout_s=0))
        for sock in idle:
            sock.close()
        wait_until(lambda: healthy(url), timeout_s=10, what="a freed slot")
    assert (refused, still_open) == (set(range(20, 25)), 20)


@pytest.mark.sabotage
def test_sabotage_with_no_limits_and_1024_files_idle_connections_starve_exec(
    template, tmp_path, many_files
):
    options = ("--head-timeout-s", "0", "--idle-timeout-s", "0", "--max-connections", "0")
    with serving(template, tmp_path, *options, open_files=(1024, 1024)) as url:
        idle = open_idle(url, IDLE)
        exec_status = api(url, template.token, "/api/v1/exec", {"code": "print(6*7)"}, 5)
        for sock in idle:
            sock.close()
    # How it fails depends on where the server runs out of descriptors (a 500, a reset, a
    # hang); that it is not served is the breach.
    assert exec_status not in {200, 201}, exec_status


FORM_POST_PROBE = """
import json
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web import http
from webapp.serve import HeadDeadlineChannel

channel = HeadDeadlineChannel(None, None)
channel.callLater = Clock().callLater  # Twisted's request timeout, never run here
channel.requestFactory = http.Request  # what daphne does with its WebRequest
channel.makeConnection(StringTransport())
channel.dataReceived(
    b"POST /x HTTP/1.1\\r\\nHost: a\\r\\nContent-Type: application/x-www-form-urlencoded\\r\\n"
    b"Content-Length: 3\\r\\n\\r\\na=1"
)
request = channel.requests[0]
args = {k.decode(): [v.decode() for v in vs] for k, vs in request.args.items()}
print(json.dumps([request.method.decode(), request.content.read().decode(), args]))
"""


def test_twisted_leaves_a_form_body_to_django(tmp_path):
    """Django parses request bodies; Twisted's own parse (into request.args) is switched off on
    the requests daphne has the channel make. In a process of its own: importing webapp.serve
    installs Twisted's asyncio reactor."""
    assert probe_state(FORM_POST_PROBE, tmp_path) == ["POST", "a=1", {}]


HEAD_DEADLINES_PROBE = """
import json
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
import webapp.serve
from webapp.serve import HeadDeadlineChannel

webapp.serve.HEAD_DEADLINE_SPREAD = {spread}
clock = Clock()
transports = []
for _ in range(200):  # opened in one turn, as a client's pool or an idle-socket flood does
    channel = HeadDeadlineChannel(10.0, 20.0)
    channel.callLater = clock.callLater
    transport = StringTransport()
    channel.makeConnection(transport)
    transports.append(transport)
closed_at = dict()
for tenth in range(1, 111):  # past 10 s, which float sums of 0.1 reach a little late
    clock.advance(0.1)
    for n, transport in enumerate(transports):
        if transport.disconnecting and n not in closed_at:
            closed_at[n] = tenth / 10
print(json.dumps(sorted(closed_at.values())))
"""


def closing_times(spread: str, tmp_path: Path) -> list[float]:
    """When each of the probe's connections was closed, with HEAD_DEADLINE_SPREAD `spread` (as
    Python source)."""
    return probe_state(HEAD_DEADLINES_PROBE.format(spread=spread), tmp_path)


def test_connections_opened_together_are_closed_over_seconds_not_in_one_turn(tmp_path):
    """200 connections opened at once, none sending a head: each is closed by its deadline
    (10 s), none before half of it, and no tenth of a second closes more than a tenth of them,
    so the loop's other requests never wait for all the closes at once."""
    closed = closing_times("webapp.serve.HEAD_DEADLINE_SPREAD", tmp_path)
    assert len(closed) == 200 and min(closed) >= 5.0 and max(closed) <= 10.1
    assert max(closed.count(t) for t in set(closed)) <= 20


def test_sabotage_with_no_spread_every_connection_is_closed_in_the_same_turn(tmp_path):
    closed = closing_times("0.0", tmp_path)
    assert max(closed.count(t) for t in set(closed)) > 20


SWITCH_INTERVAL_PROBE = """
import json, sys
import webapp.serve
webapp.serve.ServeCommand.run = lambda self, argv: None  # the set-up main() does, not the serving
webapp.serve.main([])
print(json.dumps(sys.getswitchinterval()))
"""


def test_the_server_hands_the_gil_to_waiting_threads_within_a_millisecond(tmp_path):
    """The server's requests hop between its event loop and worker threads; a hop waits for the
    GIL at most the switch interval, which the server lowers from Python's 5 ms."""
    assert probe_state(SWITCH_INTERVAL_PROBE, tmp_path) == pytest.approx(0.001)
