"""The host's fair admission in Redis, so every web process on one machine shares it.

The rule is webapp.admission.fairshare's; here one Lua script applies it atomically. Keys, under
`undoable:admit:<host name>:` (one machine's capacity is that machine's, so each host has its
own; every key has a TTL):

- `slots`: a sorted set of "<user> <id>" scored by expiry (Redis ms). A process that dies
  holding one cannot release it, so each expires after the longest a run may take, as the
  per-token slots do (webapp.admission.ratelimit_redis).
- `queue`: a sorted set of "<user> <id> <deadline>" scored by arrival; a waiter past its
  deadline (a dead process's too) stops counting.
- `served`: a hash user -> when it was last admitted (round-robin among equals).
- `idle`: a hash user -> when its last run ended (Redis ms); for fairshare.RECENT_S it still
  counts as busy.
- `starts`: a hash user -> "<start allowance> <when, ms> <rate it refills at then, per s>" of
  a user its pace holds (fairshare.start_rate); a user missing has the whole burst.
- `grant:<id>`: a list the script pushes to when it admits a waiting run; the waiter blocks on
  it (BLPOP), so a freed slot is taken at once, with no polling. Created by the script under the
  same prefix: fine on one Redis server, not on a Redis Cluster.

Every call first hands free slots to waiters ("dispatch"), so a slot whose holder died is
reused as soon as it expires and anyone calls. A waiter calls again every WAKE_S for that.

Redis down or erroring: as the per-token limiter, log a warning and use the in-process
admission for a few seconds (each process then admits up to the capacity on its own).
"""

from __future__ import annotations

import logging
import math
import socket
import time
import uuid
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import redis
from redis.commands.core import Script

from webapp.admission import fairshare
from webapp.admission.fairshare import FairAdmission, ShareExceeded, local_admission, refusal
from webapp.admission.ratelimit_redis import BACKOFF_S, default_slot_ttl_s
from webapp.redis_client import redis_client

logger = logging.getLogger(__name__)

PREFIX = "undoable:admit:"
# A waiter blocks this long at most before it calls again (dispatching expired slots).
WAKE_S = 1.0
# A waiter stays counted this long past its own deadline; a grant list lives as long.
WAITER_MARGIN_MS = 2000

