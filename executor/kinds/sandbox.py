"""How the undoable kinds put host folders into a sandbox: extra bind mounts.

The `fs` and `db` kinds bind the run's private copy of the workspace over /workspace, and the
`db` and `rest` kinds bind a per-run control folder (unix sockets to host-side relays) at
/run/undoable. Everything else about the sandbox stays the backend's policy.

Backend hook: a backend whose `run()` accepts `mounts=` gets them as is (it must start a fresh
sandbox, not a pooled one, and add `bwrap_mount_args(mounts)` to its argv). Until BwrapBackend
has that keyword, `run_with_mounts` adds the arguments to a cold bwrap sandbox itself through
`executor.bwrap_pool.bwrap_argv`, scoped to the calling thread by a ContextVar.
"""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor.backends.base import Backend, OutputCallback
from executor.cancel import CancelToken
from executor.errors import BackendUnavailable, InvalidSpec
from executor.limits import Limits
from executor.result import RunResult
from executor.spec import RunSpec

CONTROL_DIR = "/run/undoable"  # where the per-run control folder appears inside the sandbox
_ALLOWED_DESTS = ("/workspace", CONTROL_DIR)
_mounts: contextvars.ContextVar[tuple[Mount, ...]] = contextvars.ContextVar(
    "undoable_mounts", default=()
)
_install_lock = threading.Lock()
_installed = False


@dataclass(frozen=True)
class Mount:
    host: Path
    dest: str  # "/workspace" or CONTROL_DIR: nothing else may be mounted
    writable: bool = False


def bwrap_mount_args(mounts: Sequence[Mount]) -> list[str]:
    """The bwrap arguments for `mounts`; put them after the policy's own tmpfs mounts."""
    args: list[str] = []
    for mount in mounts:
        if mount.dest not in _ALLOWED_DESTS:
            raise InvalidSpec(f"mount destination {mount.dest!r} is not allowed")
        if not os.path.isabs(mount.host) or not os.path.isdir(mount.host):
            raise InvalidSpec(f"mount source {mount.host} is not an existing absolute folder")
        if mount.dest == CONTROL_DIR:
            args += ["--tmpfs", "/run"]  # the read-only root has no /run/undoable to mount on
        args += ["--bind" if mount.writable else "--ro-bind", str(mount.host), mount.dest]
    return args


def sandbox_host_uid(backend: Backend) -> int | None:
    """The host uid the sandbox user maps to: files it must write are chowned to it."""
    uid = getattr(backend, "host_uid", None)
    return uid if isinstance(uid, int) else None


def run_with_mounts(
    backend: Backend,
    spec: RunSpec,
    *,
    limits: Limits,
    mounts: Sequence[Mount],
    on_output: OutputCallback | None = None,
    cancel: CancelToken | None = None,
) -> RunResult:
    """Run `spec` in a fresh sandbox with `mounts` added. The sandbox still has no network:
    "allowlist" traffic goes through the control folder's proxy socket, so the backend is
    asked for network="none"."""
    limits = dataclasses.replace(limits, network="none")
    if "mounts" in inspect.signature(backend.run).parameters:
        run: Any = backend.run
        return run(spec, limits=limits, mounts=tuple(mounts), on_output=on_output, cancel=cancel)
    token = push_mounts(backend, mounts)
    try:
        return backend.run(spec, limits=limits, on_output=on_output, cancel=cancel)
    finally:
        pop_mounts(token)


def push_mounts(backend: Backend, mounts: Sequence[Mount]) -> contextvars.Token:
    """Make the calling thread's next sandbox runs (through `backend.run`) carry `mounts`.

    For callers that cannot pass `mounts=` themselves (the web app's runner calls
    executor.run). Undo with pop_mounts(token) in the same thread.
    """
    if backend.name != "bwrap" or getattr(backend, "_run_cold", None) is None:
        raise BackendUnavailable(
            f"the {backend.name} backend cannot mount a workspace; use EXECUTOR_BACKEND=bwrap "
            "for the fs, db and rest kinds"
        )
    bwrap_mount_args(mounts)  # validate now, not inside the backend
    _install_hooks()
    return _mounts.set(tuple(mounts))


def pop_mounts(token: contextvars.Token) -> None:
    _mounts.reset(token)


def _install_hooks() -> None:
    """Stopgap until BwrapBackend.run takes `mounts=`: while a thread has mounts pushed, its
    runs skip the warm pool (pooled sandboxes were started without them) and the argv gets
    the extra bind arguments. Installed once; a no-op for threads without mounts."""
    global _installed
    with _install_lock:
        if _installed:
            return
        from executor import bwrap_pool
        from executor.backends.bwrap import BwrapBackend

        original_argv = bwrap_pool.bwrap_argv
        original_run = BwrapBackend.run

        def argv_with_mounts(**kwargs: Any) -> list[str]:
            argv = original_argv(**kwargs)
            mounts = _mounts.get()
            if not mounts:
                return argv
            at = argv.index("--remount-ro")
            return [*argv[:at], *bwrap_mount_args(mounts), *argv[at:]]

        def run_with_pushed_mounts(self: Any, spec: RunSpec, *, limits: Limits, **kw: Any) -> Any:
            if not _mounts.get():
                return original_run(self, spec, limits=limits, **kw)
            limits = dataclasses.replace(limits, network="none")
            return self._run_cold(spec, limits, kw.get("on_output"), kw.get("cancel"))

        bwrap_pool.bwrap_argv = argv_with_mounts  # type: ignore[assignment]
        BwrapBackend.run = run_with_pushed_mounts  # type: ignore[method-assign]
        _installed = True
