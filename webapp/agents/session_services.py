"""Agent sessions in the web app: owner scoping, per-user caps, and this process's manager.

The sandbox of a session lives in the process that created it (AgentSession.worker says which);
in the embedded setup that is the one web process. With several web processes, a request that
reaches one that does not hold the session is passed on to the holder when the holder said
where it can be reached (UNDOABLE_PEER_URL; webapp.agents.session_forward), answered 410 when the
holder is gone (the live-process registry, webapp.reliability.workers, has not heard from it in
UNDOABLE_RUN_LOST_AFTER_S), else 503: then the load balancer must keep a session's requests on one
process (sticky routing). A process holding sessions beats in that registry from its first
session on.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time

import redis
from django.conf import settings
from django.contrib.auth.models import User
from django.db import close_old_connections
from django.db.models import QuerySet
from django.utils import timezone

from webapp.agents import conf
from webapp.agents.models import AgentSession, ApiToken
from webapp.agents.schemas import ApiError
from webapp.executor_glue import (
    BackendUnavailable,
    NoCapacity,
    Session,
    SessionManager,
    SessionNotFound,
    executor_get,
    session_config,
    session_leftovers_remove,
)
from webapp.reliability.workers import BeatThread, process_address, process_beat, process_state

logger = logging.getLogger(__name__)

_manager: SessionManager | None = None
_manager_pid: int | None = None
_beat: BeatThread | None = None
_lock = threading.Lock()


class HeldByPeer(Exception):
    """The session is held by the live web process reachable at `address`."""

    def __init__(self, address: str, worker: str) -> None:
        super().__init__(f"held by {worker} at {address}")
        self.address = address
        self.worker = worker


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _mark_closed(session_id: str, reason: str) -> None:
    # Called from the reaper thread too: give it a fresh connection and release it after.
    try:
        AgentSession.objects.filter(pk=session_id, closed_at__isnull=True).update(
            closed_at=timezone.now()
        )
    finally:
        if threading.current_thread().name == "session-reaper":
            close_old_connections()


def session_manager() -> SessionManager:
    """This process's SessionManager, built once from settings."""
    global _manager, _manager_pid
    with _lock:
        if _manager is None or _manager_pid != os.getpid():
            session_leftovers_remove()  # what a killed server before us left mounted
            _manager = executor_get().session_manager(session_config(), on_close=_mark_closed)
            _manager_pid = os.getpid()
            _start_beat()
        return _manager


def _start_beat() -> None:
    # Other processes tell "holder gone" (410) from "held elsewhere" (503) by this beat.
    # Beat once before the first session is handed out: a request for it may reach another
    # process at once, and must not find this one "lost".
    global _beat
    if settings.REDIS_URL:
        try:
            process_beat(worker_name(), settings.UNDOABLE_PEER_URL)
        except redis.RedisError as exc:  # the thread keeps trying
            logger.warning("alive beat failed", extra={"error": repr(exc)})
        _beat = BeatThread(worker_name(), settings.UNDOABLE_PEER_URL)
        _beat.start()


def reset_session_manager() -> None:
    """Close every session of this process and forget the manager (tests, shutdown)."""
    global _manager, _beat
    with _lock:
        manager, _manager = _manager, None
        beat, _beat = _beat, None
    if manager is not None:
        manager.shutdown()
    if beat is not None:
        beat.stop()
        beat.join(timeout=5)  # it forgets this process in the registry on its way out


