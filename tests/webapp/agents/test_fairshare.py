"""The host's runs are shared fairly between users (issue 14): one user's flood, sleeping runs or
many tokens cannot hold another user's runs out, and a user alone still gets the whole host.

The admission is tested in-process and over the real Redis (two admission objects standing for
two web processes), then through POST /api/v1/exec with real sandboxes.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import redis
from django.test import Client, override_settings

from tests.fakes.clock import ManualClock
from tests.servers import RedisServer
from tests.webapp.agents.conftest import Persona
from webapp.admission import fairshare
from webapp.admission.backends import get_admission, get_limiter
from webapp.admission.fairshare import Admission, FairAdmission, refused_recently
from webapp.admission.fairshare_redis import RedisFairAdmission
from webapp.admission.ratelimit import QuotaExceeded
from webapp.agents import exec_api
from webapp.agents.tokens import token_create

Pair = tuple[Admission, Admission]


@pytest.fixture(params=["in-process", "redis"])
def pair(request: pytest.FixtureRequest) -> Iterator[Pair]:
    """Two views of one host's admission: the same object in-process, two objects on Redis."""
    if request.param == "in-process":
        local = FairAdmission()
        yield local, local
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    url = server.url(12)
    prefix = f"undoable:admit:test-{uuid.uuid4().hex}:"

    def build() -> RedisFairAdmission:
        return RedisFairAdmission(
            url, prefix=prefix, slot_ttl_s=lambda: 60.0, fallback=FairAdmission()
        )

    yield build(), build()
    client = redis.Redis.from_url(url)
    for name in client.scan_iter(match=f"{prefix}*"):
        client.delete(name)
    client.close()


class Runs:
    """Runs of users that enter the admission on threads of their own and stay in until let go."""

    def __init__(self, admission: Admission, *, capacity: int, queue: int = 8) -> None:
        self.admission = admission
        self.capacity = capacity
        self.queue = queue
        self.order: list[str] = []  # names, in the order they were admitted
        self.refused: list[str] = []
        self._go: dict[str, threading.Event] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Condition()

    def start(self, user: str, name: str, via: Admission | None = None) -> None:
        go = self._go[name] = threading.Event()
        admission = via or self.admission

        def run() -> None:
            try:
                with admission.admit(user, capacity=self.capacity, wait_s=30, queue=self.queue):
                    with self._lock:
                        self.order.append(name)
                        self._lock.notify_all()
                    go.wait(30)
            except QuotaExceeded:
                with self._lock:
                    self.refused.append(name)

        thread = threading.Thread(target=run)
        thread.start()
        self._threads.append(thread)

    def admitted(self, count: int) -> list[str]:
        """The names admitted so far, once `count` are (a thread notes its name just after)."""
        with self._lock:
            assert self._lock.wait_for(lambda: len(self.order) >= count, 30)
            return list(self.order)

    def finish(self, name: str) -> None:
        self._go[name].set()

    def settle(self, user: str, *, admitted: int, waiting: int) -> None:
        assert self.admission.wait_for(user, admitted=admitted, waiting=waiting, timeout=30)

    def join(self) -> None:
        for go in self._go.values():
            go.set()
        for thread in self._threads:
            thread.join(30)


@pytest.fixture
def runs_of(pair: Pair) -> Iterator[Callable[..., Runs]]:
    made: list[Runs] = []

    def make(**kwargs: int) -> Runs:
        made.append(Runs(pair[0], **kwargs))
        return made[-1]

    yield make
    for runs in made:
        runs.join()


def test_a_user_alone_gets_the_whole_capacity_and_then_waits_its_turn(pair: Pair, runs_of):
    runs = runs_of(capacity=3)
    for n in range(5):
        runs.start("flood", f"f{n}", via=pair[n % 2])
        runs.settle("flood", admitted=min(n + 1, 3), waiting=max(0, n - 2))
        runs.admitted(min(n + 1, 3))
    assert runs.admitted(3) == ["f0", "f1", "f2"]
    runs.finish("f0")
    runs.settle("flood", admitted=3, waiting=1)
    assert runs.admitted(4)[3] == "f3"
    runs.finish("f1")
    runs.settle("flood", admitted=3, waiting=0)
    assert runs.admitted(5) == ["f0", "f1", "f2", "f3", "f4"]


