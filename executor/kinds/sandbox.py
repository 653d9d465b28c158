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
_extra_args: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "undoable_extra_bwrap_args", default=()
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
    run_cold = getattr(backend, "_run_cold", None)
    if backend.name != "bwrap" or run_cold is None:
        raise BackendUnavailable(f"the {backend.name} backend cannot mount a workspace")
    _install_argv_hook()
    token = _extra_args.set(tuple(bwrap_mount_args(mounts)))
    try:
        result: RunResult = run_cold(spec, limits, on_output, cancel)
        return result
    finally:
        _extra_args.reset(token)


def _install_argv_hook() -> None:
    """Stopgap until BwrapBackend.run takes `mounts=`: wrap the argv builder once."""
    global _installed
    with _install_lock:
        if _installed:
            return
        from executor import bwrap_pool

        original = bwrap_pool.bwrap_argv

        def with_mounts(**kwargs: Any) -> list[str]:
            argv = original(**kwargs)
            extra = _extra_args.get()
            if not extra:
                return argv
            at = argv.index("--remount-ro")
            return [*argv[:at], *extra, *argv[at:]]

        bwrap_pool.bwrap_argv = with_mounts  # type: ignore[assignment]
        _installed = True
