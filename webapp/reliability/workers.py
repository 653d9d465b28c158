"""Who is alive, and how to reach the one worker that holds something.

- `workers_ping()`: Celery's broadcast ping; the names of the workers that answered.
- A registry of live processes in Redis: every worker (and any process holding stateful
  sessions) refreshes `undoable:alive:<name>` every UNDOABLE_RUN_HEARTBEAT_INTERVAL_S with a TTL of
  UNDOABLE_RUN_LOST_AFTER_S, so `process_state(name)` tells "alive" from "lost" without waiting on
  a ping. A web process stores there the URL its peers reach it at (`process_address(name)`).
- `pinned_queue(name)`: the per-worker queue each Celery worker also consumes, so work for a
  session goes to the worker holding its sandbox (`task.apply_async(..., queue=pinned_queue(w))`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from typing import Literal

import redis
from django.conf import settings

from webapp.redis_client import redis_client
from webapp.reliability import conf

logger = logging.getLogger(__name__)

_ALIVE_PREFIX = "undoable:alive:"
ProcessState = Literal["alive", "lost", "unknown"]


def current_worker() -> str:
    """This process's name as recorded on runs and sessions.

    Inside a Celery task: the Celery node name (`worker@host`), which is also what
    `pinned_queue()` and `workers_ping()` use. Elsewhere (web process, embedded runner): host:pid.
    """
    from celery import current_task

    request = getattr(current_task, "request", None)
    hostname = getattr(request, "hostname", None)
    return str(hostname) if hostname else f"{socket.gethostname()}:{os.getpid()}"


def pinned_queue(worker: str) -> str:
    """The queue only `worker` consumes (added when it starts: webapp.reliability.tasks)."""
    return f"pin.{worker}"


def workers_ping(*, timeout_s: float = 1.0, names: list[str] | None = None) -> list[str]:
    """Names of the Celery workers that answered a ping within `timeout_s` (all, or `names`)."""
    from webapp.celery import app

    replies = app.control.ping(destination=names, timeout=timeout_s) or []
    return sorted(name for reply in replies for name in reply)


def _client() -> redis.Redis | None:
    return redis_client(settings.REDIS_URL) if settings.REDIS_URL else None


def process_beat(name: str, address: str = "") -> None:
    """Say `name` is alive for the next UNDOABLE_RUN_LOST_AFTER_S seconds (reachable at
    `address`)."""
    client = _client()
    if client is not None:
        ttl_ms = int(conf.seconds("UNDOABLE_RUN_LOST_AFTER_S") * 1000)
        client.set(_ALIVE_PREFIX + name, address.encode() or b"1", px=ttl_ms)


def process_address(name: str) -> str:
    """The URL live process `name` said its peers reach it at; "" if none or not known now."""
    client = _client()
    if client is None:
        return ""
    try:
        value = client.get(_ALIVE_PREFIX + name)
    except redis.RedisError:
        return ""
    address = value.decode() if isinstance(value, bytes) else ""
    return address if address.startswith(("http://", "https://")) else ""


def process_gone(name: str) -> None:
    """Forget `name` at once (clean shutdown), so nobody waits for its key to expire."""
    client = _client()
    if client is not None:
        client.delete(_ALIVE_PREFIX + name)


def process_state(name: str) -> ProcessState:
    """ "alive" if `name` beat recently, "lost" if not, "unknown" if Redis cannot tell right now.

    A Redis restarted less than UNDOABLE_RUN_LOST_AFTER_S ago cannot tell either: it lost every
    key, and live processes may not have beaten into it yet. Without Redis (embedded mode) there is
    one process: only this one can be alive.
    """
    client = _client()
    if client is None:
        here = f"{socket.gethostname()}:{os.getpid()}"
        return "alive" if name == here else "lost"
    try:
        if client.exists(_ALIVE_PREFIX + name):
            return "alive"
        uptime_s = int(client.info("server")["uptime_in_seconds"])
    except redis.RedisError:
        return "unknown"
    return "lost" if uptime_s >= conf.seconds("UNDOABLE_RUN_LOST_AFTER_S") else "unknown"


class BeatThread(threading.Thread):
    """Refreshes the registry key of `name` until `stop()`; survives Redis restarts."""

    def __init__(self, name: str, address: str = "") -> None:
        super().__init__(name="alive-beat", daemon=True)
        self.process_name = name
        self.address = address
        self._stop_event = threading.Event()

    def run(self) -> None:
        interval = conf.seconds("UNDOABLE_RUN_HEARTBEAT_INTERVAL_S")
        while True:
            try:
                process_beat(self.process_name, self.address)
            except redis.RedisError as exc:  # Redis restarting: the next beat re-registers
                logger.warning("alive beat failed", extra={"error": repr(exc)})
            if self._stop_event.wait(interval):
                break
        with contextlib.suppress(redis.RedisError):  # else the key expires on its own
            process_gone(self.process_name)

    def stop(self) -> None:
        self._stop_event.set()