def test_a_newcomer_is_admitted_before_a_floods_queued_runs_and_the_rest_interleave(
    pair: Pair, runs_of
):
    runs = runs_of(capacity=2)
    for n in range(5):  # the flood fills the host, three more wait
        runs.start("flood", f"f{n}", via=pair[n % 2])
        runs.settle("flood", admitted=min(n + 1, 2), waiting=max(0, n - 1))
        runs.admitted(min(n + 1, 2))
    runs.start("calm", "c0", via=pair[1])  # under its share (1 of 2): in at once
    runs.settle("calm", admitted=1, waiting=0)
    for n, waiting in ((1, 1), (2, 2)):  # queued one after the other: c1 ahead of c2
        runs.start("calm", f"c{n}", via=pair[n % 2])
        runs.settle("calm", admitted=1, waiting=waiting)
    assert runs.admitted(3) == ["f0", "f1", "c0"]
    # Each freed slot goes to the waiting user with fewer runs in, round-robin among equals:
    # (run finished, flood waiting after, calm waiting after).
    steps = [("f0", 3, 2), ("f1", 2, 2), ("c0", 2, 1), ("f2", 1, 1), ("c1", 1, 0), ("f3", 0, 0)]
    for n, (name, flood_waiting, calm_waiting) in enumerate(steps):
        runs.finish(name)
        runs.settle("flood", admitted=1, waiting=flood_waiting)
        runs.settle("calm", admitted=1, waiting=calm_waiting)
        runs.admitted(3 + n)  # the run let in has noted its name before the next is let in
    assert runs.admitted(8) == ["f0", "f1", "c0", "f2", "c1", "f3", "c2", "f4"]
    assert runs.refused == []


def test_a_users_sleeping_runs_hold_only_its_share(pair: Pair, runs_of):
    runs = runs_of(capacity=4)
    for n in range(4):
        runs.start("sleeper", f"s{n}", via=pair[n % 2])
        runs.settle("sleeper", admitted=n + 1, waiting=0)
        runs.admitted(n + 1)
    for n in range(3):
        runs.start("calm", f"c{n}", via=pair[n % 2])
        runs.settle("calm", admitted=min(n + 1, 2), waiting=max(0, n - 1))
        runs.admitted(4 + min(n + 1, 2))
    # Its share of 4 between two users, past the capacity; the third waits.
    assert runs.admitted(6) == ["s0", "s1", "s2", "s3", "c0", "c1"]
    runs.finish("s0")
    runs.settle("sleeper", admitted=3, waiting=0)
    runs.settle("calm", admitted=2, waiting=1)  # 5 still in: above the capacity
    runs.finish("s1")
    runs.finish("s2")
    runs.settle("calm", admitted=3, waiting=0)
    assert runs.refused == []


def calm_between_runs_then_flood(runs: Runs) -> None:
    """A calm user's run ends; a flood then asks for 3 runs on a host of 2."""
    runs.start("calm", "c0")
    runs.settle("calm", admitted=1, waiting=0)
    runs.finish("c0")
    runs.settle("calm", admitted=0, waiting=0)
    for n in range(3):
        runs.start("flood", f"f{n}")


def test_a_user_between_two_runs_keeps_a_slot_a_flood_cannot_take(pair: Pair, runs_of, monkeypatch):
    monkeypatch.setattr(fairshare, "RECENT_S", 30.0)  # the calm user's pause, however slow
    runs = runs_of(capacity=2)
    calm_between_runs_then_flood(runs)
    runs.settle("flood", admitted=1, waiting=2)
    runs.start("calm", "c1", via=pair[1])  # its next run: the slot kept free
    runs.settle("calm", admitted=1, waiting=0)
    order = runs.admitted(3)  # the flood's runs race each other: one of them is in between
    assert (order[0], order[1][0], order[2]) == ("c0", "f", "c1")


@pytest.mark.sabotage
def test_sabotage_without_recent_users_a_flood_takes_the_whole_host_between_their_runs(
    pair: Pair, runs_of, monkeypatch
):
    monkeypatch.setattr(fairshare, "RECENT_S", 0.0)
    runs = runs_of(capacity=2)
    calm_between_runs_then_flood(runs)
    # The breach: the calm user's next run finds the flood on every slot.
    runs.settle("flood", admitted=2, waiting=1)


