"""The shared limiter: per-token quotas in Redis, so every web process draws on one budget.

Keys (all under `undoable:quota:`, each with a TTL so an idle token leaves nothing behind):

- `rate:LIMITER/<key>/...`: the request rate, limits' moving window in its RedisStorage (a list
  of the window's request times, one Lua script per hit; webapp.admission.ratelimit says how it
  matches the rate and burst). The times are the web processes' clocks, not Redis', so they
  must agree (NTP; one host in docker-compose). The list expires one window after its last hit.
- `slots:<key>`: a sorted set of slot ids scored by their expiry (Redis ms). A Lua script drops
  expired ids, counts and adds in one step; leaving the block removes the id. A process that
  dies holding a slot cannot release it, so every slot expires after the longest a run may take
  (EXECUTOR_WALL_TIME_S + a margin for sandbox start-up and queueing on the exec thread pool).
- `waiters:<key>`: a sorted set of the requests waiting for a slot, scored by the end of their
  wait, so the bound on waiters is shared too and a dead process's waiter stops counting.

Cost: one round trip for `take` (two when it refuses: the second reads the window for its
Retry-After), one to acquire a slot, one to release it. A request that waits asks again each
time this process frees a slot, and every POLL_S for other processes' slots.

Redis down or erroring: the request is never refused because of the limiter. The call logs a
warning and uses the in-process limiter instead, and for the next few seconds calls skip Redis
(so an outage costs one connect timeout per few seconds, not one per request). Trade-off: while
Redis is away each process enforces the quota on its own, so a token may get N times its quota
across N processes, as before shared limits existed. A slot whose release fails expires by itself.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache

import redis
from limits.storage import RedisStorage
from limits.strategies import MovingWindowRateLimiter
from redis.commands.core import Script

from webapp.admission.ratelimit import (
    QuotaExceeded,
    RateLimiter,
    busy_message,
    local_limiter,
    rate_hit,
)
from webapp.redis_client import redis_client

logger = logging.getLogger(__name__)

PREFIX = "undoable:quota:"
SLOT_MARGIN_S = 60.0
# After a failure, calls use the in-process limiter without trying Redis for this long.
BACKOFF_S = 5.0
# A waiter looks again this often for slots other processes freed (its own wake it at once).
POLL_S = 0.05
# A waiter stays counted this long past its wait, so a slow poll is not counted out early.
WAITER_MARGIN_MS = 1000

# KEYS[1] slots zset, KEYS[2] waiters zset; ARGV: limit, slot lifetime in ms (may be <= 0 in
# tests), slot id (also the waiter's id), most waiters, how long a waiter counts in ms (0: the
# caller will not wait). Returns 1 when the slot was taken, 0 when the caller is (still) a
# waiter, -1 when the cap is reached and it may not wait.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function expire_at_last(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] == nil then return end
  local keep = tonumber(last[2]) - now
  if keep > 0 then redis.call('PEXPIRE', key, keep) else redis.call('DEL', key) end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
  expire_at_last(KEYS[1])
  if redis.call('ZREM', KEYS[2], ARGV[3]) == 1 then expire_at_last(KEYS[2]) end
  return 1
end
local wait = tonumber(ARGV[5])
if wait <= 0 then return -1 end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZSCORE', KEYS[2], ARGV[3]) then return 0 end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return -1 end
redis.call('ZADD', KEYS[2], now + wait, ARGV[3])
expire_at_last(KEYS[2])
return 0
"""

# KEYS[1] slots zset. Returns the number of slots not yet expired.
_ACTIVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
"""


def default_slot_ttl_s() -> float:
    """The longest a run may hold a slot: the server's wall-time cap plus a margin."""
    from webapp.executor_glue import server_caps

    return server_caps().wall_time_s + SLOT_MARGIN_S


@lru_cache(maxsize=8)
def _scripts_for(url: str) -> tuple[Script, Script]:
    # Script objects call EVALSHA (one round trip) and load the script on NOSCRIPT.
    client = redis_client(url)
    return client.register_script(_ACQUIRE), client.register_script(_ACTIVE)


