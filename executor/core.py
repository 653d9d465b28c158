"""The Executor: one backend with the server's caps, and everything that runs on it.

Whoever uses the library builds one and passes it on (the web app: webapp/executor_glue.py, once
per process); nothing here is process-global. The kinds' lifecycles and the sessions are
imported on first use, so that `import executor` stays cheap for a process that never runs code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executor.backends.base import Backend
from executor.cancel import CancelToken
from executor.errors import BackendUnavailable
from executor.limits import Limits
from executor.policy.mounts import Mount
from executor.result import OutputCallback, RunResult
from executor.spec import RunSpec

if TYPE_CHECKING:
    from executor.kinds.db import DbJob
    from executor.kinds.db import Target as DbTarget
    from executor.kinds.egress import RestJob
    from executor.kinds.fs import FsJob, FsWorkspace
    from executor.kinds.job import Job
    from executor.kinds.rehearsal import Rehearsal, ReverseFor
    from executor.sessions.config import SessionConfig
    from executor.sessions.manager import SessionManager

__all__ = ["Executor", "create_backend"]


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


class Executor:
    """A backend and the server-side caps that every run narrows.

    Build it with `Executor.start(backend="bwrap", caps=..., **options)` (raises
    BackendUnavailable when the backend cannot run safely) or around a backend already built;
    `close()`, or leaving its `with` block, removes what the backend holds (sandboxes,
    containers, cgroups).
    """

    def __init__(self, backend: Backend, *, caps: Limits | None = None) -> None:
        self.backend = backend
        self.caps = caps if caps is not None else Limits()

    @classmethod
    def start(cls, *, backend: str, caps: Limits | None = None, **options: Any) -> Executor:
        """Build and self-check the backend named `backend` with `options` (its constructor's)."""
        return cls(create_backend(backend, **options), caps=caps)

    def close(self) -> None:
        """What the backend holds goes. For an orderly exit; what a killed process leaves, the
        next backend's start removes."""
        self.backend.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def run(
        self,
        spec: RunSpec,
        *,
        limits: Limits | None = None,
        on_output: OutputCallback | None = None,
        cancel: CancelToken | None = None,
        mounts: Sequence[Mount] = (),
    ) -> RunResult:
        """Run `spec` in a fresh sandbox and return its result.

        `limits` defaults to the caps. `on_output` gets OutputChunks in order while the program
        runs. The user program's failures (non-zero exit, timeout, OOM, too much output) are
        RunResult fields; infrastructure problems raise ExecutorError subclasses. `mounts` bind
        host folders at /workspace or /run/undoable (executor/policy/mounts.py; the undoable
        kinds use them); only the bwrap backend can.
        """
        return self.backend.run(
            spec,
            limits=limits or self.caps,
            on_output=on_output,
            cancel=cancel,
            mounts=tuple(mounts),
        )

    def run_job(self, job: Job) -> RunResult:
        """Run a kind's prepared job (its spec, limits and mounts) without streaming."""
        return self.run(job.spec, limits=job.limits, mounts=job.mounts)

    @property
    def sandbox_host_uid(self) -> int | None:
        """The host uid the sandbox user maps to (None: this process's): it owns what the
        kinds hand the sandbox."""
        from executor.kinds.sandbox import sandbox_host_uid

        return sandbox_host_uid(self.backend)

    def session_manager(
        self, config: SessionConfig, *, on_close: Callable[[str, str], None] | None = None
    ) -> SessionManager:
        """A manager of stateful sessions with `config` (the caller keeps it and shuts it
        down); `on_close(session_id, reason)` hears of each session's end."""
        from executor.sessions.manager import SessionManager

        return SessionManager(config, self.backend, on_close=on_close)

    # The kinds' lifecycles (executor/kinds), with this executor's sandbox uid.

    def fs_prepared(
        self,
        spec: RunSpec,
        *,
        limits: Limits,
        workspace: FsWorkspace,
        run_id: str,
        quota_bytes: int | None = None,
    ) -> contextlib.AbstractContextManager[FsJob]:
        """executor.kinds.fs.prepared: the job that runs `spec` on a copy of `workspace`."""
        from executor.kinds import fs

        return fs.prepared(
            spec,
            limits=limits,
            workspace=workspace,
            run_id=run_id,
            uid=self.sandbox_host_uid,
            quota_bytes=quota_bytes,
        )

    def egress_prepared(
        self, spec: RunSpec, *, limits: Limits, control_base: Path, allow_private: bool = False
    ) -> contextlib.AbstractContextManager[RestJob]:
        """executor.kinds.egress.prepared: a rest-kind run behind its proxy."""
        from executor.kinds import egress

        return egress.prepared(
            spec,
            limits=limits,
            control_base=control_base,
            uid=self.sandbox_host_uid,
            allow_private=allow_private,
        )

    def db_prepared(
        self, spec: RunSpec, **options: Any
    ) -> contextlib.AbstractContextManager[DbJob]:
        """executor.kinds.db.prepared with `options` (limits, target, control_base, run_id,
        owner_uid, ...): the statements of `spec` through the host's broker."""
        from executor.kinds import db

        return db.prepared(spec, **options)

    def rehearse_fs(
        self,
        forward: RunSpec,
        reverse_for: ReverseFor,
        *,
        limits: Limits,
        workspace: FsWorkspace,
        scratch: Path,
        quota_bytes: int | None = None,
    ) -> Rehearsal:
        """executor.kinds.rehearsal.rehearse_fs, run on this executor."""
        from executor.kinds import rehearsal

        return rehearsal.rehearse_fs(
            forward,
            reverse_for,
            limits=limits,
            workspace=workspace,
            scratch=scratch,
            uid=self.sandbox_host_uid,
            run=self.run_job,
            quota_bytes=quota_bytes,
        )

    def rehearse_db(
        self,
        forward: RunSpec,
        reverse_for: ReverseFor,
        *,
        limits: Limits,
        target: DbTarget,
        control_base: Path,
        run_id: str,
        **options: Any,
    ) -> Rehearsal:
        """executor.kinds.rehearsal.rehearse_db, run on this executor; `options` go to
        db.prepared."""
        from executor.kinds import rehearsal

        return rehearsal.rehearse_db(
            forward,
            reverse_for,
            limits=limits,
            target=target,
            control_base=control_base,
            run_id=run_id,
            run=self.run_job,
            **options,
        )