def flood_of_quick_runs_beside_a_calm_one(runs: Runs, pair: Pair) -> None:
    """A calm user's run is in; a flood's runs end as soon as they start, two of them, then a
    third asks, with three of the four slots free."""
    runs.start("calm", "c0", via=pair[1])
    runs.settle("calm", admitted=1, waiting=0)
    for n in range(2):
        runs.start("flood", f"f{n}", via=pair[n % 2])
        runs.admitted(2 + n)
        runs.finish(f"f{n}")
        runs.settle("flood", admitted=0, waiting=0)
    runs.start("flood", "f2")


@pytest.fixture
def slow_pace(monkeypatch) -> None:
    """A burst of two starts, then one start per ~500 s; RECENT_S off, so a user is busy only
    while a run of it is in or waiting."""
    monkeypatch.setattr(fairshare, "START_BURST", 2.0)
    monkeypatch.setattr(fairshare, "STARTS_PER_SLOT_S", 0.001)
    monkeypatch.setattr(fairshare, "RECENT_S", 0.0)


@pytest.mark.usefixtures("slow_pace")
def test_beside_a_busy_user_a_flood_of_quick_runs_starts_at_its_pace(pair: Pair, runs_of):
    runs = runs_of(capacity=4)
    flood_of_quick_runs_beside_a_calm_one(runs, pair)
    # Past its burst the flood waits though slots are free; the calm user's next run does not.
    runs.settle("flood", admitted=0, waiting=1)
    runs.start("calm", "c1", via=pair[0])
    runs.settle("calm", admitted=2, waiting=0)
    assert runs.admitted(4) == ["c0", "f0", "f1", "c1"]
    # Alone, the flood is not paced: its waiting run starts as the calm user's last one ends.
    runs.finish("c0")
    runs.finish("c1")
    runs.settle("flood", admitted=1, waiting=0)
    assert runs.admitted(5)[4] == "f2"
    assert runs.refused == []


@pytest.mark.sabotage
@pytest.mark.usefixtures("slow_pace")
def test_sabotage_without_a_pace_a_flood_starts_its_quick_runs_back_to_back(
    pair: Pair, runs_of, monkeypatch
):
    monkeypatch.setattr(fairshare, "STARTS_PER_SLOT_S", 1e9)
    runs = runs_of(capacity=4)
    flood_of_quick_runs_beside_a_calm_one(runs, pair)
    # The breach: the flood's third quick run starts at once, and the next, and the next.
    runs.settle("flood", admitted=1, waiting=0)


def test_a_paced_run_starts_when_its_pace_allows_with_no_slot_freed(
    pair: Pair, runs_of, monkeypatch
):
    monkeypatch.setattr(fairshare, "START_BURST", 2.0)
    # Two busy users on 4 slots: 2 starts/s each, the next in under half a second.
    monkeypatch.setattr(fairshare, "STARTS_PER_SLOT_S", 1.0)
    monkeypatch.setattr(fairshare, "RECENT_S", 0.0)
    runs = runs_of(capacity=4)
    flood_of_quick_runs_beside_a_calm_one(runs, pair)
    runs.settle("flood", admitted=1, waiting=0)  # the calm user's run is still in
    assert runs.admitted(4) == ["c0", "f0", "f1", "f2"]
    assert runs.refused == []


def test_past_its_queue_a_users_run_is_refused_at_once_naming_the_limit(pair: Pair, runs_of):
    runs = runs_of(capacity=1, queue=1)
    runs.start("flood", "f0")
    runs.settle("flood", admitted=1, waiting=0)
    runs.start("flood", "f1")
    runs.settle("flood", admitted=1, waiting=1)
    with (
        pytest.raises(QuotaExceeded) as denied,
        pair[1].admit("flood", capacity=1, wait_s=30, queue=1),
    ):
        pass
    assert str(denied.value) == (
        "at most 1 runs at once on this server, shared by 1 busy users, "
        "and 1 of a user's runs waiting"
    )
    assert denied.value.retry_after_s == 1


