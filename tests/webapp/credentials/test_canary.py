"""The canary: a credential printed by the sandboxed code appears nowhere we keep or send.

A query whose code prints a canary secret (whole, split across writes, on stderr) runs through
the production path: the real run view, the one-shot Redis handoff, a real `celery worker`
process, the real sandbox, channels_redis to a real websocket. Afterwards the canary is absent
from the database (dumpdata and the raw SQLite file), from every command sent to Redis (MONITOR)
and every key left in its database, from the logs of both processes, from the streamed and the
stored output (where it is `****`), and from a share page of the run's output.

The canary is also an OAuth access token: the Connections panel's server side trades a code for
it (and refreshes it) against a real local provider first, so the sweep covers that path too.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse

from tests.factories import QueryFactory
from tests.local_servers import celery_worker_argv, worker_audit_key
from tests.servers import RedisServer
from tests.webapp.connections.oauth_setup import generic_provider, sign_in
from webapp.asgi import application
from webapp.redis_client import cache_settings
from webapp.runs.models import RunChunk

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

CANARY = "canary-" + secrets.token_hex(16)
ORIGIN = b"http://127.0.0.1:8000"
CODE = """\
import os, sys
secret = os.environ["CANARY_TOKEN"]
print("the token is", secret, flush=True)
sys.stdout.write(secret[:9]); sys.stdout.flush()
sys.stdout.write(secret[9:] + " (split)\\n"); sys.stdout.flush()
print("on stderr:", secret, file=sys.stderr, flush=True)
print("done")
"""


class RedisMonitor:
    """Every command any client sends to the Redis server while the test runs."""

    def __init__(self, url: str) -> None:
        self._client = redis.Redis.from_url(url)
        self._monitor = self._client.monitor()
        self._monitor.__enter__()
        self.commands: list[str] = []
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        try:
            for event in self._monitor.listen():
                self.commands.append(event["command"])
        except (redis.RedisError, ValueError, AttributeError, OSError):
            return  # closed by stop()

    def stop(self) -> list[str]:
        self._monitor.connection.disconnect()
        self._thread.join(timeout=10)
        self._client.close()
        return self.commands


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url(11)


@pytest.fixture
def celery_worker(tmp_path: Path, redis_url: str) -> Iterator[Path]:
    """A real `celery worker` on the test database and a dedicated Redis database.

    Yields the worker's log file (stdout and stderr, at DEBUG).
    """
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    name = f"canary-{secrets.token_hex(4)}@localhost"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "UNDOABLE_", "DATABASE_", "REDIS_", "EXECUTOR_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="webapp.settings",
        DJANGO_SECRET_KEY=settings.SECRET_KEY,  # the handoff key is derived from it
        UNDOABLE_AUDIT_KEY=worker_audit_key(),  # it records how its runs ended
        DATABASE_URL=f"sqlite:///{settings.DATABASES['default']['NAME']}",
        REDIS_URL=redis_url,
        UNDOABLE_VAR_DIR=str(tmp_path / "var"),
        UNDOABLE_LOG_LEVEL="DEBUG",
        EXECUTOR_BACKEND=settings.EXECUTOR_BACKEND,
        EXECUTOR_ROOTFS=str(settings.EXECUTOR_ROOTFS),
        EXECUTOR_WARM_POOL_SIZE="0",
    )
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            celery_worker_argv("-n", name, "-c", "1", "-l", "DEBUG", "--without-heartbeat"),
            cwd=settings.BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_log(log_path, b" ready.", worker)
        yield log_path
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        client.flushdb()
        client.close()


def _read_in_another_process(folder: Path) -> bytes:
    """Every file in `folder`, read by `cat`, never by this process.

    SQLite's locks are POSIX record locks, which a process loses on *any* close of the file.
    Opening and closing the database files here would drop this process's locks while its
    connections stay open; the worker, closing its own, then takes itself for the last user
    and deletes the -wal and -shm files under this process's feet ("disk I/O error" in every
    later test).
    """
    files = sorted(str(p) for p in folder.iterdir() if p.is_file())
    return subprocess.run(["cat", *files], check=True, capture_output=True, timeout=30).stdout


def _wait_for_log(path: Path, marker: bytes, worker: subprocess.Popen[bytes]) -> None:
    pause = threading.Event()
    for _ in range(600):  # 60 s
        if marker in path.read_bytes():
            return
        assert worker.poll() is None, path.read_text(errors="replace")
        pause.wait(0.1)
    raise AssertionError("celery worker did not get ready:\n" + path.read_text(errors="replace"))


@pytest.fixture
def production_mode(celery_worker: Path, redis_url: str) -> Iterator[None]:
    """This process enqueues to the worker's Redis and listens on the Redis channel layer."""
    from webapp.celery import app

    host = {"address": redis_url, "socket_timeout": 15}  # as settings.py: outlive idle waits
    layers = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [host]},
        }
    }
    saved = app.conf.broker_url
    app.conf.broker_url = redis_url
    _reset_celery_connections(app)
    with override_settings(
        UNDOABLE_RUNNER="celery",
        REDIS_URL=redis_url,
        CACHES=cache_settings(redis_url),
        CELERY_BROKER_URL=redis_url,
        CHANNEL_LAYERS=layers,
    ):
        yield
    app.conf.broker_url = saved
    _reset_celery_connections(app)


