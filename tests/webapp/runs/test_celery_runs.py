"""The production path: a real `celery -A webapp worker` process, real Redis (DB 5), the
channels_redis layer, and the websocket consumer on the real ASGI app."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from channels.db import database_sync_to_async
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from tests.factories import QueryFactory, RunFactory
from tests.local_servers import celery_worker_argv, worker_audit_key
from tests.servers import RedisServer
from tests.webapp.runs.test_run_consumer import connect, receive_until_final
from tests.webapp.runs.waiting import wait_until
from webapp.celery import app as celery_app
from webapp.redis_client import cache_settings
from webapp.reliability.workers import process_state
from webapp.runs import run_backends, services
from webapp.runs.models import Run, RunChunk, RunStatus
from webapp.runs.reaper import WORKER_LOST

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[3]
SECRET = "celery-path-canary-31337"


@pytest.fixture(scope="module")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url(5)


@pytest.fixture(scope="module")
def celery_worker(django_db_setup, django_db_blocker, redis_url: str) -> Iterator[subprocess.Popen]:
    """A real worker on the same (file-based) test database, started once for this module."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    with django_db_blocker.unblock():
        db_file = connection.settings_dict["NAME"]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "DATABASE_URL": f"sqlite:///{db_file}",
        "REDIS_URL": redis_url,
        "DJANGO_SECRET_KEY": settings.SECRET_KEY,  # the credential handoff keys derive from it
        "UNDOABLE_AUDIT_KEY": worker_audit_key(),  # it records how its runs ended
        "EXECUTOR_WARM_POOL_SIZE": "1",
        # The worker's own reaper (webapp.reliability, autodiscovered) looks twice a second.
        "UNDOABLE_REAPER_INTERVAL_S": "0.5",
    }
    process = subprocess.Popen(
        celery_worker_argv(
            "--loglevel=INFO",
            "--concurrency=2",
            "--without-heartbeat",
            "--hostname=undoable-test@%h",
        ),
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    ready = threading.Event()
    lines: list[str] = []

    def read() -> None:
        for line in process.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if "ready." in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(60):
        process.kill()
        raise RuntimeError("celery worker did not start:\n" + "".join(lines[-40:]))
    yield process
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    client.flushdb()
    client.close()


def _use_broker(url: str) -> None:
    # The app builds its connection and producer pools lazily from broker_url; drop them so
    # the next enqueue connects to `url`.
    if celery_app._pool is not None:
        celery_app._pool.force_close_all()
    celery_app._pool = None
    celery_app.amqp._producer_pool = None
    celery_app.conf.broker_url = url


@pytest.fixture(scope="module")
def redis_broker(celery_worker, redis_url: str) -> Iterator[None]:
    previous = celery_app.conf.broker_url
    _use_broker(redis_url)
    yield
    _use_broker(previous)


@pytest.fixture
def celery_mode(redis_broker, redis_url: str) -> Iterator[None]:
    """This process is the web side: enqueue to Redis, listen on the Redis channel layer."""
    layer = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": redis_url, "socket_timeout": 15}]},
        }
    }
    with override_settings(
        UNDOABLE_RUNNER="celery",
        REDIS_URL=redis_url,
        CACHES=cache_settings(redis_url),
        CHANNEL_LAYERS=layer,
    ):
        yield


pytestmark.append(pytest.mark.usefixtures("celery_mode"))


async def test_a_run_executes_on_the_worker_and_streams_exactly_once_in_order() -> None:
    query = await database_sync_to_async(QueryFactory)(
        forward_code=(
            "import time\nfor i in range(8):\n    print('line', i, flush=True)\n"
            "    time.sleep(0.05)\n"
        )
    )
    run = await database_sync_to_async(services.query_run)(query=query)
    communicator, connected = await connect(run.pk, query.owner)
    assert connected
    messages = await receive_until_final(communicator)
    chunks = [m for m in messages if m["type"] == "chunk"]
    assert [c["seq"] for c in chunks] == list(range(1, len(chunks) + 1))
    assert "".join(c["text"] for c in chunks) == "".join(f"line {i}\n" for i in range(8))
    assert messages[-1]["status"] == "succeeded"
    stored = await database_sync_to_async(Run.objects.get)(pk=run.pk)
    assert stored.worker == f"undoable-test@{socket.gethostname()}"  # the Celery node name
    await communicator.disconnect()


async def test_stop_reaches_the_worker_and_kills_the_sandbox() -> None:
    query = await database_sync_to_async(QueryFactory)(
        forward_code="import time\nprint('started', flush=True)\ntime.sleep(120)\n"
    )
    run = await database_sync_to_async(services.query_run)(query=query)
    communicator, _ = await connect(run.pk, query.owner)
    printed = ""
    while not printed.endswith("\n"):  # the line may arrive in more than one chunk
        message = await communicator.receive_json_from(timeout=30)
        printed += message["text"] if message["type"] == "chunk" else ""
    await database_sync_to_async(services.run_cancel)(run=run)
    messages = await receive_until_final(communicator)
    assert printed == "started\n"
    assert messages[-1]["status"] == "cancelled"
    await communicator.disconnect()