def test_a_waiter_past_its_deadline_is_refused_and_stops_counting(pair: Pair, runs_of):
    runs = runs_of(capacity=1)
    runs.start("flood", "f0")
    runs.settle("flood", admitted=1, waiting=0)
    with (
        pytest.raises(QuotaExceeded) as denied,
        pair[1].admit("flood", capacity=1, wait_s=0.2, queue=4),
    ):
        pass
    assert str(denied.value) == (
        "at most 1 runs at once on this server, shared by 1 busy users; no slot came free in 0.2 s"
    )
    runs.settle("flood", admitted=1, waiting=0)


# Through POST /api/v1/exec with real sandboxes: a flood fills the host (2 runs at once) with
# two runs that sleep until their timeout, and queues three more; then another user's run.
HOLD = {"code": "import time; time.sleep(60)", "timeout_s": 6}
HOST = {
    "AGENTS_MAX_RUNS_PER_HOST": 2,
    "AGENTS_MAX_WAITING_PER_USER": 3,
    "AGENTS_SLOT_WAIT_S": 30,
}


@pytest.fixture(params=["in-process", "redis"])
def host(request: pytest.FixtureRequest) -> Iterator[None]:
    """The host's admission as in the embedded default, or shared through Redis."""
    with ExitStack() as stack:
        stack.enter_context(override_settings(**HOST))
        if request.param == "redis":
            server: RedisServer = request.getfixturevalue("redis_server")
            url = server.url(14)
            shared = redis.Redis.from_url(url)
            shared.flushdb()
            stack.callback(shared.close)
            stack.callback(shared.flushdb)
            stack.enter_context(override_settings(REDIS_URL=url, UNDOABLE_ADMISSION="redis"))
        yield


def exec_in_thread(persona, body: dict, replies: list) -> threading.Thread:
    thread = threading.Thread(target=lambda: replies.append(persona.post("/api/v1/exec", body)))
    thread.start()
    return thread


def flood_then_calm(owner, stranger, *, flood: object) -> tuple[Any, int, list]:
    """The flood's two held runs and three queued ones (admitted as `flood`), then the
    stranger's exec; returns the stranger's reply, the flood's runs still queued when it came,
    and the flood's replies."""
    replies: list = []
    threads = [exec_in_thread(owner, HOLD, replies) for _ in range(2)]
    assert get_admission().wait_for(flood, admitted=2, waiting=0, timeout=60)
    threads += [exec_in_thread(owner, {"code": f"print({n})"}, replies) for n in range(3)]
    assert get_admission().wait_for(flood, admitted=2, waiting=3, timeout=60)
    try:
        calm = stranger.post("/api/v1/exec", {"code": "print('calm')"})
        still_queued = get_admission().waiting(flood)
    finally:
        for thread in threads:
            thread.join(60)
    return calm, still_queued, replies


@pytest.mark.usefixtures("host")
def test_another_users_exec_is_admitted_before_a_floods_queued_ones(owner, stranger):
    calm, still_queued, flood_replies = flood_then_calm(owner, stranger, flood=owner.user.pk)
    assert (calm.status_code, calm.content) == (200, b"calm\n")
    assert still_queued == 3
    assert [reply.status_code for reply in flood_replies] == [200] * 5


@pytest.mark.sabotage
@pytest.mark.usefixtures("host")
def test_sabotage_with_every_user_one_tenant_the_flood_holds_the_other_out(
    owner, stranger, monkeypatch
):
    monkeypatch.setattr(exec_api, "tenant_key", lambda token: "everyone")
    calm, still_queued, _ = flood_then_calm(owner, stranger, flood="everyone")
    # The breach: the other user's run queues behind the flood's, here past the queue's bound.
    assert calm.status_code == 429
    assert calm.json()["error"].endswith("and 3 of a user's runs waiting")
    assert still_queued == 3


@pytest.fixture
def clock(monkeypatch) -> ManualClock:
    """For the Retry-After of a refusal."""
    fake = ManualClock()
    monkeypatch.setattr(refused_recently, "clock", fake)
    return fake


