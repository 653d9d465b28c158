"""Undoable's sandbox library: run untrusted code under hard limits and stream its output.

Plain Python, no Django. The web app configures it once (webapp/executor_glue.py):

    import executor
    executor.configure(backend="bwrap", caps=Limits(...), rootfs="/path/to/rootfs")
    limits = executor.caps().narrowed(wall_time_s=5)
    result = executor.run(RunSpec(code="print(1+1)"), limits=limits)
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from executor.backends.base import Backend, OutputCallback
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
from executor.result import OutputChunk, RunResult
from executor.spec import RunSpec
from executor.stops import limit_line

__all__ = [
    "Backend",
    "BackendUnavailable",
    "CancelToken",
    "ExecutorError",
    "InvalidLimits",
    "InvalidSpec",
    "Limits",
    "NoCapacity",
    "OutputCallback",
    "OutputChunk",
    "RunResult",
    "RunSpec",
    "SandboxFailed",
    "caps",
    "configure",
    "create_backend",
    "get_backend",
    "limit_line",
    "run",
]

_lock = threading.Lock()
_backend: Backend | None = None
_caps = Limits()


def create_backend(name: str, **options: Any) -> Backend:
    """Build a backend by name ("bwrap" or "docker") and self-check it (fail closed)."""
    backend: Backend
    if name == "bwrap":
        from executor.backends.bwrap import BwrapBackend

        backend = BwrapBackend(**options)
    elif name == "docker":
        from executor.backends.docker import DockerBackend

        backend = DockerBackend(**options)
    else:
        raise BackendUnavailable(f"unknown executor backend {name!r}; use 'bwrap' or 'docker'")
    backend.self_check()
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
