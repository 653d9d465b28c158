"""A session lives in the web process that created it. A request that reaches another process
learns whether the holder is gone (410) or alive elsewhere (503), from the live-process registry
in real Redis."""

from __future__ import annotations

import datetime as dt
import os
import secrets
import socket
import subprocess
from collections.abc import Iterator

import pytest
import redis
from django.test import override_settings
from django.utils import timezone

from tests.servers import RedisServer
from webapp.agents.models import AgentSession
from webapp.agents.session_services import reset_session_manager, worker_name
from webapp.reliability.workers import process_beat, process_state

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("sessions")]

LOST = {"error": "session lost: the worker holding it is gone"}


@pytest.fixture(autouse=True)
def registry(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """The registry in a Redis database of its own; a process silent for 1 s counts as lost."""
    url = redis_server.url(6)
    client = redis.Redis.from_url(url)
    reset_session_manager()  # the next session starts this process's beat under these settings
    with override_settings(
        REDIS_URL=url, UNDOABLE_RUN_LOST_AFTER_S=1, UNDOABLE_RUN_HEARTBEAT_INTERVAL_S=0.2
    ):
        yield client
        reset_session_manager()
    for key in client.scan_iter("undoable:alive:*"):
        client.delete(key)
    client.close()


def dead_process() -> str:
    """The name ("host:pid") of a process of this machine that has exited."""
    child = subprocess.Popen(["true"])
    child.wait()
    return f"{socket.gethostname()}:{child.pid}"


def session_row(persona, worker: str) -> AgentSession:
    now = timezone.now()
    return AgentSession.objects.create(
        id=secrets.token_hex(16),
        owner=persona.user,
        last_used_at=now,
        expires_at=now + dt.timedelta(minutes=10),
        worker=worker,
    )


def test_a_session_whose_process_is_gone_answers_410_on_every_route(owner):
    row = session_row(owner, dead_process())
    base = f"/api/v1/sessions/{row.pk}"

    replies = [
        owner.post(f"{base}/exec", {"code": "1 + 1"}),
        owner.get(base),
        owner.get(f"{base}/files"),
        owner.put(f"{base}/files/a.txt", b"data"),
        owner.delete(base),
    ]

    assert [r.status_code for r in replies] == [410] * len(replies)
    assert [r.json() for r in replies] == [LOST] * len(replies)


def test_a_session_held_by_a_live_process_elsewhere_answers_503(owner):
    other = "other-web-host:4242"
    process_beat(other)
    row = session_row(owner, other)

    reply = owner.post(f"/api/v1/sessions/{row.pk}/exec", {"code": "1 + 1"})

    assert reply.status_code == 503
    assert "held by another web process (other-web-host:4242)" in reply.json()["error"]
    assert reply.headers["Retry-After"] == "1"


def test_a_stranger_learns_nothing_about_a_lost_session(owner, stranger):
    row = session_row(owner, dead_process())

    reply = stranger.post(f"/api/v1/sessions/{row.pk}/exec", {"code": "1"})

    assert reply.status_code == 404


@override_settings(AGENTS_MAX_SESSIONS_PER_USER=1)
def test_sessions_of_a_lost_process_do_not_count_against_the_cap(owner):
    lost = session_row(owner, dead_process())

    created = owner.post("/api/v1/sessions", {})

    assert created.status_code == 201
    lost.refresh_from_db()
    assert lost.closed_at is not None


@override_settings(AGENTS_MAX_SESSIONS_PER_USER=1)
def test_sessions_of_a_live_process_elsewhere_still_count_against_the_cap(owner):
    process_beat("other-web-host:4343")
    session_row(owner, "other-web-host:4343")

    assert owner.post("/api/v1/sessions", {}).status_code == 429


def test_a_process_holding_sessions_beats_until_it_lets_them_go(owner):
    here = worker_name()
    assert here == f"{socket.gethostname()}:{os.getpid()}"
    assert owner.post("/api/v1/sessions", {}).status_code == 201
    assert process_state(here) == "alive"

    reset_session_manager()

    assert process_state(here) == "lost"