# KEYS: slots, queue, served, seq, idle, starts. ARGV: op (admit | release | cancel | poke |
# count), capacity, slot lifetime ms, grant key prefix, user, id, how long a waiter counts in ms
# (0: it may not wait), most waiters per user, the queue member to cancel, RECENT_S in ms,
# STARTS_PER_SLOT_S, START_BURST.
# admit -> {1} admitted, {0, member, ms until its pace lets it start (0: no pace holds it)}
# queued, {-1, busy users} refused; release -> {}; cancel -> {1} admitted after all, {0, busy
# users} not; poke -> {ms until its pace lets it start}; count -> {admitted, waiting} of the
# user, and it alone hands out no slot.
_SCRIPT = """
local slots, queue, served, seq, idle, starts = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5],
  KEYS[6]
local op, capacity, ttl, grants = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local user, id, recent_ms = ARGV[5], ARGV[6], tonumber(ARGV[10])
local per_slot, burst = tonumber(ARGV[11]), tonumber(ARGV[12])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if op == 'release' then redis.call('ZREM', slots, user .. ' ' .. id) end
if op == 'cancel' then
  local gone = redis.call('ZREM', queue, ARGV[9])
  if gone == 0 and redis.call('ZSCORE', slots, user .. ' ' .. id) then return {1} end
end
redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
local held, total, lists, busy = {}, 0, {}, {}
for _, m in ipairs(redis.call('ZRANGE', slots, 0, -1)) do
  local u = string.match(m, '^(%S+) ')
  held[u] = (held[u] or 0) + 1
  total = total + 1
  busy[u] = true
end
local members = redis.call('ZRANGE', queue, 0, -1, 'WITHSCORES')
for i = 1, #members, 2 do
  local m = members[i]
  local u, w, deadline = string.match(m, '^(%S+) (%S+) (%S+)$')
  if tonumber(deadline) < now then
    redis.call('ZREM', queue, m)
  else
    lists[u] = lists[u] or {}
    table.insert(lists[u], {m, w, tonumber(members[i + 1])})
    busy[u] = true
  end
end
local recent = {}
local stamps = redis.call('HGETALL', idle)
for i = 1, #stamps, 2 do
  if now - tonumber(stamps[i + 1]) >= recent_ms then
    redis.call('HDEL', idle, stamps[i])
  else
    recent[stamps[i]] = true
  end
end
if op == 'release' and not busy[user] then
  -- Before the freed slot is handed out: the user's next run finds one kept for it.
  redis.call('HSET', idle, user, now)
  recent[user] = true
end
local function busy_count(also)
  local n = 0
  for _ in pairs(busy) do n = n + 1 end
  for u in pairs(recent) do if not busy[u] then n = n + 1 end end
  if also and not busy[also] and not recent[also] then n = n + 1 end
  return n
end
local function start_rate(u)  -- runs/s; nil: alone, no pace
  local n = busy_count(u)
  if n <= 1 then return nil end
  return per_slot * capacity / n
end
local function refilled(kept, rate)
  return math.min(burst, kept[1] + math.max(0, now - kept[2]) * rate / 1000)
end
local paced = {}
local allowances = redis.call('HGETALL', starts)
for i = 1, #allowances, 2 do
  local tokens, since, then_rate = string.match(allowances[i + 1], '^(%S+) (%S+) (%S+)$')
  local kept = {tonumber(tokens), tonumber(since)}
  if refilled(kept, tonumber(then_rate)) >= burst then  -- refilled since: forget it
    redis.call('HDEL', starts, allowances[i])
  else
    paced[allowances[i]] = kept
  end
end
local function allowance(u, rate)
  if not rate or not paced[u] then return burst end
  return refilled(paced[u], rate)
end
local function next_start_ms(u)
  local rate = start_rate(u)
  local missing = rate and 1 - allowance(u, rate) or 0
  if missing <= 0 then return 0 end
  return math.ceil(missing * 1000 / rate)
end
local function admissible(u)
  if allowance(u, start_rate(u)) < 1 then return false end
  local share = math.max(1, math.floor(capacity / math.max(1, busy_count(u))))
  local reserved = 0
  for r in pairs(recent) do if r ~= u and not busy[r] then reserved = reserved + 1 end end
  return (held[u] or 0) < share or total < capacity - reserved
end
local function grant(u, w)
  local rate = start_rate(u)
  if rate then
    paced[u] = {allowance(u, rate) - 1, now}
    redis.call('HSET', starts, u, paced[u][1] .. ' ' .. now .. ' ' .. rate)
  else
    paced[u] = nil
    redis.call('HDEL', starts, u)
  end
  redis.call('ZADD', slots, now + ttl, u .. ' ' .. w)
  held[u] = (held[u] or 0) + 1
  total = total + 1
  busy[u] = true
  redis.call('HSET', served, u, redis.call('INCR', seq))
end
while op ~= 'count' do
  local best, key
  for u, list in pairs(lists) do
    if #list > 0 and admissible(u) then
      local k = {held[u] or 0, tonumber(redis.call('HGET', served, u)) or 0, list[1][3]}
      if not best or k[1] < key[1] or (k[1] == key[1] and (k[2] < key[2]
          or (k[2] == key[2] and k[3] < key[3]))) then
        best, key = u, k
      end
    end
  end
  if not best then break end
  local head = table.remove(lists[best], 1)
  redis.call('ZREM', queue, head[1])
  grant(best, head[2])
  redis.call('RPUSH', grants .. head[2], 1)
  redis.call('PEXPIRE', grants .. head[2], ttl)
end
local result = {}
if op == 'admit' then
  local mine = lists[user] and #lists[user] or 0
  if mine == 0 and admissible(user) then
    grant(user, id)
    result = {1}
  elseif tonumber(ARGV[7]) <= 0 or mine >= tonumber(ARGV[8]) then
    result = {-1, busy_count(user)}
  else
    local member = user .. ' ' .. id .. ' ' .. (now + tonumber(ARGV[7]))
    redis.call('ZADD', queue, redis.call('INCR', seq), member)
    result = {0, member, next_start_ms(user)}
  end
elseif op == 'cancel' then
  result = {0, busy_count(user)}
elseif op == 'poke' then
  result = {next_start_ms(user)}
elseif op == 'count' then
  result = {held[user] or 0, lists[user] and #lists[user] or 0}
end
if op == 'release' and not busy[user] then redis.call('HDEL', served, user) end
for _, key in ipairs({slots, queue, served, seq, idle, starts}) do
  redis.call('PEXPIRE', key, ttl)
end
return result
"""


def host_prefix() -> str:
    """This machine's keys: its capacity is its own, whichever Redis the hosts share."""
    return f"{PREFIX}{socket.gethostname()}:"


@lru_cache(maxsize=8)
def _script_for(url: str) -> Script:
    return redis_client(url).register_script(_SCRIPT)


