"""Faults against the real production topology: each kills or restarts one real process and
checks the promise that must survive it. Order matters only for speed; each test leaves the
topology whole again (it restarts what it killed)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.fault.client import WebClient, exec_code
from tests.fault.conftest import Account
from tests.fault.topology import Topology, process_tree, still_running, wait_until

pytestmark = pytest.mark.fault

# Prints, then becomes a process whose argv[0] names it on the host (the wall cap is 20 s).
MARKER = b"undoable-fault-long-run"
LONG_RUN = (
    "import os\nprint('started', flush=True)\n"
    f"os.execv('/bin/sleep', [{MARKER.decode()!r}, '15'])\n"
)
# Counts slowly so a client can drop off in the middle and come back.
COUNTING = (
    "import time\nfor i in range(8):\n    print('line', i, flush=True)\n    time.sleep(0.5)\n"
)


def _worker_of(topology: Topology, run_id: int) -> str:
    """The worker whose process tree holds the run's program right now."""

    def find() -> str | None:
        for name in topology.worker_names:
            for pid, _ in process_tree(topology.procs[name].pid):
                try:
                    argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
                except OSError:
                    continue
                if argv0 == MARKER:
                    return name
        return None

    return str(wait_until(find, timeout_s=20, what=f"the worker of run {run_id}"))


def test_a_killed_worker_run_ends_failed_worker_lost_and_its_sandbox_is_gone(
    topology: Topology, browser: WebClient
) -> None:
    query_id = browser.query_by_hand()
    run_id = browser.run(query_id, LONG_RUN)
    browser.watch(run_id, until="started", timeout_s=60)
    victim = _worker_of(topology, run_id)

    tree = topology.kill_worker(victim)
    _, status = browser.watch(run_id, timeout_s=60)

    assert status["status"] == "failed"
    assert "Worker lost" in status["error"]
    wait_until(lambda: not still_running(tree), timeout_s=40, what="the killed worker's sandboxes")
    topology.start_worker(victim)
    topology.wait_worker(victim)


def test_runs_work_again_after_redis_restarts_mid_run(
    topology: Topology, browser: WebClient, account: Account
) -> None:
    query_id = browser.query_by_hand()
    during = browser.run(query_id, COUNTING)
    browser.watch(during, until="line 1", timeout_s=60)

    topology.restart_redis()
    for name in topology.worker_names:
        topology.wait_worker(name)  # re-registered: they reconnected to the new Redis

    _, during_status = browser.watch(during, timeout_s=60)
    after = browser.run(query_id, "print('after the restart')")
    chunks, status = browser.watch(after, timeout_s=60)
    assert during_status["status"] in {"succeeded", "failed"}
    assert status["status"] == "succeeded"
    assert "after the restart" in "".join(c["text"] for c in chunks)
    assert exec_code(topology.web_url(1), account.token, "print(2 + 2)")["stdout"] == "4\n"


def test_a_browser_reconnects_to_the_other_web_process_and_replays_every_line_once(
    topology: Topology, browser: WebClient
) -> None:
    query_id = browser.query_by_hand()
    run_id = browser.run(query_id, COUNTING)
    seen, _ = browser.watch(run_id, until="line 2", timeout_s=60)

    topology.kill_web(0)
    other = browser.moved_to(topology.web_url(1))
    rest, status = other.watch(run_id, after=seen[-1]["seq"], timeout_s=60)
    topology.start_web(0)
    topology.wait_web(0)

    lines = "".join(c["text"] for c in seen + rest).splitlines()
    assert lines == [f"line {i}" for i in range(8)]
    assert [c["seq"] for c in seen + rest] == list(range(1, len(seen + rest) + 1))
    assert status["status"] == "succeeded"


def test_requests_succeed_after_postgresql_restarts(
    topology: Topology, browser: WebClient, account: Account
) -> None:
    # Token lookups keep their database connection between requests (webapp/agents/auth.py):
    # give every web process one before the restart breaks it.
    web = range(len(topology.web_ports))
    for index in web:
        assert exec_code(topology.web_url(index), account.token, "print(1)")["stdout"] == "1\n"
    topology.restart_postgres()

    for index in web:
        topology.wait_web(index)  # /healthz checks the database
    query_id = browser.query_by_hand()
    run_id = browser.run(query_id, "print('after postgres')")
    chunks, status = browser.watch(run_id, timeout_s=60)
    assert status["status"] == "succeeded"
    assert "after postgres" in "".join(c["text"] for c in chunks)
    for index in web:
        assert exec_code(topology.web_url(index), account.token, "print(6 * 7)")["stdout"] == "42\n"


def test_a_session_answers_on_every_web_process_until_its_holder_dies(
    topology: Topology, account: Account, stranger_token: str
) -> None:
    headers = {"Authorization": f"Bearer {account.token}", "Accept": "application/json"}
    created = httpx.post(topology.web_url(0) + "/api/v1/sessions", headers=headers, timeout=60)
    assert created.status_code == 201, created.text[:500]
    session = created.json()["id"]
    on_holder = f"{topology.web_url(0)}/api/v1/sessions/{session}"
    on_other = f"{topology.web_url(1)}/api/v1/sessions/{session}"

    def cell(base: str, code: str) -> httpx.Response:
        return httpx.post(base + "/exec", json={"code": code}, headers=headers, timeout=30)

    defined = cell(on_other, "x = 20")  # passed on to the holder, web0
    shared = cell(on_holder, "x + 1")
    uploaded = httpx.put(
        on_other + "/files/data.bin", content=bytes(range(256)) * 64, headers=headers, timeout=30
    )
    downloaded = httpx.get(on_holder + "/files/data.bin", headers=headers, timeout=30)
    stranger = httpx.post(
        on_other + "/exec",
        json={"code": "x"},
        timeout=30,
        headers={"Authorization": f"Bearer {stranger_token}"},
    )
    topology.kill_web(0)
    wait_until(
        lambda: cell(on_other, "x").status_code == 410,
        timeout_s=40,
        what="the session to be reported lost",
    )
    lost = cell(on_other, "x")
    topology.start_web(0)
    topology.wait_web(0)

    assert (defined.status_code, shared.status_code) == (200, 200), defined.text[:500]
    assert shared.json()["stdout"] == "21\n"
    assert uploaded.status_code == 200, uploaded.text[:500]
    assert downloaded.content == bytes(range(256)) * 64
    assert stranger.status_code == 404
    assert lost.status_code == 410
    assert lost.json() == {"error": "session lost: the worker holding it is gone"}
