"""Who the sandbox is on the host, for the kinds that hand it folders (executor/kinds/job.py).

The `fs` kind binds the run's private copy of the workspace over /workspace, and the `db` and
`rest` kinds bind a per-run control folder (unix sockets to host-side servers) at
/run/undoable. Which folders may be mounted, and where, is executor/policy/mounts.py; the
backend starts a fresh sandbox for every run with mounts (the bwrap backend; Docker refuses).
"""

from __future__ import annotations

from executor.backends.base import Backend
from executor.policy.mounts import CONTROL_DIR, Mount

__all__ = ["CONTROL_DIR", "Mount", "sandbox_host_uid"]


def sandbox_host_uid(backend: Backend) -> int | None:
    """The host uid the sandbox user maps to: files it must write are chowned to it."""
    uid = getattr(backend, "host_uid", None)
    return uid if isinstance(uid, int) else None