class RedisRateLimiter:
    """The RateLimiter interface over Redis; see the module docstring for keys and fallback."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = PREFIX,
        slot_ttl_s: Callable[[], float] = default_slot_ttl_s,
        fallback: RateLimiter = local_limiter,
    ) -> None:
        self._url = url
        self._prefix = prefix
        self._slot_ttl_s = slot_ttl_s
        self._fallback = fallback
        # On the app's connection pool for this URL, so with its timeouts.
        pool = redis_client(url).connection_pool
        self._rate = MovingWindowRateLimiter(
            RedisStorage(url, connection_pool=pool, key_prefix=f"{prefix}rate")
        )
        self._skip_until = 0.0
        # Wakes wait_for_active when this process takes or frees a slot; others are polled.
        self._changed = threading.Condition()

    def take(self, key: object, *, per_minute: float, burst: int) -> None:
        """Spend one request of `key`'s shared rate or raise QuotaExceeded."""
        if not self._redis_ok():
            return self._fallback.take(key, per_minute=per_minute, burst=burst)
        try:
            rate_hit(self._rate, key, per_minute=per_minute, burst=burst)
        except redis.RedisError as exc:
            self._failed("take", exc)
            self._fallback.take(key, per_minute=per_minute, burst=burst)

    @contextmanager
    def slot(
        self, key: object, *, limit: int, wait_s: float = 0.0, queue: int = 0
    ) -> Iterator[None]:
        """Hold one of `key`'s `limit` shared concurrent slots for the duration of the block,
        waiting up to `wait_s` for one when fewer than `queue` requests (in any process) wait."""
        slots_key = self._key("slots", key)
        slot_id = self._acquire(key, limit=limit, wait_s=wait_s, queue=queue)
        if slot_id is None:
            with self._fallback.slot(key, limit=limit, wait_s=wait_s, queue=queue):
                yield
            return
        self._notify()
        try:
            yield
        finally:
            try:
                redis_client(self._url).zrem(slots_key, slot_id)
            except redis.RedisError as exc:  # it expires on its own
                self._failed("release", exc)
            self._notify()

    def active(self, key: object) -> int:
        """Runs `key` has in flight across processes (plus any held here during an outage)."""
        held_here = self._fallback.active(key)
        if not self._redis_ok():
            return held_here
        try:
            return int(_scripts_for(self._url)[1](keys=[self._key("slots", key)])) + held_here
        except redis.RedisError as exc:
            self._failed("active", exc)
            return held_here

    def waiting(self, key: object) -> int:
        """Requests of `key` waiting for a slot across processes (and here during an outage)."""
        here = self._fallback.waiting(key)
        if not self._redis_ok():
            return here
        try:
            return int(_scripts_for(self._url)[1](keys=[self._key("waiters", key)])) + here
        except redis.RedisError as exc:
            self._failed("waiting", exc)
            return here

    def wait_for_active(self, key: object, count: int, timeout: float) -> bool:
        """Block until `key` has `count` runs in flight (tests and monitoring use it)."""
        return self._wait_until(lambda: self.active(key) == count, timeout)

    def wait_for_waiting(self, key: object, count: int, timeout: float) -> bool:
        """Block until `count` requests of `key` wait for a slot (tests use it)."""
        return self._wait_until(lambda: self.waiting(key) == count, timeout)

    def _wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with self._changed:
                # Another process's changes only show up in Redis: look again every POLL_S.
                self._changed.wait(min(left, POLL_S))
        return True

    def reset(self) -> None:
        """Forget every request and slot under this limiter's prefix (tests)."""
        self._fallback.reset()
        client = redis_client(self._url)
        for kind in ("rate", "slots", "waiters"):
            for name in client.scan_iter(match=f"{self._prefix}{kind}:*"):
                client.delete(name)

    def _acquire(self, key: object, *, limit: int, wait_s: float, queue: int) -> str | None:
        """A new slot id, None when Redis cannot be used, or QuotaExceeded when none is free
        (at once when the waiters are at `queue`, else after `wait_s`)."""
        if not self._redis_ok():
            return None
        keys = [self._key("slots", key), self._key("waiters", key)]
        slot_id = uuid.uuid4().hex
        ttl_ms = int(self._slot_ttl_s() * 1000)
        may_wait = wait_s > 0 and queue > 0
        waiter_ms = math.ceil(wait_s * 1000) + WAITER_MARGIN_MS if may_wait else 0
        acquire = _scripts_for(self._url)[0]
        deadline = time.monotonic() + wait_s
        waited = False
        try:
            while True:
                state = int(acquire(keys=keys, args=[limit, ttl_ms, slot_id, queue, waiter_ms]))
                if state == 1:
                    waited = False  # the script took it off the waiters
                    return slot_id
                if state < 0:
                    raise QuotaExceeded(busy_message(limit, queue if may_wait else 0), 1)
                waited = True
                left = deadline - time.monotonic()
                if left <= 0:
                    raise QuotaExceeded(busy_message(limit, queue, waited_s=wait_s), 1)
                with self._changed:
                    self._changed.wait(min(left, POLL_S))
        except redis.RedisError as exc:
            self._failed("slot", exc)
            return None
        finally:
            if waited:
                self._forget_waiter(keys[1], slot_id)

    def _forget_waiter(self, waiters_key: str, slot_id: str) -> None:
        try:
            redis_client(self._url).zrem(waiters_key, slot_id)
        except redis.RedisError as exc:  # it stops counting at the end of its wait
            self._failed("forget waiter", exc)

    def _key(self, kind: str, key: object) -> str:
        return f"{self._prefix}{kind}:{key}"

    def _redis_ok(self) -> bool:
        return time.monotonic() >= self._skip_until

    def _failed(self, operation: str, exc: redis.RedisError) -> None:
        self._skip_until = time.monotonic() + BACKOFF_S
        logger.warning(
            "quota limiter: Redis failed, using the in-process limiter",
            extra={"operation": operation, "error": repr(exc), "backoff_s": BACKOFF_S},
        )

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()


@lru_cache(maxsize=8)
def redis_limiter_for(url: str) -> RedisRateLimiter:
    """The process-wide limiter for Redis at `url` (one per URL, so its back-off state lasts)."""
    return RedisRateLimiter(url)
