"""One token may use the machine: a burst waits for concurrency slots (a bounded queue) instead
of being refused, and the default caps leave room for a busy agent (16 runs, 8 sessions).

The burst tests go over real HTTP to the live test server, many requests at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
import requests
from django.test import override_settings

from webapp.admission.backends import get_limiter
from webapp.admission.ratelimit import QuotaExceeded, RateLimiter
from webapp.agents.models import ApiToken

pytestmark = pytest.mark.django_db(transaction=True)


def burst(url: str, token: str, size: int, code: str) -> list[tuple[int, str]]:
    """`size` execs of `code` (with `i` bound to 0..size-1) sent at the same instant."""
    start = threading.Barrier(size)

    def one(i: int) -> tuple[int, str]:
        start.wait(timeout=30)
        response = requests.post(
            f"{url}/api/v1/exec",
            json={"code": f"i = {i}\n{code}"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
        return response.status_code, response.text

    with ThreadPoolExecutor(max_workers=size) as pool:
        return list(pool.map(one, range(size)))


def served_in_full(results: list[tuple[int, str]]) -> bool:
    return results == [(200, f"{i * 3}\n") for i in range(len(results))]


def test_sixteen_concurrent_execs_with_one_token_are_all_served(app_server, owner):
    assert served_in_full(burst(app_server, owner.token, 16, "print(i*3)"))


@pytest.mark.usefixtures("sessions")
def test_one_user_may_hold_eight_live_sessions_by_default(owner):
    ids = []
    for _ in range(8):
        created = owner.post("/api/v1/sessions", {})
        assert created.status_code == 201, created.content
        ids.append(created.json()["id"])
    for n, session_id in enumerate(ids):
        ran = owner.post(f"/api/v1/sessions/{session_id}/exec", {"code": f"{n} * 3"})
        assert ran.json()["stdout"] == f"{n * 3}\n"


# Each run lasts long enough that the 16 overlap: 4 run, 12 wait their turn.
SLOW = "import time; time.sleep(0.3); print(i*3)"


@override_settings(AGENTS_MAX_CONCURRENT_PER_TOKEN=4, AGENTS_MAX_WAITING_PER_TOKEN=12)
def test_a_burst_over_the_concurrency_cap_waits_for_slots_and_is_all_served(app_server, owner):
    assert served_in_full(burst(app_server, owner.token, 16, SLOW))


@override_settings(AGENTS_MAX_CONCURRENT_PER_TOKEN=4, AGENTS_MAX_WAITING_PER_TOKEN=12)
def test_with_redis_a_burst_waits_for_the_shared_slots(app_server, owner, redis_server):
    shared_url = redis_server.url(8)
    shared = redis.Redis.from_url(shared_url)
    shared.flushdb()
    try:
        with override_settings(REDIS_URL=shared_url, UNDOABLE_ADMISSION="redis"):
            assert served_in_full(burst(app_server, owner.token, 16, SLOW))
    finally:
        shared.flushdb()
        shared.close()


@pytest.mark.sabotage
@override_settings(
    AGENTS_MAX_CONCURRENT_PER_TOKEN=4, AGENTS_MAX_WAITING_PER_TOKEN=12, AGENTS_SLOT_WAIT_S=0
)
def test_sabotage_without_the_wait_the_burst_gets_429s(app_server, owner):
    statuses = [status for status, _ in burst(app_server, owner.token, 16, SLOW)]
    assert 429 in statuses


@pytest.fixture
def holding(app_server, owner) -> Iterator[threading.Thread]:
    """One run of the owner's token in flight for a few seconds (the cap is set to 1)."""
    slow = {"code": "import time; time.sleep(3)", "timeout_s": 10}
    worker = threading.Thread(target=lambda: owner.post("/api/v1/exec", slow))
    worker.start()
    assert get_limiter().wait_for_active(token_key(owner), 1, timeout=30)
    yield worker
    worker.join(30)


def token_key(persona) -> object:
    return ApiToken.objects.get(owner=persona.user).pk


@override_settings(AGENTS_MAX_CONCURRENT_PER_TOKEN=1, AGENTS_SLOT_WAIT_S=0.5)
def test_a_waiter_past_its_deadline_gets_429_with_retry_after(owner, holding):
    started = time.monotonic()
    denied = owner.post("/api/v1/exec", {"code": "print(1)"})
    assert denied.status_code == 429
    assert denied["Retry-After"] == "1"
    assert denied.json() == {
        "error": "at most 1 runs at once per token; no slot came free in 0.5 s"
    }
    assert time.monotonic() - started >= 0.5


@override_settings(
    AGENTS_MAX_CONCURRENT_PER_TOKEN=1, AGENTS_MAX_WAITING_PER_TOKEN=1, AGENTS_SLOT_WAIT_S=30
)
def test_past_the_queue_bound_a_request_is_refused_at_once(owner, stranger, holding):
    key = token_key(owner)
    waited: list[int] = []
    waiter = threading.Thread(
        target=lambda: waited.append(owner.post("/api/v1/exec", {"code": "print(2)"}).status_code)
    )
    waiter.start()
    assert get_limiter().wait_for_waiting(key, 1, timeout=30)
    started = time.monotonic()
    denied = owner.post("/api/v1/exec", {"code": "print(3)"})
    assert time.monotonic() - started < 2
    assert denied.status_code == 429
    assert denied.json() == {"error": "at most 1 runs at once per token and 1 waiting for a slot"}
    # Another token neither waits nor is refused.
    assert stranger.post("/api/v1/exec", {"code": "print(4)"}).status_code == 200
    waiter.join(30)
    assert waited == [200]


def test_the_in_process_limiter_hands_a_freed_slot_to_a_waiter():
    limiter = RateLimiter()
    outcome: list[str] = []

    def waiter() -> None:
        with limiter.slot("t", limit=1, wait_s=30, queue=1):
            outcome.append("ran")

    with limiter.slot("t", limit=1):
        thread = threading.Thread(target=waiter)
        thread.start()
        assert limiter.wait_for_waiting("t", 1, timeout=30)
        with pytest.raises(QuotaExceeded) as denied, limiter.slot("t", limit=1, wait_s=30, queue=1):
            pass
        assert denied.value.retry_after_s == 1
    thread.join(30)
    assert outcome == ["ran"]
    assert (limiter.active("t"), limiter.waiting("t")) == (0, 0)


def test_the_in_process_limiter_refuses_a_waiter_at_its_deadline():
    limiter = RateLimiter()
    with (
        limiter.slot("t", limit=1),
        pytest.raises(QuotaExceeded) as denied,
        limiter.slot("t", limit=1, wait_s=0.2, queue=4),
    ):
        pass
    assert "no slot came free in 0.2 s" in str(denied.value)
    assert limiter.waiting("t") == 0
