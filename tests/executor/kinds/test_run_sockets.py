"""The db broker's and the egress proxy's sockets admit their own run's sandbox and no one else.

A run holds its socket open (a db run with an uncommitted row, a rest run that already reached
its host); meanwhile someone else tries the socket: `nobody` on the host, the sandbox's own uid
on the host outside any sandbox, and another real sandbox handed a hard link to the socket.
Every run here is a real bwrap sandbox; the attackers are real processes.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from executor.cancel import CancelToken
from executor.kinds import db, egress, run_socket
from executor.kinds.fs import FsWorkspace
from executor.kinds.sandbox import sandbox_host_uid
from executor.policy.mounts import CONTROL_DIR, Mount
from executor.result import OutputChunk
from executor.spec import RunSpec
from tests.executor.kinds.db_runs import in_db_process
from tests.fakes.header_echo_server import HeaderEchoServer

NOBODY = 65534
KINDS = pytest.mark.parametrize("kind", ["db", "rest"])
# Attacking as another uid from the host means switching to it.
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")

DB_HOLDER = """
db.execute("CREATE TABLE held (v TEXT)")
db.execute("INSERT INTO held VALUES ('held secret')")
print("READY", flush=True)
import time
time.sleep(60)
"""
REST_HOLDER = """
import os, time, urllib.request
print(urllib.request.urlopen(os.environ["UPSTREAM"] + "/own", timeout=10).status)
print("READY", flush=True)
time.sleep(60)
"""
# The attacker (stdlib only): a request on the socket at argv[1] (or $SOCK), then what it got
# ("got closed": the other end hung up).
ATTACK = r"""
import json, os, socket, struct, sys
path = sys.argv[1] if len(sys.argv) > 1 else os.environ["SOCK"]
upstream = os.environ["UPSTREAM"]
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(10)
try:
    sock.connect(path)
except OSError as exc:
    print("refused", type(exc).__name__)
    sys.exit()
