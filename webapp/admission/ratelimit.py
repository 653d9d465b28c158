"""Per-token quotas: a request rate (the `limits` library) and a cap on runs in flight.

The rate is limits' moving window: at most `burst` requests in any `burst * 60 / per_minute`
seconds (rounded up to whole seconds). A token may send its whole burst at once and keeps
`per_minute` in the long run; in any T seconds it gets at most burst * ceil(T / window), never
more than a token bucket of that rate and burst (burst + T * per_minute / 60). Retry-After is when
the oldest request leaves the window. (limits' sliding-window counter only estimates: it lets up
to twice the burst through in one window.)

A request over the concurrency cap waits for a slot before it is refused: at most `queue`
requests per token wait at once, each at most `wait_s` seconds, so a burst from one agent is
served in turn rather than bounced; past either bound it gets QuotaExceeded (429 + Retry-After).

`webapp.admission.backends.get_limiter()` gives the limiter UNDOABLE_ADMISSION chooses:

- "process", the embedded default (no `REDIS_URL`): `local_limiter`, counters in this
  process (limits' moving window on webapp.admission.window_storage). One process serves
  everything, so the figures hold exactly.
- "redis", the default with `REDIS_URL` (production, docker-compose):
  `webapp.admission.ratelimit_redis.RedisRateLimiter`, counters in Redis, so N web processes
  share one rate and one concurrency cap per token. If Redis is down or errors, that limiter
  logs a warning and uses `local_limiter` for the call: the API keeps serving, and during the
  outage a token may get up to N times its quota (one in-process budget per web process)
  instead of every request failing.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from limits import RateLimitItemPerSecond
from limits.strategies import MovingWindowRateLimiter

from webapp.admission.window_storage import WindowStorage


class QuotaExceeded(Exception):
    """The caller must wait `retry_after_s` seconds before trying again."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Limiter(Protocol):
    """What the API views use; both the in-process and the Redis limiter provide it."""

    def take(self, key: object, *, per_minute: float, burst: int) -> None: ...

    def slot(
        self, key: object, *, limit: int, wait_s: float = 0.0, queue: int = 0
    ) -> AbstractContextManager[None]: ...

    def active(self, key: object) -> int: ...

    def waiting(self, key: object) -> int: ...

    def wait_for_active(self, key: object, count: int, timeout: float) -> bool: ...

    def wait_for_waiting(self, key: object, count: int, timeout: float) -> bool: ...

    def reset(self) -> None: ...


class RateLimiter:
    """The in-process limiter: exact for one process, per-process otherwise."""

    def __init__(self) -> None:
        self._rate = MovingWindowRateLimiter(WindowStorage())
        self._lock = threading.Condition()
        self._active: dict[object, int] = {}
        self._waiting: dict[object, int] = {}

    def take(self, key: object, *, per_minute: float, burst: int) -> None:
        """Spend one request of `key`'s rate or raise QuotaExceeded."""
        rate_hit(self._rate, key, per_minute=per_minute, burst=burst)

    @contextmanager
    def slot(
        self, key: object, *, limit: int, wait_s: float = 0.0, queue: int = 0
    ) -> Iterator[None]:
        """Hold one of `key`'s `limit` concurrent slots for the duration of the block.

        When all are taken, wait up to `wait_s` seconds for one if fewer than `queue` others do.
        """
        with self._lock:
            if self._active.get(key, 0) >= limit:
                self._wait_for_slot(key, limit=limit, wait_s=wait_s, queue=queue)
            self._active[key] = self._active.get(key, 0) + 1
            self._lock.notify_all()
        try:
            yield
        finally:
            with self._lock:
                self._active[key] -= 1
                if not self._active[key]:
                    del self._active[key]
                self._lock.notify_all()

    def _wait_for_slot(self, key: object, *, limit: int, wait_s: float, queue: int) -> None:
        # Called holding the lock; returns holding it with a slot free, or raises QuotaExceeded.
        if wait_s <= 0 or queue <= 0:
            raise QuotaExceeded(busy_message(limit, 0), 1)
        if self._waiting.get(key, 0) >= queue:
            raise QuotaExceeded(busy_message(limit, queue), 1)
        self._waiting[key] = self._waiting.get(key, 0) + 1
        self._lock.notify_all()
        try:
            free = self._lock.wait_for(lambda: self._active.get(key, 0) < limit, wait_s)
        finally:
            self._waiting[key] -= 1
            if not self._waiting[key]:
                del self._waiting[key]
            self._lock.notify_all()
        if not free:
            raise QuotaExceeded(busy_message(limit, queue, waited_s=wait_s), 1)

    def waiting(self, key: object) -> int:
        """How many requests of `key` wait for a slot (tests and monitoring use it)."""
        with self._lock:
            return self._waiting.get(key, 0)

    def active(self, key: object) -> int:
        """How many runs `key` has in flight."""
        with self._lock:
            return self._active.get(key, 0)

    def wait_for_active(self, key: object, count: int, timeout: float) -> bool:
        """Block until `key` has `count` runs in flight (tests and monitoring use it)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._active.get(key, 0) == count, timeout)

    def wait_for_waiting(self, key: object, count: int, timeout: float) -> bool:
        """Block until `count` requests of `key` wait for a slot (tests use it)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._waiting.get(key, 0) == count, timeout)

    def reset(self) -> None:
        """Forget every request counted against the rate (tests); slots in use stay held until
        their blocks exit."""
        self._rate.storage.reset()


def rate_hit(
    limiter: MovingWindowRateLimiter, key: object, *, per_minute: float, burst: int
) -> None:
    """Count one request of `key` in `limiter` or raise QuotaExceeded if its window is full."""
    if per_minute <= 0 or burst < 1:
        raise ValueError("per_minute must be positive and burst at least 1")
    window = RateLimitItemPerSecond(burst, math.ceil(burst * 60 / per_minute))
    if limiter.hit(window, str(key)):
        return
    stats = limiter.get_window_stats(window, str(key))
    # The oldest request leaves strictly after reset_time: retry the next whole second past it.
    wait_s = 0.0 if stats.remaining > 0 else max(0.0, stats.reset_time - time.time())
    message = (
        f"at most {per_minute:g} requests per minute per token, "
        f"{burst} in any {window.get_expiry()} s"
    )
    raise QuotaExceeded(message, int(wait_s) + 1)


def busy_message(limit: int, queue: int, *, waited_s: float | None = None) -> str:
    """The 429 text when no slot is free, saying which bound was hit."""
    if waited_s is not None:
        return f"at most {limit} runs at once per token; no slot came free in {waited_s:g} s"
    if queue:
        return f"at most {limit} runs at once per token and {queue} waiting for a slot"
    return f"at most {limit} runs at once per token"


local_limiter = RateLimiter()
