"""Host-wide admission of API runs, shared fairly between users (issue 14).

Every agent run (stateless exec, session cell) on this machine holds one admission while it
runs, on top of its token's own quota (webapp.admission.ratelimit). The machine admits about
`capacity` runs at once (AGENTS_MAX_RUNS_PER_HOST; by default a few per CPU core), counted per
*user*, not per token, so one user's many tokens are one tenant:

- a user under its share (capacity divided by the users with runs in flight or waiting) is
  admitted at once, even past the capacity: another user's long or sleeping runs cannot hold it
  out, and what it may add past the capacity is bounded by the share;
- otherwise a run is admitted while fewer than `capacity` are in flight, less one for each
  other user whose last run ended under RECENT_S ago (such a user also counts in the shares), so
  a single busy user still gets the whole machine, and one sending runs one after another finds
  a slot free for each;
- past both, it waits in its user's queue (at most `queue` per user, each up to `wait_s`), and
  every freed slot goes to the waiting user with the fewest runs in flight, round-robin among
  equals: a newcomer's run goes before a flood's further queued ones;
- while other users are busy, a user's runs also *start* at most at its part of the rate the
  machine can start runs at (STARTS_PER_SLOT_S per slot of its share, after a burst of
  START_BURST), and wait in its queue for that. Slots bound what runs do at once; starting one
  costs the host CPU beyond any slot (the server, the sandbox's start: ~12 ms for `print(1)`),
  so one slot reused back to back by a flood of tiny runs took most of the machine
  (docs/benchmarks.md, issue 14). A user alone is never paced.

`webapp.admission.backends.get_admission()` gives the one UNDOABLE_ADMISSION chooses: this
in-process one ("process", the embedded default), or `webapp.admission.fairshare_redis`
("redis", the default with REDIS_URL), so all web processes of one host share one admission.
"""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings

from webapp.admission.capacity import usable_cores
from webapp.admission.ratelimit import QuotaExceeded

# Runs per CPU core when AGENTS_MAX_RUNS_PER_HOST is 0. A stateless run is mostly CPU (a fork
# of the zygote, the program, the server's own work), so throughput stops growing past this
# many, and every admitted run more only slows the others: a user let in beside a flood of
# admitted runs shares the CPU with all of them (docs/benchmarks.md, issue 14).
RUNS_PER_CORE = 2
# A user whose last run ended less than this ago still counts as busy: between the runs of an
# agent that sends one after another, another user's flood may not take the whole machine
# (docs/benchmarks.md, issue 14).
RECENT_S = 1.0
# Runs a slot can start per second, measured: ~160 `print(1)` runs/s through HTTP on 2 cores,
# 4 slots (docs/benchmarks.md). A busy user's runs start at this rate times its share of the
# slots (capacity / busy users), after a burst of START_BURST.
STARTS_PER_SLOT_S = 40.0
START_BURST = 4.0


class ShareExceeded(QuotaExceeded):
    """Refused by the host's admission: past the user's share, its queue or its wait."""


class Admission(Protocol):
    """What the API views use; both the in-process and the Redis admission provide it."""

    def admit(
        self, user: Hashable, *, capacity: int, wait_s: float, queue: int
    ) -> AbstractContextManager[None]: ...

    def admitted(self, user: Hashable) -> int: ...

    def waiting(self, user: Hashable) -> int: ...

    def wait_for(self, user: Hashable, *, admitted: int, waiting: int, timeout: float) -> bool: ...


def host_capacity() -> int:
    """Runs this machine admits at once: the setting, or RUNS_PER_CORE per usable core."""
    configured = int(settings.AGENTS_MAX_RUNS_PER_HOST)
    return configured or RUNS_PER_CORE * usable_cores()