async def test_credentials_reach_the_worker_masked_and_leave_nothing_in_redis(
    redis_url: str,
) -> None:
    query = await database_sync_to_async(QueryFactory)(
        forward_code="import os\nprint('value:', os.environ['API_TOKEN'])\n",
        credential_names=["API_TOKEN"],
    )
    run = await database_sync_to_async(services.query_run)(
        query=query, credentials={"API_TOKEN": SECRET}
    )
    communicator, _ = await connect(run.pk, query.owner)
    messages = await receive_until_final(communicator)
    assert messages[-1]["status"] == "succeeded"
    assert "".join(m["text"] for m in messages if m["type"] == "chunk") == "value: ****\n"
    texts = await database_sync_to_async(
        lambda: list(RunChunk.objects.filter(run=run).values_list("text", flat=True))
    )()
    assert SECRET not in "".join(texts)
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter():
        if client.type(key) == b"string":
            assert SECRET.encode() not in client.get(key)
    client.close()
    await communicator.disconnect()


async def test_the_workers_reaper_fails_a_run_whose_heartbeat_went_silent() -> None:
    silent_since = timezone.now() - dt.timedelta(hours=1)
    run = await database_sync_to_async(RunFactory)(
        status=RunStatus.RUNNING,
        started_at=silent_since,
        heartbeat_at=silent_since,
        worker="killed@elsewhere",
    )
    communicator, connected = await connect(run.pk, run.query.owner)
    assert connected

    messages = await receive_until_final(communicator)

    assert (messages[-1]["status"], messages[-1]["error"]) == ("failed", WORKER_LOST)
    await communicator.disconnect()


def test_the_worker_says_it_is_alive_in_the_process_registry() -> None:
    assert process_state(f"undoable-test@{socket.gethostname()}") == "alive"
    # The session's Redis is young: one that started less than UNDOABLE_RUN_LOST_AFTER_S ago cannot
    # tell "lost" from "not beaten yet" (process_state says "unknown" then).
    with override_settings(UNDOABLE_RUN_LOST_AFTER_S=1):
        assert process_state("undoable-never-started@nowhere") == "lost"


def test_workers_ping_names_the_live_worker_and_fails_for_a_missing_one() -> None:
    name = f"undoable-test@{socket.gethostname()}"
    out = io.StringIO()
    call_command("workers_ping", "--name", name, stdout=out)
    assert out.getvalue().split() == [name]
    with pytest.raises(CommandError, match="0 of 1 worker"):
        missing = ["--name", "undoable-never-started@nowhere", "--timeout", "0.5"]
        call_command("workers_ping", *missing, stdout=io.StringIO())


def test_kind_runs_go_to_the_kinds_queue_and_python_runs_stay_on_the_default_one(
    redis_url: str,
) -> None:
    client = redis.Redis.from_url(redis_url)
    client.delete("kinds-test")
    db_query = QueryFactory(kind="db", forward_code="print('needs bwrap')")
    python_query = QueryFactory(forward_code="print('anywhere')")
    with override_settings(UNDOABLE_KINDS_QUEUE="kinds-test"):
        held = services.query_run(query=db_query)
        ran = services.query_run(query=python_query)
    # No worker here consumes kinds-test: the db run waits there, the python one is served.
    messages = [json.loads(m) for m in client.lrange("kinds-test", 0, -1)]
    assert [m["headers"]["argsrepr"] for m in messages] == [f"({held.pk},)"]
    deadline = time.monotonic() + 60
    while not Run.objects.get(pk=ran.pk).is_final and time.monotonic() < deadline:
        time.sleep(0.1)
    assert Run.objects.get(pk=ran.pk).status == RunStatus.SUCCEEDED
    assert Run.objects.get(pk=held.pk).status == RunStatus.QUEUED
    client.delete("kinds-test")
    client.close()


def final(run: Run) -> Run:
    wait_until(lambda: Run.objects.get(pk=run.pk).is_final, timeout=60, what=f"run {run.pk}")
    run.refresh_from_db()
    return run


def a_busy_owner_and_a_newcomer_on_the_workers() -> tuple[list[Run], Run]:
    """Owner A queues three times as many sleeping runs as the worker has processes (2), then
    owner B one print; all of them finish."""
    busy = QueryFactory(forward_code="import time\ntime.sleep(1.5)\n")
    sleepers = [services.query_run(query=busy) for _ in range(6)]
    newcomer = services.query_run(query=QueryFactory(forward_code="print(1)\n"))
    return [final(run) for run in sleepers], final(newcomer)


def test_on_the_workers_a_newcomers_run_goes_before_a_busy_owners_queue() -> None:
    sleepers, newcomer = a_busy_owner_and_a_newcomer_on_the_workers()

    assert [run.status for run in [*sleepers, newcomer]] == [RunStatus.SUCCEEDED] * 7
    starts = sorted(run.started_at for run in sleepers)
    # A's first two held both processes; B's run took the first one to come free.
    assert starts[1] < newcomer.started_at < starts[2]


@pytest.mark.sabotage
def test_sabotage_with_one_priority_for_all_the_newcomer_waits_for_the_busy_owners_queue(
    monkeypatch,
) -> None:
    monkeypatch.setattr(run_backends, "run_priority", lambda run_id, *, owner_id: 0)

    sleepers, newcomer = a_busy_owner_and_a_newcomer_on_the_workers()

    assert newcomer.started_at > max(run.started_at for run in sleepers)