def refused_then_freed(owner, clock: ManualClock) -> Any:
    """The owner's run refused (the host's one slot is its own, no waiting), then the slot
    freed; returns the answer to the owner's next exec half a Retry-After later."""
    with get_admission().admit(owner.user.pk, capacity=1, wait_s=0, queue=0):
        refused = owner.post("/api/v1/exec", {"code": "print(1)"})
    assert refused.status_code == 429
    assert refused["Retry-After"] == "1"
    clock.now += 0.5
    return owner.post("/api/v1/exec", {"code": "print(2)"})


def refused_again_then_served(owner, clock: ManualClock, again: Any, error: str) -> None:
    """`again`, asked inside a refusal's Retry-After, got the same refusal; past the Retry-After
    the owner's next exec runs."""
    assert again.status_code == 429
    assert again.json() == {"error": error}
    assert again["Retry-After"] == "1"
    clock.now += 0.6
    assert owner.post("/api/v1/exec", {"code": "print(9)"}).content == b"9\n"


@override_settings(AGENTS_MAX_RUNS_PER_HOST=1, AGENTS_MAX_WAITING_PER_USER=0)
def test_a_user_refused_admission_is_refused_again_without_the_limiters_until_its_retry_after(
    owner, clock
):
    again = refused_then_freed(owner, clock)
    refused_again_then_served(
        owner, clock, again, "at most 1 runs at once on this server, shared by 1 busy users"
    )


@pytest.mark.sabotage
@override_settings(AGENTS_MAX_RUNS_PER_HOST=1, AGENTS_MAX_WAITING_PER_USER=0)
def test_sabotage_without_the_note_of_refusals_a_flood_reaches_the_limiters_again(
    owner, clock, monkeypatch
):
    monkeypatch.setattr(refused_recently, "again", lambda token, user: None)
    again = refused_then_freed(owner, clock)
    # The breach: a request inside its Retry-After went through the limiters and ran.
    assert again.content == b"2\n"


def token_refused_then_freed(owner, clock: ManualClock, monkeypatch) -> list[Any]:
    """The owner's token refused at once by its own limit (its one slot taken, nobody may wait),
    then the slot freed; the answers to an exec half a Retry-After later with the same token and
    with another token of the same user. A flood that ignores Retry-After asks again at once."""
    monkeypatch.setattr(refused_recently, "jitter", lambda: 0.0)
    key = owner.user.api_tokens.get().pk
    with get_limiter().slot(key, limit=1):
        refused = owner.post("/api/v1/exec", {"code": "print(1)"})
    assert refused.status_code == 429
    assert refused.json() == {"error": "at most 1 runs at once per token"}
    clock.now += 0.5
    again = owner.post("/api/v1/exec", {"code": "print(2)"})
    other = Persona(owner.user, token_create(owner=owner.user, name="other").secret, Client())
    return [again, other.post("/api/v1/exec", {"code": "print(3)"})]


@override_settings(AGENTS_MAX_CONCURRENT_PER_TOKEN=1, AGENTS_MAX_WAITING_PER_TOKEN=0)
def test_a_token_refused_by_its_own_limit_is_refused_again_until_its_retry_after(
    owner, clock, monkeypatch
):
    again, other_token = token_refused_then_freed(owner, clock, monkeypatch)
    # The token's limits are its own: the same user's other token runs.
    assert other_token.content == b"3\n"
    refused_again_then_served(owner, clock, again, "at most 1 runs at once per token")


@pytest.mark.sabotage
@override_settings(AGENTS_MAX_CONCURRENT_PER_TOKEN=1, AGENTS_MAX_WAITING_PER_TOKEN=0)
def test_sabotage_noting_only_the_admissions_refusals_a_token_refused_at_once_asks_again_at_once(
    owner, clock, monkeypatch
):
    real_note = refused_recently.note

    def admissions_only(refused: QuotaExceeded, *, token: object, user: object) -> None:
        if isinstance(refused, fairshare.ShareExceeded):
            real_note(refused, token=token, user=user)

    monkeypatch.setattr(refused_recently, "note", admissions_only)
    again, _ = token_refused_then_freed(owner, clock, monkeypatch)
    # The breach: inside its Retry-After the token went through the limiters again and ran.
    assert again.content == b"2\n"