try:
    if path.endswith("db.sock"):
        for sql in ("SELECT v FROM held", "INSERT INTO held VALUES ('stranger')"):
            body = json.dumps({"op": "execute", "sql": sql}).encode()
            sock.sendall(struct.pack(">I", len(body)) + body)
    else:
        sock.sendall(f"GET {upstream}/attack HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    got = sock.recv(4096)
except (ConnectionResetError, BrokenPipeError):
    got = b""
print("got", got.decode("latin-1") if got else "closed")
"""


@pytest.fixture
def upstream() -> Iterator[HeaderEchoServer]:
    with HeaderEchoServer() as server:
        yield server


@dataclass
class HeldRun:
    socket: Path  # on the host
    uid: int  # the sandbox's host uid


@contextlib.contextmanager
def held_run(backend, limits, place: Path, kind: str, upstream: HeaderEchoServer):
    """A run of `kind` that connected and waits; yields once it said READY, then cancels it."""
    uid = sandbox_host_uid(backend)
    if kind == "db":
        files = place / "files"
        files.mkdir()
        target = db.SqliteTarget(workspace=FsWorkspace(files, place / "state"), path="app.db")
        prepared = db.prepared(
            RunSpec(code=DB_HOLDER),
            limits=limits,
            target=target,
            control_base=place,
            run_id="held",
            owner_uid=uid,
        )
        name = "db.sock"
    else:
        spec = RunSpec(
            code=REST_HOLDER,
            allowed_hosts=(upstream.authority,),
            env={"UPSTREAM": upstream.base_url},
        )
        prepared = egress.prepared(
            spec, limits=limits, control_base=place, uid=uid, allow_private=True
        )
        name = "egress.sock"
    ready, cancel, box = threading.Event(), CancelToken(), {}

    def on_output(chunk: OutputChunk) -> None:
        if "READY" in chunk.text:
            ready.set()

    with prepared as job:

        def run() -> None:
            box["result"] = backend.run(
                job.spec, limits=job.limits, mounts=job.mounts, on_output=on_output, cancel=cancel
            )
            ready.set()

        thread = threading.Thread(target=run)
        thread.start()
        try:
            assert ready.wait(20) and "result" not in box, box
            yield HeldRun(job.mounts[0].host / name, run_socket.sandbox_uid(uid))
        finally:
            cancel.cancel()
            thread.join()
            job.finish(box["result"])
    if kind == "rest":
        assert len(upstream.seen("/own")) == 1  # the run's own program got through


def attack_from_host(held: HeldRun, upstream: HeaderEchoServer, *, uid: int) -> str:
    done = subprocess.run(
        ["/usr/bin/python3", "-I", "-c", ATTACK, str(held.socket)],
        user=uid,
        group=uid,
        extra_groups=[],
        cwd="/",
        env={"UPSTREAM": upstream.base_url},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.strip()


def attack_from_another_sandbox(backend, limits, place, held: HeldRun, upstream) -> str:
    """Another run, in its own sandbox, whose control folder holds a hard link to the socket."""
    other = run_socket.control_folder(place, prefix="other-", uid=held.uid)
    os.link(held.socket, other / held.socket.name)
    spec = RunSpec(
        code=ATTACK,
        env={"SOCK": f"{CONTROL_DIR}/{held.socket.name}", "UPSTREAM": upstream.base_url},
    )
    result = backend.run(spec, limits=limits, mounts=(Mount(other, CONTROL_DIR),))
    assert result.ok, result.stderr
    return result.stdout.strip()


def stole(kind: str, answer: str, upstream: HeaderEchoServer) -> bool:
    """Whether the attacker got what the socket serves: the held row, or its run's host."""
    if kind == "db":
        return "held secret" in answer
    return answer.startswith("got HTTP/1.1 200") and len(upstream.seen("/attack")) == 1


# The db broker listens in the run's db process (executor/kinds/db_process.py): a sabotage
# switches the guard off there as well as here (the folder, and the egress proxy, are here).
def open_the_folder(monkeypatch) -> None:
    monkeypatch.setattr(run_socket, "FOLDER_MODE", 0o755)
    monkeypatch.setattr(run_socket, "SOCKET_MODE", 0o666)
    in_db_process(
        monkeypatch,
        "from executor.kinds import run_socket\n"
        "run_socket.FOLDER_MODE = 0o755\nrun_socket.SOCKET_MODE = 0o666\n",
    )


def no_peer_check(monkeypatch) -> None:
    monkeypatch.setattr(run_socket, "peer_refusal", lambda *args, **kwargs: None)
    in_db_process(
        monkeypatch,
        "from executor.kinds import run_socket\n"
        "run_socket.peer_refusal = lambda *args, **kwargs: None\n",
    )


@AS_ROOT
@KINDS
def test_nobody_cannot_reach_a_running_runs_socket(backend, limits, place, upstream, kind):
    with held_run(backend, limits, place, kind, upstream) as held:
        assert held.socket.parent.stat().st_mode & 0o777 == 0o700
        answer = attack_from_host(held, upstream, uid=NOBODY)
    assert answer == "refused PermissionError"
    assert upstream.seen("/attack") == []


@pytest.mark.sabotage
@AS_ROOT
@KINDS
def test_sabotage_with_the_old_modes_and_no_peer_check_nobody_gets_in(
    backend, limits, place, upstream, kind, monkeypatch
):
    open_the_folder(monkeypatch)
    no_peer_check(monkeypatch)
    with held_run(backend, limits, place, kind, upstream) as held:
        answer = attack_from_host(held, upstream, uid=NOBODY)
    assert stole(kind, answer, upstream), answer


@AS_ROOT
@pytest.mark.sabotage
@KINDS
def test_sabotage_with_the_old_modes_nobody_reaches_the_socket(
    backend, limits, place, upstream, kind, monkeypatch
):
    open_the_folder(monkeypatch)
    with held_run(backend, limits, place, kind, upstream) as held:
        answer = attack_from_host(held, upstream, uid=NOBODY)
    assert answer == "got closed"  # connected: only the peer check still hangs up


@AS_ROOT
@KINDS
def test_the_sandbox_uid_outside_its_sandbox_is_hung_up_on(backend, limits, place, upstream, kind):
    with held_run(backend, limits, place, kind, upstream) as held:
        answer = attack_from_host(held, upstream, uid=held.uid)
    assert answer == "got closed"
    assert upstream.seen("/attack") == []


@pytest.mark.sabotage
@AS_ROOT
@KINDS
def test_sabotage_without_the_peer_check_the_sandbox_uid_on_the_host_gets_in(
    backend, limits, place, upstream, kind, monkeypatch
):
    no_peer_check(monkeypatch)
    with held_run(backend, limits, place, kind, upstream) as held:
        answer = attack_from_host(held, upstream, uid=held.uid)
    assert stole(kind, answer, upstream), answer


@KINDS
def test_another_sandbox_given_the_socket_is_hung_up_on(backend, limits, place, upstream, kind):
    with held_run(backend, limits, place, kind, upstream) as held:
        answer = attack_from_another_sandbox(backend, limits, place, held, upstream)
    assert answer == "got closed"
    assert upstream.seen("/attack") == []


@pytest.mark.sabotage
@KINDS
def test_sabotage_without_the_peer_check_another_sandbox_gets_in(
    backend, limits, place, upstream, kind, monkeypatch
):
    no_peer_check(monkeypatch)
    with held_run(backend, limits, place, kind, upstream) as held:
        answer = attack_from_another_sandbox(backend, limits, place, held, upstream)
    assert stole(kind, answer, upstream), answer