def _reset_celery_connections(app: Any) -> None:
    # Connections made for another broker earlier in this process must not be reused. kombu keeps
    # its producer pools in a process-wide registry keyed by broker URL: a later production_mode
    # on the same Redis would be handed the pool closed here ("Acquire on closed pool").
    from kombu import pools

    if app._pool is not None:
        app._pool.force_close_all()
        app._pool = None
    app.amqp._producer_pool = None
    pools.reset()


@database_sync_to_async
def _session_cookie(user: Any) -> bytes:
    client = Client()
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}".encode()


async def _stream(run_id: int, user: Any) -> list[dict[str, Any]]:
    headers = [(b"origin", ORIGIN), (b"host", b"127.0.0.1:8000")]
    headers.append((b"cookie", await _session_cookie(user)))
    communicator = WebsocketCommunicator(application, f"/ws/runs/{run_id}/?after=0", headers)
    connected, _ = await communicator.connect(timeout=30)
    assert connected
    received = []
    while True:
        message = await communicator.receive_json_from(timeout=90)
        received.append(message)
        if message.get("type") == "status" and message.get("status") not in ("queued", "running"):
            break
    await communicator.disconnect()
    return received


def _redis_contents(url: str) -> list[bytes]:
    """Every key and every value (of any type) in the Redis database, Celery bodies decoded."""
    client = redis.Redis.from_url(url)
    found: list[bytes] = []
    for key in client.scan_iter():
        found.append(key)
        kind = client.type(key).decode()
        if kind == "string":
            found.append(client.get(key) or b"")
        elif kind == "list":
            found.extend(client.lrange(key, 0, -1))
        elif kind == "hash":
            for field, value in client.hgetall(key).items():
                found += [field, value]
        elif kind == "set":
            found.extend(client.smembers(key))
        elif kind == "zset":
            found.extend(client.zrange(key, 0, -1))
        elif kind == "stream":
            found.extend(json.dumps(e, default=repr).encode() for e in client.xrange(key))
    client.close()
    return found + [_decoded_body(value) for value in found]


def _decoded_body(value: bytes) -> bytes:
    # Kombu keeps a message body base64-encoded inside its JSON envelope.
    try:
        return base64.b64decode(json.loads(value)["body"])
    except (ValueError, KeyError, TypeError):
        return b""


