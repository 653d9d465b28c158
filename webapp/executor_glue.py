"""The one place the web app configures the executor from settings.

Everything else calls `ensure_executor()` (configures once per process, lazily, so a web process
that never runs code never starts a sandbox pool) and `run_limits()` for the caps. A backend that
cannot run safely fails closed: `ensure_executor()` raises BackendUnavailable with the backend's
own message, and the pages show that message instead of running anything.
"""

from __future__ import annotations

import logging
import os
import pwd
import threading

from django.conf import settings

import executor

# What newer apps (webapp.actions) need of the executor, reached through here only (the
# import-linter contract "new apps reach the executor through executor_glue").
from executor import (
    Backend,
    BackendUnavailable,
    InvalidSpec,
    Limits,
    NothingPending,
    SessionConfig,
    WorkspaceBusy,
    validate_relative_path,
)

__all__ = [
    "InvalidSpec",
    "NothingPending",
    "WorkspaceBusy",
    "ensure_executor",
    "executor_problem",
    "reset_executor",
    "server_caps",
    "session_config",
    "session_leftovers_remove",
    "session_root",
    "validate_relative_path",
]

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_configured_pid: int | None = None
_failure: str | None = None
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


def ensure_executor() -> Backend:
    """Configure the executor once per process (again after a fork) and return the backend.

    Raises BackendUnavailable with a message fit for the page when the sandbox cannot run.
    """
    global _configured_pid, _failure
    pid = os.getpid()
    if _configured_pid == pid:
        if _failure is not None:
            raise BackendUnavailable(_failure)
        return executor.get_backend()
    with _lock:
        if _configured_pid != pid:
            try:
                _check_sandbox_uid(settings.EXECUTOR_SANDBOX_UID)
                caps = server_caps()
                executor.configure(
                    backend=settings.EXECUTOR_BACKEND, caps=caps, **_backend_options(caps)
                )
                _failure = None
            except BackendUnavailable as exc:
                # Remember the refusal: a misconfigured host stays refused until restart, and
                # every page says why instead of retrying a slow self-check on each request.
                _failure = str(exc)
                logger.error(
                    "sandbox backend unavailable",
                    extra={"backend": settings.EXECUTOR_BACKEND, "error": _failure},
                )
            _configured_pid = pid
    if _failure is not None:
        raise BackendUnavailable(_failure)
    return executor.get_backend()


def executor_problem() -> str | None:
    """The backend's refusal message, or None when it is configured (or not tried yet)."""
    return _failure if _configured_pid == os.getpid() else None


def reset_executor() -> None:
    """Forget the configuration (tests that switch settings call this)."""
    global _configured_pid, _failure
    with _lock:
        _configured_pid = None
        _failure = None


def executor_close() -> None:
    """The server is stopping: its backend's sandboxes, containers and cgroups go now, not at
    the next start's sweep."""
    executor.close()


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
            executor.session_root_remove(str(child))
        except (OSError, executor.ExecutorError) as exc:
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
    ensure_executor()
    caps = executor.caps()
    return SessionConfig(
        root_dir=session_root(),
        limits=caps.narrowed(
            memory_mib=min(settings.AGENTS_SESSION_MEMORY_MIB, caps.memory_mib),
        ),
        idle_timeout_s=settings.AGENTS_SESSION_IDLE_S,
        max_lifetime_s=settings.AGENTS_SESSION_MAX_LIFETIME_S,
        workdir_quota_mib=settings.AGENTS_SESSION_WORKDIR_QUOTA_MIB,
    )
