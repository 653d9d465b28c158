"""A server stopped with work in flight (`python -m webapp.server.serve`, embedded mode, real bwrap
sandboxes, SIGTERM as Docker sends it): what ends within the grace period is answered, the rest
ends with a reason (a 503 for a request, `failed` for a run), never a request cut with no
answer or "Cancel N running task(s)" in the log."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.fault.client import WebClient
from tests.local_servers import free_port, wait_until
from tests.quota_mounts import remove_var_dir
from tests.webapp.live_server import healthy, server_env
from webapp.server.draining import AnswersWhenStopped
from webapp.stopping import SERVER_STOPPED

REPO = Path(__file__).resolve().parents[2]
GRACE_S = 4.0
USERNAME, PASSWORD = "stopping-owner", secrets.token_urlsafe(12)
SETUP_SCRIPT = f"""
from django.contrib.auth import get_user_model
from django.core.management import call_command
from webapp.agents.tokens import token_create
call_command("migrate", "--noinput", verbosity=0)
user = get_user_model().objects.create_user({USERNAME!r}, password={PASSWORD!r})
print(token_create(owner=user).secret)
"""
# Launches the server as `python -m webapp.server.serve` does, with uvicorn's own shutdown (and the
# same grace period) back in place of the draining one: the sabotage.
UVICORN_SHUTDOWN = (
    "import sys, uvicorn; from webapp.server import serve\n"
    "def server(config):\n"
    f"    config.timeout_graceful_shutdown = {GRACE_S}\n"
    "    return uvicorn.Server(config)\n"
    "serve.DrainingServer = server\n"
    "serve.main(sys.argv[1:])\n"
)
SHORT = "import time\ntime.sleep(1)\nprint('short done')\n"
LONG = "import time\ntime.sleep(9)\nprint('long done')\n"  # past the grace period


@dataclass(frozen=True)
class Template:
    var_dir: Path
    token: str


@dataclass
class Stopped:
    short_exec: int | str
    long_exec: int | str
    long_exec_body: str
    long_cell: int | str  # a session cell: its sandbox is the session's, not ended by the server
    long_cell_body: str
    runs: dict[str, tuple[str, str]]  # name -> (status, error)
    log: str
    exit_code: int
    groups_left: list[str]  # the server's sandbox cgroups still there after it exited


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    var_dir = tmp_path_factory.mktemp("stop-template")
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", SETUP_SCRIPT],
        env=server_env(var_dir),
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    return Template(var_dir=var_dir, token=done.stdout.strip().splitlines()[-1])


@contextmanager
def server(template: Template, tmp_path: Path, launcher: list[str]) -> Iterator[tuple]:
    var_dir = Path(tempfile.mkdtemp(prefix="undoable-stop-")) / "var"
    os.chmod(var_dir.parent, 0o711)  # the sandboxes' uid traverses it
    shutil.copytree(template.var_dir, var_dir)
    port = free_port()
    log_path = tmp_path / "server.log"
    env = {**server_env(var_dir), "UNDOABLE_SHUTDOWN_GRACE_S": str(GRACE_S)}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [*launcher, "-b", "127.0.0.1", "-p", str(port)],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until(lambda: healthy(url), timeout_s=60, what=f"{url}/healthz")
            yield url, process, var_dir, log_path
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            remove_var_dir(var_dir.parent)


def post_exec(url: str, token: str, code: str, path: str = "/api/v1/exec") -> tuple[int | str, str]:
    """The status and body of an exec, or the name of the error that stopped it."""
    try:
        reply = httpx.post(
            url + path,
            json={"code": code, "timeout_s": 10.0},
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
    except httpx.TransportError as exc:
        return type(exc).__name__, ""
    return reply.status_code, reply.text


def stop_with_work_in_flight(template: Template, tmp_path: Path, launcher: list[str]) -> Stopped:
    """A short and a long exec in flight, a short and a long web run running and one queued
    behind them; then SIGTERM."""
    with server(template, tmp_path, launcher) as (url, process, var_dir, log_path):
        browser = WebClient(url).login(USERNAME, PASSWORD)
        query = browser.query_by_hand()
        session = httpx.post(
            url + "/api/v1/sessions", headers={"Authorization": f"Bearer {template.token}"}
        ).json()["id"]
        cell_path = f"/api/v1/sessions/{session}/exec"
        with ThreadPoolExecutor(3) as pool:
            execs: list[Future[tuple[int | str, str]]] = [
                pool.submit(post_exec, url, template.token, code) for code in (SHORT, LONG)
            ]
            cell = pool.submit(post_exec, url, template.token, LONG, cell_path)
            runs = {"long": browser.run(query, LONG)}
            wait_until(
                lambda: browser.run_status(runs["long"])["status"] == "running",
                timeout_s=30,
                what="the long web run to start",
            )
            # One long run per thread: the short one and the last one wait their turn.
            for n in range(1, 4):
                runs[f"long{n}"] = browser.run(query, LONG)
            runs["queued short"] = browser.run(query, SHORT)
            process.send_signal(signal.SIGTERM)
            exit_code = process.wait(timeout=GRACE_S + 30)
            groups_left = cgroups_named(f"undoable-{process.pid}-")
            (short, _), (long, long_body) = (future.result() for future in execs)
            long_cell, long_cell_body = cell.result()
        with sqlite3.connect(var_dir / "db.sqlite3") as db:
            recorded = {
                name: db.execute(
                    "SELECT status, error FROM queries_run WHERE id = ?", (run_id,)
                ).fetchone()
                for name, run_id in runs.items()
            }
        return Stopped(
            short,
            long,
            long_body,
            long_cell,
            long_cell_body,
            recorded,
            log_path.read_text(),
            exit_code,
            groups_left,
        )


def cgroups_named(prefix: str) -> list[str]:
    """The cgroups (v1 controllers and v2) whose name starts with `prefix`."""
    found = []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        found += [os.path.join(root, name) for name in dirs if name.startswith(prefix)]
        dirs[:] = [name for name in dirs if not name.startswith(prefix)]
    return found


MODULE = [sys.executable, "-m", "webapp.server.serve"]


def test_a_stopped_server_answers_or_503s_its_requests_and_fails_its_runs_with_the_reason(
    template, tmp_path
):
    stopped = stop_with_work_in_flight(template, tmp_path, MODULE)

    # uvicorn re-raises the SIGTERM it handled once it has stopped, as the exit status.
    assert stopped.exit_code in (0, -signal.SIGTERM), stopped.log[-3000:]
    assert stopped.short_exec == 200  # finished within the grace period
    assert (stopped.long_exec, SERVER_STOPPED in stopped.long_exec_body) == (503, True)
    assert (stopped.long_cell, SERVER_STOPPED in stopped.long_cell_body) == (503, True)
    assert set(stopped.runs.values()) == {("failed", SERVER_STOPPED)}
    assert "Cancel" not in stopped.log
    assert "Exception in ASGI application" not in stopped.log
    assert "Traceback" not in stopped.log
    assert stopped.groups_left == []  # the backend closed with the server


@pytest.mark.sabotage
def test_sabotage_with_uvicorns_shutdown_requests_are_cut_and_runs_left_behind(template, tmp_path):
    stopped = stop_with_work_in_flight(template, tmp_path, [sys.executable, "-c", UVICORN_SHUTDOWN])

    assert "running task(s), timeout graceful shutdown exceeded" in stopped.log
    # Cut: a connection closed with no answer, or uvicorn's 500 for a cancelled task (which one
    # depends on when the cancel lands), never the 503 that says why.
    for status in (stopped.long_exec, stopped.long_cell):
        assert status in ("RemoteProtocolError", 500), status
    assert SERVER_STOPPED not in stopped.long_exec_body + stopped.long_cell_body
    assert set(stopped.runs.values()) != {("failed", SERVER_STOPPED)}
    assert stopped.groups_left != []  # left for the next start's sweep


async def a_request_cancelled(*, cutting: bool) -> tuple[list[dict], BaseException | None]:
    """A request whose app never answers, cancelled while the middleware is `cutting` or not:
    what the client was sent, and what the task ended with."""
    sent: list[dict] = []

    async def never_answers(scope, receive, send) -> None:
        await asyncio.Event().wait()

    async def send(message) -> None:
        sent.append(dict(message))

    app = AnswersWhenStopped(never_answers)
    app.cutting = cutting
    task = asyncio.ensure_future(app({"type": "http", "path": "/x"}, None, send))
    await asyncio.sleep(0)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError as exc:
        return sent, exc
    return sent, None


def test_a_request_cut_by_the_stopping_server_answers_503_with_the_reason():
    sent, ended_with = asyncio.run(a_request_cancelled(cutting=True))

    assert ended_with is None
    assert [m.get("status") for m in sent] == [503, None]
    assert json.loads(sent[1]["body"]) == {"error": SERVER_STOPPED}


def test_a_request_cancelled_otherwise_is_cancelled_as_before():
    """A client that went away (Django cancels its view) gets no 503 written to it."""
    sent, ended_with = asyncio.run(a_request_cancelled(cutting=False))

    assert (sent, type(ended_with)) == ([], asyncio.CancelledError)