class RedisFairAdmission:
    """The FairAdmission interface over Redis; see the module docstring."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str | None = None,
        slot_ttl_s: Callable[[], float] = default_slot_ttl_s,
        fallback: FairAdmission = local_admission,
    ) -> None:
        self._url = url
        self._prefix = prefix or host_prefix()
        self._slot_ttl_s = slot_ttl_s
        self._fallback = fallback
        self._skip_until = 0.0

    @contextmanager
    def admit(self, user: Hashable, *, capacity: int, wait_s: float, queue: int) -> Iterator[None]:
        """Hold one of this host's admissions for `user` (shared by every process on it)."""
        slot_id = uuid.uuid4().hex
        try:
            admitted = self._admit(user, slot_id, capacity=capacity, wait_s=wait_s, queue=queue)
        except redis.RedisError as exc:
            self._failed("admit", exc)
            admitted = False
        if not admitted:
            with self._fallback.admit(user, capacity=capacity, wait_s=wait_s, queue=queue):
                yield
            return
        try:
            yield
        finally:
            try:
                self._call("release", user, slot_id, capacity)
            except redis.RedisError as exc:  # it expires on its own
                self._failed("release", exc)

    def _admit(
        self, user: Hashable, slot_id: str, *, capacity: int, wait_s: float, queue: int
    ) -> bool:
        """True once admitted, False when Redis is not to be used; else ShareExceeded."""
        if not self._redis_ok():
            return False
        may_wait = wait_s > 0 and queue > 0
        counted_ms = math.ceil(wait_s * 1000) + WAITER_MARGIN_MS if may_wait else 0
        reply = self._call("admit", user, slot_id, capacity, counted_ms, queue)
        if reply[0] == 1:
            return True
        if reply[0] < 0:
            busy_users = int(reply[1])
            raise ShareExceeded(refusal(capacity, busy_users, queue=queue if may_wait else 0), 1)
        member, pace_ms = reply[1].decode(), int(reply[2])
        grant_key = f"{self._prefix}grant:{slot_id}"
        client = redis_client(self._url)
        deadline = time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0:
            if 0 < pace_ms < WAKE_S * 1000:
                # Its pace holds it, and Redis times blocking waits out only every 100 ms
                # (hz 10): look (the last call may have let it in), then sleep until its next
                # start is due.
                if client.lpop(grant_key) is not None:
                    return True
                time.sleep(min(left, pace_ms / 1000))
            # BLPOP's timeout stays under the client's socket timeout (webapp.redis_client).
            elif client.blpop([grant_key], timeout=min(left, WAKE_S)) is not None:
                return True
            # Hands out expired slots and starts its pace now allows.
            pace_ms = int(self._call("poke", user, slot_id, capacity)[0])
        reply = self._call("cancel", user, slot_id, capacity, member=member)
        if reply[0] == 1:  # admitted as the wait ended: take it
            client.delete(grant_key)
            return True
        raise ShareExceeded(refusal(capacity, int(reply[1]), waited_s=wait_s), 1)

    def admitted(self, user: Hashable) -> int:
        """Runs of `user` admitted on this host, across processes (and here in an outage)."""
        return int(self._count(user)[0]) + self._fallback.admitted(user)

    def waiting(self, user: Hashable) -> int:
        """Runs of `user` waiting for admission on this host."""
        return int(self._count(user)[1]) + self._fallback.waiting(user)

    def wait_for(self, user: Hashable, *, admitted: int, waiting: int, timeout: float) -> bool:
        """Block until `user` has `admitted` runs in and `waiting` waiting (tests use it)."""
        deadline = time.monotonic() + timeout
        while (self.admitted(user), self.waiting(user)) != (admitted, waiting):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)  # other processes' changes show only in Redis: look again
        return True

    def _count(self, user: Hashable) -> list[int]:
        return [int(n) for n in self._call("count", user, "-", 0)]

    def _call(
        self,
        op: str,
        user: Hashable,
        slot_id: str,
        capacity: int,
        counted_ms: int = 0,
        queue: int = 0,
        *,
        member: str = "",
    ) -> list[Any]:
        names = ("slots", "queue", "served", "seq", "idle", "starts")
        keys = [self._prefix + name for name in names]
        ttl_ms = int(self._slot_ttl_s() * 1000)
        grants = f"{self._prefix}grant:"
        args: list[str | int] = [op, capacity, ttl_ms, grants, str(user), slot_id]
        recent_ms = int(fairshare.RECENT_S * 1000)
        pace = [fairshare.STARTS_PER_SLOT_S, fairshare.START_BURST]
        return list(
            _script_for(self._url)(
                keys=keys, args=[*args, counted_ms, queue, member, recent_ms, *pace]
            )
        )

    def _redis_ok(self) -> bool:
        return time.monotonic() >= self._skip_until

    def _failed(self, operation: str, exc: redis.RedisError) -> None:
        self._skip_until = time.monotonic() + BACKOFF_S
        logger.warning(
            "host admission: Redis failed, using the in-process admission",
            extra={"operation": operation, "error": repr(exc), "backoff_s": BACKOFF_S},
        )


@lru_cache(maxsize=8)
def redis_admission_for(url: str) -> RedisFairAdmission:
    """The process-wide admission for Redis at `url` (one per URL, so its back-off lasts)."""
    return RedisFairAdmission(url)
