"""How the undoable kinds put host folders into a sandbox: extra bind mounts.

The `fs` and `db` kinds bind the run's private copy of the workspace over /workspace, and the
`db` and `rest` kinds bind a per-run control folder (unix sockets to host-side relays) at
/run/undoable. Which folders may be mounted, and where, is executor/policy/mounts.py; the
backend starts a fresh sandbox for every run with mounts (the bwrap backend; Docker refuses).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from executor.backends.base import Backend, OutputCallback
from executor.cancel import CancelToken
from executor.limits import Limits
from executor.policy.mounts import CONTROL_DIR, Mount
from executor.result import RunResult
from executor.spec import RunSpec

__all__ = ["CONTROL_DIR", "Mount", "run_with_mounts", "sandbox_host_uid"]


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
    return backend.run(
        spec,
        limits=dataclasses.replace(limits, network="none"),
        on_output=on_output,
        cancel=cancel,
        mounts=tuple(mounts),
    )
