"""Where a session's sandbox runs: one starter per backend, chosen once by SessionConfig.backend.

The manager prepares the workspace (a host folder, a quota tmpfs where it may mount) and asks
its starter for a running REPL driver there; everything after (commands, replies, files, reaping)
is the same for both.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Protocol

from executor import cgroups
from executor.errors import BackendUnavailable
from executor.limits import Limits
from executor.session_sandbox import SessionChannel, SessionSandbox

if TYPE_CHECKING:
    from executor.sessions import SessionConfig


class SessionStarter(Protocol):
    # The host uid the sandbox's program runs as: it owns the workspace and uploaded files.
    uid: int | None

    def start(self, *, session_id: str, workdir: str, limits: Limits,
              lifetime_s: float) -> SessionChannel: ...  # fmt: skip

    def close(self) -> None: ...


class BwrapStarter:
    """Sessions in bwrap sandboxes (the default)."""

    def __init__(self, config: SessionConfig) -> None:
        self.rootfs = os.path.abspath(config.rootfs)
        self.uid = config.host_uid
        self._cgroup_parents = cgroups.available_parents() if config.use_cgroups else {}

    def start(self, *, session_id: str, workdir: str, limits: Limits,
              lifetime_s: float) -> SessionChannel:  # fmt: skip
        return SessionSandbox.start(
            rootfs=self.rootfs,
            workdir=workdir,
            limits=limits,
            lifetime_s=lifetime_s,
            host_uid=self.uid if os.geteuid() == 0 else None,
            cgroup_parents=self._cgroup_parents,
        )

    def close(self) -> None:
        pass


class DockerStarter:
    """Sessions in Docker containers (EXECUTOR_BACKEND=docker); see executor/session_docker.py.

    Starting, it self-checks the engine and image (fail closed) and removes the containers of
    dead processes; closing, it removes every container it started.
    """

    def __init__(self, config: SessionConfig) -> None:
        from executor.backends.docker import DockerBackend
        from executor.policy.docker_args import UID

        self.uid: int | None = UID
        self.backend = DockerBackend(
            image=config.docker_image,
            docker_url=config.docker_url,
            warm_pool_size=0,
            limits=config.limits,
        )
        try:
            self.backend.self_check()
        except BackendUnavailable:
            self.backend.close()
            raise

    def start(self, *, session_id: str, workdir: str, limits: Limits,
              lifetime_s: float) -> SessionChannel:  # fmt: skip
        from executor.session_docker import DockerSessionSandbox

        return DockerSessionSandbox.start(
            self.backend,
            session_id=session_id,
            workdir=workdir,
            limits=limits,
            lifetime_s=lifetime_s,
        )

    def close(self) -> None:
        self.backend.close()


def starter_for(config: SessionConfig) -> SessionStarter:
    if config.backend == "bwrap":
        return BwrapStarter(config)
    if config.backend == "docker":
        return DockerStarter(config)
    raise BackendUnavailable(f"unknown session backend {config.backend!r}; use bwrap or docker")
