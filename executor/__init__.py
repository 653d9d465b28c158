"""Undoable's sandbox library: run untrusted code under hard limits and stream its output.

Plain Python, no Django. The web app configures it once (webapp/executor_glue.py):

    import executor
    executor.configure(backend="bwrap", caps=Limits(...), rootfs="/path/to/rootfs")
    limits = executor.caps().narrowed(wall_time_s=5)
    result = executor.run(RunSpec(code="print(1+1)"), limits=limits)
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from executor.backends.base import Backend
from executor.cancel import CancelToken
from executor.errors import (
    BackendUnavailable,
    ExecutorError,
    InvalidLimits,
    InvalidSpec,
    NoCapacity,
    SandboxFailed,
)
from executor.limits import Limits
from executor.policy.mounts import Mount
from executor.result import OutputCallback, OutputChunk, RunResult
from executor.spec import RunSpec, validate_relative_path
from executor.stops import limit_line

if TYPE_CHECKING:
    from executor.images import OUTPUT_ENV, Image
    from executor.kinds.db import PendingDb, PostgresTarget, ServerTarget, SqliteTarget
    from executor.kinds.db import Target as DbTarget
    from executor.kinds.db import prepared as db_prepared
    from executor.kinds.db_broker import StatementLog
    from executor.kinds.db_slots import DbCaps
    from executor.kinds.egress import prepared as egress_prepared
    from executor.kinds.egress import with_forward_output
    from executor.kinds.errors import NothingPending, WorkspaceBusy
    from executor.kinds.fs import FsWorkspace, Reservation
    from executor.kinds.fs import prepared as fs_prepared
    from executor.kinds.fs_tree import kept_mode
    from executor.kinds.fs_walk import DIR_FLAGS, open_regular, parent_of, remove_at, remove_tree
    from executor.kinds.rehearsal import Rehearsal, rehearse_db, rehearse_fs
    from executor.kinds.reverse_check import fs_reverse_check
    from executor.kinds.sandbox import sandbox_host_uid
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

# What the web app needs beyond the core, imported on first use (`executor.<name>`) so that
# `import executor` stays cheap: name -> (module, name there).
_LAZY: dict[str, tuple[str, str]] = {
    "DIR_FLAGS": ("executor.kinds.fs_walk", "DIR_FLAGS"),
    "DbTarget": ("executor.kinds.db", "Target"),
    "DbCaps": ("executor.kinds.db_slots", "DbCaps"),
    "FileMissing": ("executor.sessions.files", "FileMissing"),
    "FsWorkspace": ("executor.kinds.fs", "FsWorkspace"),
    "Image": ("executor.images", "Image"),
    "NothingPending": ("executor.kinds.errors", "NothingPending"),
    "OUTPUT_ENV": ("executor.images", "OUTPUT_ENV"),
    "PendingDb": ("executor.kinds.db", "PendingDb"),
    "PostgresTarget": ("executor.kinds.db", "PostgresTarget"),
    "Rehearsal": ("executor.kinds.rehearsal", "Rehearsal"),
    "ServerTarget": ("executor.kinds.db", "ServerTarget"),
    "Reservation": ("executor.kinds.fs", "Reservation"),
    "Session": ("executor.sessions.manager", "Session"),
    "SessionBusy": ("executor.sessions.manager", "SessionBusy"),
    "SessionConfig": ("executor.sessions.config", "SessionConfig"),
    "SessionManager": ("executor.sessions.manager", "SessionManager"),
    "SessionNotFound": ("executor.sessions.manager", "SessionNotFound"),
    "session_root_remove": ("executor.sessions.manager", "session_root_remove"),
    "SqliteTarget": ("executor.kinds.db", "SqliteTarget"),
    "StatementLog": ("executor.kinds.db_broker", "StatementLog"),
    "UndoCheck": ("executor.kinds.undo_check", "UndoCheck"),
    "fs_reverse_check": ("executor.kinds.reverse_check", "fs_reverse_check"),
    "WorkspaceBusy": ("executor.kinds.errors", "WorkspaceBusy"),
    "db_prepared": ("executor.kinds.db", "prepared"),
    "egress_prepared": ("executor.kinds.egress", "prepared"),
    "fs_prepared": ("executor.kinds.fs", "prepared"),
    "kept_mode": ("executor.kinds.fs_tree", "kept_mode"),
    "open_regular": ("executor.kinds.fs_walk", "open_regular"),
    "parent_of": ("executor.kinds.fs_walk", "parent_of"),
    "quota_unmount": ("executor.quota", "unmount"),
    "rehearse_db": ("executor.kinds.rehearsal", "rehearse_db"),
    "rehearse_fs": ("executor.kinds.rehearsal", "rehearse_fs"),
    "remove_at": ("executor.kinds.fs_walk", "remove_at"),
    "remove_tree": ("executor.kinds.fs_walk", "remove_tree"),
    "sandbox_host_uid": ("executor.kinds.sandbox", "sandbox_host_uid"),
    "with_forward_output": ("executor.kinds.egress", "with_forward_output"),
}

__all__ = [
    "DIR_FLAGS",
    "OUTPUT_ENV",
    "Backend",
    "BackendUnavailable",
    "CancelToken",
    "DbCaps",
    "DbTarget",
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
    "OutputCallback",
    "OutputChunk",
    "PendingDb",
    "PostgresTarget",
    "Rehearsal",
    "Reservation",
    "RunResult",
    "RunSpec",
    "SandboxFailed",
    "Session",
    "SessionBusy",
    "SessionConfig",
    "SessionManager",
    "SessionNotFound",
    "ServerTarget",
    "SqliteTarget",
    "StatementLog",
    "UndoCheck",
    "WorkspaceBusy",
    "caps",
    "close",
    "configure",
    "create_backend",
    "db_prepared",
    "egress_prepared",
    "fs_prepared",
    "fs_reverse_check",
    "get_backend",
    "kept_mode",
    "limit_line",
    "open_regular",
    "parent_of",
    "quota_unmount",
    "rehearse_db",
    "rehearse_fs",
    "remove_at",
    "remove_tree",
    "run",
    "sandbox_host_uid",
    "session_root_remove",
    "validate_relative_path",
    "with_forward_output",
]


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'executor' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


_lock = threading.Lock()
_backend: Backend | None = None
_caps = Limits()


def create_backend(name: str, **options: Any) -> Backend:
    """Build a backend by name ("bwrap" or "docker") and self-check it (fail closed)."""
    backend: Backend
    if name == "bwrap":
        from executor.backends.bwrap.backend import BwrapBackend

        backend = BwrapBackend(**options)
    elif name == "docker":
        from executor.backends.docker.backend import DockerBackend

        backend = DockerBackend(**options)
    else:
        raise BackendUnavailable(f"unknown executor backend {name!r}; use 'bwrap' or 'docker'")
    try:
        backend.self_check()
    except BaseException:
        backend.close()  # what it made before failing (its cgroups, a container) goes too
        raise
    return backend


def configure(*, backend: str, caps: Limits | None = None, **options: Any) -> Backend:
    """Select the process-wide backend. Raises BackendUnavailable if it cannot run safely."""
    global _backend, _caps
    new = create_backend(backend, **options)
    with _lock:
        old, _backend = _backend, new
        if caps is not None:
            _caps = caps
    if old is not None:
        old.close()
    return new


def close() -> None:
    """Close the process-wide backend, if any (`configure()` selects another): what it holds
    (sandboxes, containers, cgroups) goes. For an orderly exit; what a killed process leaves, the
    next backend's start removes."""
    global _backend
    with _lock:
        old, _backend = _backend, None
    if old is not None:
        old.close()


def get_backend() -> Backend:
    if _backend is None:
        raise BackendUnavailable("executor is not configured; call executor.configure() first")
    return _backend


def caps() -> Limits:
    """The server-side caps; requests narrow them with `caps().narrowed(...)`."""
    return _caps


def run(
    spec: RunSpec,
    *,
    limits: Limits | None = None,
    on_output: OutputCallback | None = None,
    cancel: CancelToken | None = None,
    mounts: Sequence[Mount] = (),
) -> RunResult:
    """Run `spec` in a fresh sandbox and return its result.

    `on_output` gets OutputChunks in order while the program runs. The user program's failures
    (non-zero exit, timeout, OOM, too much output) are RunResult fields; infrastructure problems
    raise ExecutorError subclasses. `mounts` bind host folders at /workspace or /run/undoable
    (executor/policy/mounts.py; the undoable kinds use them); only the bwrap backend can.
    """
    return get_backend().run(
        spec, limits=limits or _caps, on_output=on_output, cancel=cancel, mounts=tuple(mounts)
    )
