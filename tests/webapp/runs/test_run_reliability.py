"""A run's worker side under faults, on the real bwrap sandbox (embedded runner threads):
heartbeats go on through a Redis outage, and a run the reaper already ended stays ended."""

from __future__ import annotations

import datetime as dt
import io
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator

import pytest
import redis
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from tests.factories import QueryFactory, RunFactory
from tests.webapp.runs.waiting import wait_until
from webapp.redis_client import cache_settings
from webapp.runs import runner
from webapp.runs.models import Run, RunChunk, RunStatus
from webapp.runs.reaper import WORKER_LOST, runs_reap
from webapp.runs.run_backends import runner_backend

pytestmark = pytest.mark.usefixtures("threads_runner")

SLEEPER = "import time\nprint('started', flush=True)\ntime.sleep(60)\n"


class PrivateRedis:
    """A redis-server of our own, so a test can take it down and bring it back."""

    def __init__(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                str(shutil.which("redis-server")),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=1)

        def answers() -> bool:
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                return False

        wait_until(answers, timeout=20, what="redis-server")
        client.close()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    server.start()
    yield server
    server.stop()


def started_run() -> Run:
    run = RunFactory(query=QueryFactory(forward_code=SLEEPER))
    runner.submit(run.pk)
    wait_until(lambda: RunChunk.objects.filter(run=run).exists(), timeout=30, what="output")
    return run


def finished(run: Run, timeout: float = 30.0) -> Run:
    assert runner.wait(run.pk, timeout), f"run {run.pk} did not finish"
    run.refresh_from_db()
    return run


def test_heartbeats_go_on_through_a_redis_outage_and_stop_works_after_it(
    private_redis: PrivateRedis,
) -> None:
    # Celery mode's Stop travels through Redis; the runs still execute on this process's pool.
    with override_settings(
        UNDOABLE_RUNNER="celery",
        CACHES=cache_settings(private_redis.url),
        UNDOABLE_RUN_HEARTBEAT_INTERVAL_S=0.2,
    ):
        run = started_run()
        private_redis.stop()
        outage_began = timezone.now()

        wait_until(
            lambda: (
                Run.objects.get(pk=run.pk).heartbeat_at > outage_began + dt.timedelta(seconds=1)
            ),
            timeout=20,
            what="heartbeats during the outage",
        )
        private_redis.start()
        runner_backend().cancel(run.pk)
        run = finished(run)

    assert run.status == RunStatus.CANCELLED


def test_a_run_the_reaper_ended_is_not_overwritten_and_its_sandbox_is_stopped() -> None:
    with override_settings(UNDOABLE_RUN_HEARTBEAT_INTERVAL_S=0.2):
        run = started_run()
        # As if the worker's heartbeat had been silent for an hour (a long database outage).
        later = timezone.now() + dt.timedelta(hours=1)
        assert runs_reap(now=later) == [run.pk]
        run = finished(run)

    texts = "".join(RunChunk.objects.filter(run=run).values_list("text", flat=True))
    assert (run.status, run.error, run.exit_code) == (RunStatus.FAILED, WORKER_LOST, None)
    assert texts == "started\n"  # no "Stopped." note from the worker after the fact


def test_the_reaper_fails_a_silent_run_and_leaves_a_beating_one() -> None:
    now = timezone.now()
    silent = RunFactory(
        status=RunStatus.RUNNING,
        started_at=now - dt.timedelta(minutes=5),
        heartbeat_at=now - dt.timedelta(minutes=5),
        worker="gone@host",
    )
    beating = RunFactory(
        status=RunStatus.RUNNING,
        started_at=now - dt.timedelta(minutes=5),
        heartbeat_at=now,
        worker="alive@host",
    )

    with override_settings(UNDOABLE_RUN_LOST_AFTER_S=30):
        ended = runs_reap()

    silent.refresh_from_db()
    beating.refresh_from_db()
    assert ended == [silent.pk]
    assert (silent.status, silent.error) == (RunStatus.FAILED, WORKER_LOST)
    assert silent.finished_at is not None
    assert beating.status == RunStatus.RUNNING


def test_the_worker_is_recorded_on_the_run() -> None:
    run = RunFactory(query=QueryFactory(forward_code="print('hi')\n"))
    runner.submit(run.pk)
    run = finished(run)

    assert run.status == RunStatus.SUCCEEDED
    assert run.worker == f"{socket.gethostname()}:{os.getpid()}"


def test_runs_reap_command_ends_a_lost_run() -> None:
    an_hour_ago = timezone.now() - dt.timedelta(hours=1)
    run = RunFactory(status=RunStatus.RUNNING, worker="gone@nowhere", heartbeat_at=an_hour_ago)
    out = io.StringIO()
    call_command("runs_reap", stdout=out)
    assert f"ended 1 run(s): [{run.pk}]" in out.getvalue()
    run.refresh_from_db()
    assert (run.status, run.error) == (RunStatus.FAILED, WORKER_LOST)
