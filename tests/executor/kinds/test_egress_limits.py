"""The egress proxy under a hostile rest run: idle connections cost no host thread, are capped
per run and closed by the head timeout, while the same proxy keeps serving real requests."""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.kinds import egress, egress_proxy, run_socket
from executor.kinds.sandbox import sandbox_host_uid
from executor.limits import Limits
from executor.result import OutputChunk
from executor.spec import RunSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fakes"))
from slack_server import FakeSlackServer  # noqa: E402

TOKEN = "xoxb-egress-limits"
IDLE = 300
# Connects IDLE times, never sends, waits (up to WAIT_S) for the proxy to close each one, then
# posts one message through the same proxy.
IDLE_THEN_POST = """
import collections, os, selectors, socket, time, requests
socks = [socket.create_connection(("127.0.0.1", 3128)) for _ in range(IDLE)]
print("opened", flush=True)
sel = selectors.DefaultSelector()
got = {}
for s in socks:
    sel.register(s, selectors.EVENT_READ)
    got[s] = b""
answers = collections.Counter()
closed = 0
deadline = time.monotonic() + WAIT_S
while closed < IDLE and (left := deadline - time.monotonic()) > 0:
    for key, _ in sel.select(left):
        data = key.fileobj.recv(4096)
        got[key.fileobj] += data
        if not data:
            sel.unregister(key.fileobj)
            closed += 1
            answers[got[key.fileobj].split(b" ")[1].decode()] += 1
print("closed", closed, answers["408"], answers["503"], flush=True)
r = requests.post(os.environ["SLACK_URL"] + "/chat.postMessage",
                  headers={"Authorization": "Bearer " + os.environ["SLACK_TOKEN"]},
                  json={"channel": "C1", "text": "still served"})
print("posted", r.json()["ok"])
"""


@pytest.fixture
def slack() -> Iterator[FakeSlackServer]:
    with FakeSlackServer(token=TOKEN) as server:
        yield server


@pytest.fixture
def many_files() -> Limits:
    """The program holds IDLE sockets, the forwarder twice that many."""
    return Limits(wall_time_s=20, cpu_time_s=20, max_open_files=1024)


def host_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def run_idle_then_post(backend, limits, place, slack, *, wait_s: float):
    """Run the program; once the proxy has accepted all IDLE connections, count host threads."""
    code = f"IDLE = {IDLE}\nWAIT_S = {wait_s}\n{IDLE_THEN_POST}"
    env = {"SLACK_URL": slack.base_url, "SLACK_TOKEN": TOKEN}
    spec = RunSpec(code=code, allowed_hosts=(f"127.0.0.1:{slack.port}",), env=env)
    during: list[tuple[int, bool]] = []
    uid = sandbox_host_uid(backend)
    with egress.prepared(
        spec, limits=limits, control_base=place, uid=uid, allow_private=True
    ) as job:

        def on_output(chunk: OutputChunk) -> None:
            accepted = job.proxy.wait_accepted(IDLE, timeout_s=15.0)
            during.append((host_threads(), accepted))

        result = backend.run(job.spec, limits=job.limits, mounts=job.mounts, on_output=on_output)
        refused = job.finish(result)
    return result, refused, during[0]


def test_idle_connections_hold_no_thread_are_capped_and_time_out(
    backend, many_files, place, slack, monkeypatch
):
    monkeypatch.setattr(egress_proxy, "HEAD_TIMEOUT_S", 0.5)
    cap = egress_proxy.MAX_CONNECTIONS
    before = host_threads()
    result, refused, (threads, accepted) = run_idle_then_post(
        backend, many_files, place, slack, wait_s=10.0
    )
    assert result.ok, result.stderr
    opened, closed, posted = result.stdout.splitlines()
    _, total, timed_out, over_cap = closed.split()
    assert (opened, total, posted) == ("opened", str(IDLE), "posted True")
    assert int(timed_out) + int(over_cap) == IDLE
    assert int(timed_out) >= cap and int(over_cap) > 0  # the first `cap` are held, then 503
    assert (accepted, threads <= before + 5) == (True, True), (before, threads)
    assert refused == [f"too many connections: {over_cap} refused, at most {cap} open at once"]
    assert slack.wait_for_message(lambda m: m["text"] == "still served", timeout_s=5)
    assert [t.name for t in threading.enumerate() if t.name == "undoable-egress"] == []


@pytest.mark.sabotage
def test_sabotage_without_the_cap_and_the_head_timeout_idle_connections_stay_open(
    backend, many_files, place, slack, monkeypatch
):
    monkeypatch.setattr(egress_proxy, "HEAD_TIMEOUT_S", 3600.0)
    monkeypatch.setattr(egress_proxy, "MAX_CONNECTIONS", 100_000)
    before = host_threads()
    result, refused, (threads, accepted) = run_idle_then_post(
        backend, many_files, place, slack, wait_s=2.0
    )
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == ["opened", "closed 0 0 0", "posted True"]
    assert refused == []
    # All IDLE open at once, and still no thread per connection.
    assert (accepted, threads <= before + 5) == (True, True), (before, threads)


def test_close_ends_the_loop_and_every_connection_it_held(place, monkeypatch):
    # The clients are this test's own sockets, not a sandbox's: past the peer check.
    monkeypatch.setattr(run_socket, "peer_refusal", lambda *args, **kwargs: None)
    proxy = egress_proxy.EgressProxy(place, (), allow_private=False, uid=None)
    clients = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(3)]
    for client in clients:
        client.connect(str(proxy.path))
    assert proxy.wait_accepted(3, timeout_s=5.0)
    proxy.close()
    assert [client.recv(100) for client in clients] == [b"", b"", b""]
    assert [t.name for t in threading.enumerate() if t.name == "undoable-egress"] == []
    assert not proxy.path.exists()