def _start_run(user: Any, query_id: int) -> int:
    client = Client()
    client.force_login(user)
    response = client.post(
        reverse("runs:run-create", args=[query_id]),
        json.dumps({"direction": "forward", "credentials": {"CANARY_TOKEN": CANARY}}),
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    return int(response.json()["run"]["run_id"])


@pytest.fixture
def redis_monitor(redis_url: str) -> Iterator[RedisMonitor]:
    monitor = RedisMonitor(redis_url)
    yield monitor
    monitor.stop()


async def test_the_canary_appears_nowhere(
    production_mode, celery_worker, redis_monitor, caplog, capsys, redis_url
):
    caplog.set_level(logging.DEBUG)
    refresh_token = await database_sync_to_async(_connect_with_the_canary)()
    query = await database_sync_to_async(QueryFactory)(
        forward_code=CODE, credential_names=["CANARY_TOKEN"]
    )
    owner = await database_sync_to_async(lambda: query.owner)()
    run_id = await database_sync_to_async(_start_run)(owner, query.pk)
    streamed = await _stream(run_id, owner)
    commands = redis_monitor.stop()

    final = streamed[-1]
    streamed_text = "".join(m.get("text", "") for m in streamed if m.get("type") == "chunk")
    stored_text = "".join(
        await database_sync_to_async(
            lambda: list(RunChunk.objects.filter(run_id=run_id).values_list("text", flat=True))
        )()
    )
    assert final["status"] == "succeeded", (final, celery_worker.read_text(errors="replace"))
    assert streamed_text.count("****") == 3
    assert "the token is ****" in stored_text
    assert "**** (split)" in stored_text
    assert "on stderr: ****" in stored_text

    share_page = await database_sync_to_async(_share_page)(owner, query.pk)
    assert "****" in share_page

    capsys.readouterr()
    await database_sync_to_async(call_command)("dumpdata")
    dump = capsys.readouterr().out
    assert str(run_id) in dump
    raw_db = _read_in_another_process(Path(settings.DATABASES["default"]["NAME"]).parent)
    worker_log = celery_worker.read_text(errors="replace")
    assert "queries.execute_run" in worker_log
    # The handoff did go through this Redis (set by the web side, deleted by the worker).
    handoff_commands = [c.split()[0].upper() for c in commands if ":cred:" in c]
    assert "SET" in handoff_commands and "DEL" in handoff_commands, commands

    places = {
        "streamed output": streamed_text,
        "stored output": stored_text,
        "share page": share_page,
        "dumpdata": dump,
        "raw database files": raw_db.decode("latin-1"),
        "redis commands (MONITOR)": "\n".join(commands),
        "redis keys and values": b"\n".join(_redis_contents(redis_url)).decode("latin-1"),
        "web process logs": caplog.text,
        "worker logs": worker_log,
    }
    secrets_swept = (CANARY, CANARY[7:], refresh_token)
    leaks = [place for place, text in places.items() if any(s in text for s in secrets_swept)]
    assert leaks == []


def _connect_with_the_canary() -> str:
    """Sign in to a provider that issues the canary as the access token, then refresh it (the
    provider issues the canary again); returns the refresh token, swept like the canary."""
    from tests.factories import UserFactory

    client = Client()
    client.force_login(UserFactory())
    with generic_provider() as provider:
        provider.issue_access_token(CANARY)
        token = sign_in(client, ["items.read"])
        assert token["access_token"] == CANARY
        provider.issue_access_token(CANARY)
        refreshed = client.post(
            "/connections/generic/refresh",
            json.dumps({"refresh_token": token["refresh_token"], "grant": token["grant"]}),
            content_type="application/json",
        )
        assert refreshed.json()["access_token"] == CANARY
    return str(token["refresh_token"])


def _share_page(owner: Any, query_id: int) -> str:
    client = Client()
    client.force_login(owner)
    response = client.post(reverse("shares:create", args=[query_id]), {"include_output": "on"})
    return Client().get(response["Location"]).content.decode()
