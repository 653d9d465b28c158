"""Undoable's sandbox library: run untrusted code under hard limits and stream its output.

Plain Python, no Django, no process-global state. A program builds one Executor and passes it
on (the web app: webapp/executor_glue.py, once per process):

    from executor import Executor, Limits, RunSpec
    with Executor.start(backend="bwrap", caps=Limits(...), rootfs="/path/to/rootfs") as runner:
        limits = runner.caps.narrowed(wall_time_s=5)
        result = runner.run(RunSpec(code="print(1+1)"), limits=limits)

The kinds' types (workspaces, db targets, sessions) live in their modules (executor/kinds,
executor/sessions); the web app reaches them through webapp/executor_glue.py only.
"""

from __future__ import annotations

from executor.backends.base import Backend
from executor.cancel import CancelToken
from executor.core import Executor, create_backend
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
from executor.spec import RunSpec

__all__ = [
    "Backend",
    "BackendUnavailable",
    "CancelToken",
    "Executor",
    "ExecutorError",
    "InvalidLimits",
    "InvalidSpec",
    "Limits",
    "Mount",
    "NoCapacity",
    "OutputCallback",
    "OutputChunk",
    "RunResult",
    "RunSpec",
    "SandboxFailed",
    "create_backend",
]
