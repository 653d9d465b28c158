"""The one bridge between the web app and the executor: its Executor, built from settings.

`executor_get()` returns this process's Executor, built on first use (a web process that never
runs code never starts a sandbox pool) and again in a forked child (Celery's prefork children
each build their own; the parent's stays the parent's). A backend that cannot run safely fails
closed: `executor_get()` raises BackendUnavailable with the backend's own message, and the pages
show that message instead of running anything. The executor's types and helpers the web app
needs are re-exported here; no other web app module imports `executor` (import-linter).
"""

from __future__ import annotations

import logging
import os
import pwd
import threading

from django.conf import settings

from executor import (
    BackendUnavailable,
    CancelToken,
    Executor,
    ExecutorError,
    InvalidLimits,
    InvalidSpec,
    Limits,
    Mount,
    NoCapacity,
    OutputChunk,
    RunResult,
    RunSpec,
)
from executor.images import OUTPUT_ENV, Image
from executor.kinds.db import PendingDb, ServerTarget, SqliteTarget
from executor.kinds.db import Target as DbTarget
from executor.kinds.db_broker import StatementLog
from executor.kinds.db_slots import DbCaps
from executor.kinds.egress import with_forward_output
from executor.kinds.errors import NothingPending, WorkspaceBusy
from executor.kinds.fs import FsWorkspace, Reservation
from executor.kinds.fs_tree import kept_mode
from executor.kinds.fs_walk import DIR_FLAGS, open_regular, parent_of, remove_at, remove_tree
from executor.kinds.rehearsal import Rehearsal
from executor.kinds.reverse_check import fs_reverse_check
from executor.kinds.undo_check import UndoCheck
from executor.quota import unmount as quota_unmount
from executor.sessions.config import SessionConfig
from executor.sessions.files import FileMissing
from executor.sessions.manager import (
    Session,
    SessionBusy,
    SessionManager,
    SessionNotFound,
    session_root_remove,
)
from executor.spec import validate_relative_path
from executor.stops import limit_line

__all__ = [
    "DIR_FLAGS",
    "OUTPUT_ENV",
    "BackendUnavailable",
    "CancelToken",
    "DbCaps",
    "DbTarget",
    "Executor",
    "ExecutorError",
    "FileMissing",
    "FsWorkspace",
    "Image",
    "InvalidLimits",
    "InvalidSpec",
    "Limits",
    "Mount",
    "NoCapacity",
    "NothingPending",
    "OutputChunk",
    "PendingDb",
    "Rehearsal",
    "Reservation",
    "RunResult",
    "RunSpec",
    "ServerTarget",
    "Session",
    "SessionBusy",
    "SessionConfig",
    "SessionManager",
    "SessionNotFound",
    "SqliteTarget",
    "StatementLog",
    "UndoCheck",
    "WorkspaceBusy",
    "executor_close",
    "executor_get",
    "executor_problem",
    "fs_reverse_check",
    "kept_mode",
    "limit_line",
    "open_regular",
    "parent_of",
    "quota_unmount",
    "remove_at",
    "remove_tree",
    "reset_executor",
    "server_caps",
    "session_config",
    "session_leftovers_remove",
    "session_root",
    "validate_relative_path",
    "with_forward_output",
]

logger = logging.getLogger(__name__)

_lock = threading.Lock()
# This process's pid with its Executor, or with the backend's refusal: a fork (another pid)
# builds anew.
_built: tuple[int, Executor | str] | None = None
# An operator may name the sandbox uid with an account of its own (useradd --system).
SANDBOX_ACCOUNT = "undoable-sandbox"


def server_caps() -> Limits:
    """The EXECUTOR_* settings as a Limits schema; a run may only lower them."""
    return Limits(
        wall_time_s=settings.EXECUTOR_WALL_TIME_S,
        cpu_time_s=settings.EXECUTOR_CPU_TIME_S,
        memory_mib=settings.EXECUTOR_MEMORY_MIB,
        max_pids=settings.EXECUTOR_MAX_PIDS,
        max_output_bytes=settings.EXECUTOR_MAX_OUTPUT_BYTES,
        max_file_size_mib=settings.EXECUTOR_MAX_FILE_SIZE_MIB,
        workdir_quota_mib=settings.EXECUTOR_WORKDIR_QUOTA_MIB,
    )


def _backend_options(caps: Limits) -> dict[str, object]:
    # Warm sandboxes are built for the server caps, so every run (which may only lower them)
    # can take one.
    options: dict[str, object] = {"warm_pool_size": settings.EXECUTOR_WARM_POOL_SIZE}
    if settings.EXECUTOR_BACKEND == "bwrap":
        options.update(
            rootfs=str(settings.EXECUTOR_ROOTFS),
            pool_limits=caps,
            host_uid=settings.EXECUTOR_SANDBOX_UID,
            zygote=settings.EXECUTOR_ZYGOTE,
        )
    else:
        options.update(
            image=settings.EXECUTOR_DOCKER_IMAGE,
            limits=caps,
            zygote=settings.EXECUTOR_ZYGOTE,
            host_uid=settings.EXECUTOR_SANDBOX_UID,  # its forked runs'
        )
    return options