def share_of(capacity: int, busy_users: int) -> int:
    """What each busy user is sure to get: an equal part of the capacity, at least one run."""
    return max(1, capacity // max(1, busy_users))


def start_rate(capacity: int, busy_users: int) -> float:
    """Runs per second a busy user may start while `busy_users` share the host (inf: alone)."""
    if busy_users <= 1:
        return math.inf
    return STARTS_PER_SLOT_S * capacity / busy_users


def refilled(tokens: float, elapsed_s: float, rate: float) -> float:
    """A user's start allowance `elapsed_s` after it was `tokens`, at `rate` per second."""
    return min(START_BURST, tokens + max(elapsed_s, 0.0) * rate)


def refusal(capacity: int, busy_users: int, *, queue: int = 0, waited_s: float = 0.0) -> str:
    """The 429 text, naming the limit that stopped the run."""
    what = f"at most {capacity} runs at once on this server, shared by {busy_users} busy users"
    if waited_s:
        return f"{what}; no slot came free in {waited_s:g} s"
    if queue:
        return f"{what}, and {queue} of a user's runs waiting"
    return what


@dataclass
class _Waiter:
    user: Hashable
    order: int
    granted: bool = False


class FairAdmission:
    """The in-process admission: exact for one process; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._held: Counter[Hashable] = Counter()
        self._queues: dict[Hashable, deque[_Waiter]] = {}
        # user -> when it was last admitted; the least recent goes first among equals.
        self._served: dict[Hashable, int] = {}
        self._clock = itertools.count(1)
        self._idle_since: dict[Hashable, float] = {}  # user -> when its last run ended
        # user -> (start allowance, when it was that, the rate it refills at then); a user
        # missing has the whole burst.
        self._starts: dict[Hashable, tuple[float, float, float]] = {}
        self.now = time.monotonic  # tests move it

    @contextmanager
    def admit(self, user: Hashable, *, capacity: int, wait_s: float, queue: int) -> Iterator[None]:
        """Hold one of this host's admissions for `user` for the duration of the block, or
        raise ShareExceeded (at once past `queue` waiters of this user, else after `wait_s`)."""
        with self._lock:
            self._admit_or_wait(user, capacity=capacity, wait_s=wait_s, queue=queue)
        try:
            yield
        finally:
            with self._lock:
                self._held[user] -= 1
                if not self._held[user]:
                    del self._held[user]
                    if user not in self._queues:
                        self._served.pop(user, None)
                        self._idle_since[user] = self.now()
                self._dispatch(capacity)
                self._lock.notify_all()

    def _admit_or_wait(self, user: Hashable, *, capacity: int, wait_s: float, queue: int) -> None:
        # Called holding the lock.
        if user not in self._queues and self._admissible(user, capacity):
            self._grant(user, capacity)
            return
        queued = self._queues.get(user, ())
        if wait_s <= 0 or queue <= 0 or len(queued) >= queue:
            raise ShareExceeded(refusal(capacity, self._busy(user), queue=queue), 1)
        waiter = _Waiter(user, next(self._clock))
        self._queues.setdefault(user, deque()).append(waiter)
        self._lock.notify_all()
        deadline = time.monotonic() + wait_s
        while not waiter.granted and (left := deadline - time.monotonic()) > 0:
            # A freed slot wakes the waiters; an allowance refills with time, so a waiter its
            # user's pace holds wakes when the next start is due and hands it out.
            if not self._lock.wait(min(left, self._next_start_in(user, capacity))):
                self._dispatch(capacity)
        if waiter.granted:
            return
        mine = self._queues[user]
        mine.remove(waiter)
        if not mine:
            del self._queues[user]
        self._dispatch(capacity)  # one busy user fewer may widen the others' share
        self._lock.notify_all()
        raise ShareExceeded(refusal(capacity, self._busy(user), waited_s=wait_s), 1)

    def _busy(self, also: Hashable | None = None) -> int:
        users = set(self._held) | set(self._queues) | self._recently_idle()
        if also is not None:
            users.add(also)
        return len(users)

    def _recently_idle(self) -> set[Hashable]:
        """Users with no run in or waiting whose last run ended under RECENT_S ago."""
        now = self.now()
        for user in [u for u, t in self._idle_since.items() if now - t >= RECENT_S]:
            del self._idle_since[user]
        return {u for u in self._idle_since if u not in self._held and u not in self._queues}

    def _admissible(self, user: Hashable, capacity: int) -> bool:
        busy = self._busy(user)
        if self._allowance(user, start_rate(capacity, busy)) < 1:
            return False
        reserved = len(self._recently_idle() - {user})
        return self._held[user] < share_of(capacity, busy) or (
            sum(self._held.values()) < capacity - reserved
        )

    def _allowance(self, user: Hashable, rate: float) -> float:
        if rate == math.inf or user not in self._starts:
            return START_BURST
        tokens, since, _ = self._starts[user]
        return refilled(tokens, self.now() - since, rate)

    def _next_start_in(self, user: Hashable, capacity: int) -> float:
        """Seconds until `user`'s pace lets a run of it start (inf: it does not hold it)."""
        rate = start_rate(capacity, self._busy(user))
        missing = 1 - self._allowance(user, rate)
        return missing / rate if missing > 0 else math.inf

    def _grant(self, user: Hashable, capacity: int) -> None:
        rate, now = start_rate(capacity, self._busy(user)), self.now()
        # Forget the allowances refilled since (at the rate of their last start).
        self._starts = {
            u: (tokens, since, then)
            for u, (tokens, since, then) in self._starts.items()
            if refilled(tokens, now - since, then) < START_BURST
        }
        if rate == math.inf:
            self._starts.pop(user, None)
        else:
            self._starts[user] = (self._allowance(user, rate) - 1, now, rate)
        self._held[user] += 1
        self._served[user] = next(self._clock)
        self._lock.notify_all()

    def _dispatch(self, capacity: int) -> None:
        """Hand free slots to waiting users: fewest in flight first, round-robin among equals."""
        while True:
            ready = [u for u in self._queues if self._admissible(u, capacity)]
            if not ready:
                return
            user = min(
                ready,
                key=lambda u: (self._held[u], self._served.get(u, 0), self._queues[u][0].order),
            )
            mine = self._queues[user]
            mine.popleft().granted = True
            if not mine:
                del self._queues[user]
            self._grant(user, capacity)

    def admitted(self, user: Hashable) -> int:
        """Runs of `user` admitted and not yet finished (tests and monitoring)."""
        with self._lock:
            return self._held[user]

    def forget_recent(self) -> None:
        """Forget when users' last runs ended (tests: each starts with no user recently busy)."""
        with self._lock:
            self._idle_since.clear()

    def waiting(self, user: Hashable) -> int:
        """Runs of `user` waiting for admission."""
        with self._lock:
            return len(self._queues.get(user, ()))

    def wait_for(self, user: Hashable, *, admitted: int, waiting: int, timeout: float) -> bool:
        """Block until `user` has `admitted` runs in and `waiting` waiting (tests use it)."""
        with self._lock:
            return self._lock.wait_for(
                lambda: (self._held[user], len(self._queues.get(user, ()))) == (admitted, waiting),
                timeout,
            )


local_admission = FairAdmission()


class RefusedRecently:
    """Tokens and users this process refused a run to, until the Retry-After they were given.

    A request inside that time is refused again without a round of the limiters (no thread hop,
    no Redis call), and its answer is held for one Retry-After from its own arrival (at most
    MAX_HOLD_S), stretched by a random part of one more: a held request costs the event loop
    nearly nothing, and a flood that ignores Retry-After gets under one answer per connection per
    hold instead of as many as it can ask for. Every refusal counts, not only the admission's: a
    token whose own waiting queue was full was refused at once, and a flood's 64 connections
    then asked again as fast as the server answered, 350-550 requests a second through Django
    (docs/benchmarks.md, "A refusal answered at once"). The random part keeps the flood's
    connections from coming back in step: answered at the same instant, they would all send
    again at once, and parsing those requests back to back delays every other request of this
    process by as much. Per process, so it needs no coordination; another process refuses
    through the limiters themselves.
    """

    # Past this many tokens and users noted, the expired notes are dropped.
    PRUNE_AT = 1024
    # The longest one held answer waits (before its random part). A rate limit's Retry-After
    # can be a minute; holding each request that long would let a client keep many connections
    # open for the price of one request each.
    MAX_HOLD_S = 1.0

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.clock = clock
        self.jitter = jitter  # in [0, 1): the random part of a hold, in holds
        self._lock = threading.Lock()
        # ("user", id) or ("token", id) -> (until, the refusal's class, its message, Retry-After)
        self._until: dict[tuple[str, Hashable], tuple[float, type[QuotaExceeded], str, int]] = {}

    def again(self, token: Hashable, user: Hashable) -> tuple[float, QuotaExceeded] | None:
        """If `user` or `token` was refused less than its Retry-After ago: how long to hold the
        answer, and the refusal to answer with then; else None."""
        with self._lock:
            for key in (("user", user), ("token", token)):
                noted = self._until.get(key)
                if noted is None:
                    continue
                if noted[0] <= self.clock():
                    del self._until[key]
                    continue
                break
            else:
                return None
        _, kind, message, retry_after_s = noted
        hold_s = min(float(retry_after_s), self.MAX_HOLD_S) * (1.0 + self.jitter())
        return hold_s, kind(message, retry_after_s)

    def note(self, refused: QuotaExceeded, *, token: Hashable, user: Hashable) -> None:
        """Note a refusal: the admission's (ShareExceeded) is the user's, the host's share being
        per user; any other (the token's rate, its slots) is the token's alone."""
        key = ("user", user) if isinstance(refused, ShareExceeded) else ("token", token)
        with self._lock:
            now = self.clock()
            if len(self._until) >= self.PRUNE_AT:
                self._until = {k: n for k, n in self._until.items() if n[0] > now}
            self._until[key] = (
                now + refused.retry_after_s,
                type(refused),
                str(refused),
                refused.retry_after_s,
            )

    def reset(self) -> None:
        """Forget every refusal (tests)."""
        with self._lock:
            self._until.clear()


refused_recently = RefusedRecently()
