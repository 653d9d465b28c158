"""Where a session's sandbox runs: one starter per backend, chosen once by SessionConfig.backend.

The manager prepares the workspace (a host folder, a quota tmpfs where it may mount) and asks
its starter for a running REPL driver there; everything after (commands, replies, files, reaping)
is the same for both.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Protocol

from executor.errors import BackendUnavailable, ExecutorError
from executor.limits import Limits
from executor.linux import cgroups
from executor.policy.sandbox_policy import SANDBOX_UID
from executor.sessions.config import SessionConfig
from executor.sessions.sandbox import SessionChannel, SessionSandbox


class SessionStarter(Protocol):
    # The host uid the sandbox's program runs as: it owns the workspace and uploaded files.
    uid: int | None

    def start(
        self, *, session_id: str, workdir: str, limits: Limits, lifetime_s: float
    ) -> SessionChannel: ...

    def close(self) -> None: ...


class BwrapStarter:
    """Sessions in bwrap sandboxes (the default)."""

    def __init__(self, config: SessionConfig) -> None:
        self.rootfs = os.path.abspath(config.rootfs)
        self.uid = config.host_uid
        self._cgroup_parents = cgroups.available_parents() if config.use_cgroups else {}

    def start(
        self, *, session_id: str, workdir: str, limits: Limits, lifetime_s: float
    ) -> SessionChannel:
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
    """Sessions in Docker containers (EXECUTOR_BACKEND=docker); see executor/sessions/docker.py.

    Starting, it self-checks the engine and image, removes the containers of dead processes,
    and proves that a session container can use a workspace folder of this process (fail
    closed); closing, it removes every container it started.
    """

    def __init__(self, config: SessionConfig) -> None:
        # Imported here: the docker SDK is an optional dependency, needed only by this backend.
        from executor.backends.docker.backend import DockerBackend

        # A container has the image's user, the policy's in-sandbox uid, on the host too.
        self.uid: int | None = SANDBOX_UID
        self.backend = DockerBackend(
            image=config.docker_image,
            docker_url=config.docker_url,
            warm_pool_size=0,
            limits=config.limits,
            zygote=False,  # sessions get a container each
        )
        try:
            self.backend.self_check()
            self._check_workspaces(config.root_dir, config.limits)
        except BaseException:
            self.backend.close()
            raise

    def _check_workspaces(self, root_dir: str, limits: Limits) -> None:
        """The engine binds a workspace by its path on the engine's host, and the sandbox uid
        must write there: a remote engine, a server in a container of its own, or a server not
        running as root (it cannot give the folder to the uid) each break that."""
        os.makedirs(root_dir, mode=0o711, exist_ok=True)
        probe = tempfile.mkdtemp(prefix="docker-probe-", dir=os.path.realpath(root_dir))
        try:
            Path(probe, "from-host").write_text("host")
            if os.geteuid() == 0:
                os.chown(probe, self.uid or 0, self.uid or 0)
            code = "open('from-sandbox', 'w').write(open('from-host').read())"
            try:
                sandbox = self.start(
                    session_id="probe", workdir=probe, limits=limits, lifetime_s=30.0
                )
                try:
                    sandbox.send({"language": "python", "code": code, "timeout_s": 10.0})
                    sandbox.receive(deadline=time.monotonic() + 15.0)
                finally:
                    sandbox.kill()
                seen = Path(probe, "from-sandbox").read_text()
            except (ExecutorError, OSError) as exc:
                seen = f"nothing ({exc})"
            if seen != "host":
                raise BackendUnavailable(
                    "docker sessions need the Docker engine to bind this process's session "
                    f"folders ({root_dir}) and the server to run as root on the engine's host; "
                    f"a probe session read back {seen!r}. Run sessions with EXECUTOR_BACKEND="
                    "bwrap, or the server on the engine's host as root."
                )
        finally:
            shutil.rmtree(probe, ignore_errors=True)

    def start(
        self, *, session_id: str, workdir: str, limits: Limits, lifetime_s: float
    ) -> SessionChannel:
        from executor.sessions.docker import DockerSessionSandbox

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