def _check_sandbox_uid(uid: int) -> None:
    """Refuse a sandbox uid that an account owns: a sandbox could signal or ptrace its processes."""
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return  # no account: only sandboxes run as it
    if name != SANDBOX_ACCOUNT:
        raise BackendUnavailable(
            f"EXECUTOR_SANDBOX_UID {uid} belongs to the account {name!r}: sandboxes need a uid "
            f"no other program runs as (one with no account, or the account {SANDBOX_ACCOUNT!r})"
        )


def executor_get() -> Executor:
    """This process's Executor, built from settings on first use (again after a fork).

    Raises BackendUnavailable with a message fit for the page when the sandbox cannot run.
    """
    global _built
    pid = os.getpid()
    built = _built
    if built is None or built[0] != pid:
        with _lock:
            if _built is None or _built[0] != pid:
                # A parent's Executor (we are its forked child) is left alone: its sandboxes,
                # pools and cgroups are the parent's to close.
                _built = (pid, _build())
            built = _built
    if isinstance(built[1], str):
        raise BackendUnavailable(built[1])
    return built[1]


def _build() -> Executor | str:
    try:
        _check_sandbox_uid(settings.EXECUTOR_SANDBOX_UID)
        caps = server_caps()
        return Executor.start(
            backend=settings.EXECUTOR_BACKEND, caps=caps, **_backend_options(caps)
        )
    except BackendUnavailable as exc:
        # Remember the refusal: a misconfigured host stays refused until restart, and every
        # page says why instead of retrying a slow self-check on each request.
        logger.error(
            "sandbox backend unavailable",
            extra={"backend": settings.EXECUTOR_BACKEND, "error": str(exc)},
        )
        return str(exc)


def executor_problem() -> str | None:
    """The backend's refusal message, or None when it is built (or not tried yet)."""
    built = _built
    if built is None or built[0] != os.getpid() or not isinstance(built[1], str):
        return None
    return built[1]


def executor_close() -> None:
    """Close this process's Executor, if it built one: its sandboxes, containers and cgroups go
    now, not at the next start's sweep. The next `executor_get()` builds another (tests that
    switch settings call this; so does the server as it stops)."""
    global _built
    with _lock:
        built, _built = _built, None
    if built is not None and built[0] == os.getpid() and not isinstance(built[1], str):
        built[1].close()


# Tests that switch settings say what they mean by it.
reset_executor = executor_close


def session_root() -> str:
    """This process's sessions folder: one per process, named by its pid."""
    return str(settings.UNDOABLE_VAR_DIR / "sessions" / str(os.getpid()))


def session_leftovers_remove() -> list[int]:
    """Remove the sessions folders of processes that died without closing their sessions (a
    SIGKILLed server): `UNDOABLE_VAR_DIR/sessions/<pid>` where no process has that pid any more,
    their quota mounts first. A pid taken again by another process keeps its folder (never wrong,
    only late). Returns the pids whose folders went."""
    removed: list[int] = []
    parent = settings.UNDOABLE_VAR_DIR / "sessions"
    for child in sorted(parent.iterdir()) if parent.is_dir() else []:
        if not child.name.isdigit() or child.is_symlink() or not child.is_dir():
            continue
        pid = int(child.name)
        if pid == os.getpid() or _process_exists(pid):
            continue
        try:
            session_root_remove(str(child))
        except (OSError, ExecutorError) as exc:
            logger.warning(
                "a dead process's sessions folder stays", extra={"pid": pid, "error": str(exc)}
            )
            continue
        removed.append(pid)
    if removed:
        logger.info("sessions folders of dead processes removed", extra={"pids": removed})
    return removed


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def session_config() -> SessionConfig:
    """Stateful agent sessions' sandbox settings (AGENTS_SESSION_* within the EXECUTOR_* caps).

    Fails closed exactly like stateless runs: no session starts on a backend that is refused.
    """
    caps = executor_get().caps
    return SessionConfig(
        root_dir=session_root(),
        limits=caps.narrowed(
            memory_mib=min(settings.AGENTS_SESSION_MEMORY_MIB, caps.memory_mib),
        ),
        idle_timeout_s=settings.AGENTS_SESSION_IDLE_S,
        max_lifetime_s=settings.AGENTS_SESSION_MAX_LIFETIME_S,
        workdir_quota_mib=settings.AGENTS_SESSION_WORKDIR_QUOTA_MIB,
    )