def session_create(*, token: ApiToken) -> AgentSession:
    """Start a sandbox for the token's owner, within the per-user cap on live sessions."""
    owner = token.owner
    try:
        manager = session_manager()
    except BackendUnavailable as exc:
        logger.error("session sandboxes unavailable", extra={"error": str(exc)})
        raise ApiError(503, "the sandbox is unavailable on this server", retry_after_s=5) from None
    live = AgentSession.objects.filter(owner=owner, closed_at__isnull=True)
    _close_stale(live, manager)
    cap = conf.get_int("AGENTS_MAX_SESSIONS_PER_USER")
    if live.count() >= cap:
        _close_lost(live)
    if live.count() >= cap:
        raise ApiError(429, f"at most {cap} live sessions per user; delete one", retry_after_s=60)
    try:
        session = manager.create()
    except NoCapacity as exc:
        raise ApiError(503, str(exc), retry_after_s=5) from None
    now = timezone.now()
    return AgentSession.objects.create(
        id=session.id,
        owner=owner,
        token=token,
        last_used_at=now,
        expires_at=now
        + dt.timedelta(seconds=min(manager.config.idle_timeout_s, manager.config.max_lifetime_s)),
        worker=worker_name(),
    )


def _close_stale(live: QuerySet[AgentSession], manager: SessionManager) -> None:
    """Close the rows this worker no longer holds (reaped, or from before a restart).

    The rows are read BEFORE the manager's live ids, never after: a session is in the manager
    before its row is written (session_create) and leaves it before its row is closed, so a
    row read first belongs either to a session still held when the ids are read, or to one
    truly gone. Read the other way round, a session another request created in between has a
    row but is missing from the older snapshot, and was closed as stale while brand new.
    Ordering needs no lock, so concurrent creates do not queue behind each other's sandbox
    start.
    """
    rows = list(live.filter(worker=worker_name()).values_list("pk", flat=True))
    held_here = set(manager.live_ids())
    stale = [pk for pk in rows if pk not in held_here]
    if stale:
        live.filter(pk__in=stale).update(closed_at=timezone.now())


def get_session_for_user(user: User, session_id: str) -> tuple[AgentSession, Session]:
    """The caller's own live session, or 404 — a stranger learns nothing, not even existence."""
    row = AgentSession.objects.filter(pk=session_id, owner=user, closed_at__isnull=True).first()
    if row is None:
        raise ApiError(404, "no such session")
    if row.worker != worker_name():
        raise _held_elsewhere(row)
    try:
        session = session_manager().get(session_id)
    except SessionNotFound:
        _mark_closed(session_id, "gone")
        raise ApiError(404, "no such session (it expired or was closed)") from None
    return row, session


def _held_elsewhere(row: AgentSession) -> Exception:
    """For a session another process holds: pass the request there (HeldByPeer), or answer
    that it is gone with its holder (410) or must be sent there (503)."""
    state = process_state(row.worker)
    logger.info(
        "session held elsewhere", extra={"session_id": row.pk, "worker": row.worker, "state": state}
    )
    if state == "lost":
        return ApiError(410, "session lost: the worker holding it is gone")
    address = process_address(row.worker)
    if address:
        return HeldByPeer(address, row.worker)
    return ApiError(
        503,
        f"the session is held by another web process ({row.worker}); send its requests to the "
        "process that created it (sticky routing)",
        retry_after_s=1,
    )


def _close_lost(live: QuerySet[AgentSession]) -> None:
    """Close the rows whose holder is gone, so dead sessions do not count against the cap."""
    states: dict[str, str] = {}
    lost = []
    for pk, worker in live.exclude(worker=worker_name()).values_list("pk", "worker"):
        if worker not in states:
            states[worker] = process_state(worker)
        if states[worker] == "lost":
            lost.append(pk)
    if lost:
        live.filter(pk__in=lost).update(closed_at=timezone.now())
        logger.info("closed sessions of lost workers", extra={"session_ids": lost})


def session_touch(row: AgentSession, session: Session) -> None:
    """Record use (and the new expiry) on the row; the manager tracks the real deadline."""
    now = timezone.now()
    remaining = max(0.0, session.expires_at - time.monotonic())
    AgentSession.objects.filter(pk=row.pk).update(
        last_used_at=now, expires_at=now + dt.timedelta(seconds=remaining)
    )


def session_delete(*, row: AgentSession) -> None:
    try:
        session_manager().close(row.pk, reason="deleted")
    except SessionNotFound:
        _mark_closed(row.pk, "gone")
