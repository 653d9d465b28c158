"""The Docker backend: stateless runs forked from a template in a container, or each run in a
single-use container of its own, started ahead of time.

Where the host allows it (an engine on this machine, root for the runs' cgroups), stateless runs
are forked from the zygote's template hosted in one container (forked.py, template.py): the
bwrap backend's zygote, in Docker's isolation. Sessions, and every run when that is not
available, get a container each.

A run in a container takes a started one from the warm pool (or starts one), sends the run
message on the attached stdin, streams the framed output back, and removes the container. The
policy (what makes a container a sandbox) is executor/policy/docker_args.py; the in-container
supervisor is driver.py; the bytes between them are wire.py.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import docker

from executor.backends.docker.forked import ForkedRuns
from executor.backends.docker.pool import Remover, SandboxContainer, WarmPool
from executor.backends.docker.session import DockerSession
from executor.backends.docker.session_container import DockerSessionContainer
from executor.backends.docker.wire import MAX_CODE_BYTES, READY, encode_message
from executor.cancel import CancelToken
from executor.errors import BackendUnavailable, InvalidSpec, SandboxFailed
from executor.limits import Limits
from executor.linux.uids import SANDBOX_UID
from executor.policy import wire
from executor.policy.docker_args import (
    SANDBOX_LABEL,
    check_network,
    container_create_kwargs,
    pool_key,
)
from executor.policy.mounts import Mount
from executor.policy.sandbox_policy import SANDBOX_UID as IMAGE_UID
from executor.policy.sandbox_policy import SandboxPolicy
from executor.policy.seccomp import seccomp_bpf
from executor.result import OutputCallback, RunResult
from executor.spec import RunSpec

logger = logging.getLogger(__name__)

DRIVER_SOURCE = (Path(__file__).parent / "driver.py").read_text()
OWNER_LABEL = "undoable.owner"  # the process that started it (owner_id(); for reaping)
INSTANCE_LABEL = "undoable.backend"
START_TIMEOUT_S = 20.0


class DockerBackend:
    """Runs each program in a fresh, locked-down container; see docker_args for the policy."""

    name = "docker"
    # A session's container has the image's user, the policy's in-sandbox uid, on the host too
    # (no user namespace): that uid owns its workspace.
    session_uid: int | None = IMAGE_UID

    def __init__(
        self,
        image: str = "undoable-sandbox:latest",
        warm_pool_size: int = 2,
        docker_url: str | None = None,
        limits: Limits | None = None,
        remove_sync: bool = False,
        zygote: bool = True,
        host_uid: int = SANDBOX_UID,
    ) -> None:
        """`limits`: what pooled containers are created for (memory, pids, quotas).

        `zygote`: fork stateless runs from a template in a container where the host allows
        it (forked.py); False: a container for every run. `host_uid`: the host uid the
        template and its runs have (a container per run has the image's user).

        `remove_sync`: wait for Docker to remove the container before `run` returns. By
        default the run returns once its processes are dead and the removal (Docker's
        ~50-100 ms teardown) finishes in the background; `settle()` waits for it.
        """
        self.image = image
        self.instance_id = uuid.uuid4().hex[:16]
        self._docker_url = docker_url
        self._warm_pool_size = warm_pool_size
        # Pooled containers are created for these limits; a run whose creation-time limits
        # differ (see pool_key) gets a container started just for it.
        self._pool_limits = limits or Limits()
        self._local = threading.local()
        self._pool: WarmPool | None = None
        self._lock = threading.Lock()
        self._remove_sync = remove_sync
        self._closed = False
        self._remover = Remover(self._remove)
        self._labels = {INSTANCE_LABEL: self.instance_id, OWNER_LABEL: owner_id()}
        self._use_zygote = zygote
        self.host_uid = host_uid
        self._forked: ForkedRuns | None = None
        # Whether a client ever connected: a backend that never did has nothing to remove.
        self._reached_engine = False
        # The forked runs' cgroups (leak checks read this; none without them).
        self.cgroup_parents: dict[str, str] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def self_check(self) -> None:
        """Fail closed unless the engine answers, enforces seccomp, and has the image."""
        try:
            api = self._api()
            api.ping()
            info = api.info()
        except docker.errors.DockerException as exc:
            raise BackendUnavailable(
                f"Docker engine unreachable ({self._docker_url or 'DOCKER_HOST/default socket'}):"
                f" {exc}. Start dockerd or fix the docker URL."
            ) from exc
        if not any("seccomp" in option for option in info.get("SecurityOptions") or []):
            raise BackendUnavailable("the Docker engine has no seccomp support; refusing to run")
        try:
            api.inspect_image(self.image)
        except docker.errors.ImageNotFound as exc:
            raise BackendUnavailable(
                f"sandbox image {self.image} is missing: run `make sandbox-image`"
            ) from exc
        self.reap_stale()
        try:
            probe = self._run_in(
                self._start(self._pool_limits), RunSpec(code="print(1+1)"), limits=self._pool_limits
            )
        except SandboxFailed as exc:
            raise BackendUnavailable(f"a sandbox container does not start: {exc}") from exc
        if probe.stdout != "2\n" or probe.exit_code != 0:
            raise BackendUnavailable(f"the sandbox image does not run Python: {probe!r}")
        if self._use_zygote and self._forked is None:
            self._forked = ForkedRuns.start(
                client=self._client,
                image=self.image,
                uid=self.host_uid,
                labels=self._labels,
                pool_limits=self._pool_limits,
                warm_pool_size=self._warm_pool_size,
            )
            if self._forked is not None:
                self.cgroup_parents = self._forked.cgroup_parents
        self._ensure_pool()

    @property
    def forked_runs(self) -> int:
        """How many runs were forked from the template (benchmarks and tests read this)."""
        return self._forked.runs if self._forked is not None else 0

    def close(self) -> None:
        """Stop the pool and remove every container this backend instance started."""
        with self._lock:
            pool, self._pool = self._pool, None
            forked, self._forked = self._forked, None
            self._closed = True
        if pool is not None:
            pool.close()
        if forked is not None:
            forked.close()
        self._remover.close()
        if not self._reached_engine:
            return  # it started nothing there (and there may be no engine to ask)
        for container in self._list({INSTANCE_LABEL: self.instance_id}):
            self._remove(container["Id"])

    def reap_stale(self) -> int:
        """Remove sandbox containers left behind by dead processes; return how many.

        Containers end on their own when their owner's socket closes (StdinOnce, see
        docker_args); this catches what that misses (a create whose owner died before attaching,
        an engine that kept a container). Only owners this process can judge are judged: same
        boot, same pid namespace (another worker's container is none of our business).
        """
        removed = 0
        for container in self._list({}):
            owner = container.get("Labels", {}).get(OWNER_LABEL, "")
            stale = owner_dead(owner)
            if stale or (container.get("State") != "running" and _age_s(container) > 300):
                logger.info("removing a stale sandbox container", extra={"owner": owner})
                self._remove(container["Id"])
                removed += 1
        return removed

    def settle(self, timeout: float = 30.0) -> bool:
        """Wait until every used container has been removed; False on timeout."""
        return self._remover.settle(timeout)

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Block until every forked run is torn down; False if `timeout_s` passed first."""
        forked = self._forked
        return forked.wait_idle(timeout_s) if forked is not None else True

    def template_pids(self) -> set[int]:
        """The template's processes (none without it): the backend's own, alive until
        `close()`, never a run's. Leak checks leave them out."""
        forked = self._forked
        return forked.template_pids() if forked is not None else set()

    def warm_container_ids(self) -> list[str]:
        """Ids of the started containers waiting in the pool (for tests and diagnostics)."""
        return self._pool.ready_ids() if self._pool is not None else []

    def wait_warm(self, timeout: float = 30.0) -> bool:
        """Wait until the warm pool is full; for benchmarks and tests of warm runs."""
        if self._forked is not None:
            return self._forked.wait_warm(timeout)
        pool = self._ensure_pool()
        return pool.wait_ready(timeout) if pool is not None else True

    # -- running -----------------------------------------------------------------------------

    def run(
        self,
        spec: RunSpec,
        *,
        limits: Limits,
        on_output: OutputCallback | None = None,
        cancel: CancelToken | None = None,
        mounts: Sequence[Mount] = (),
    ) -> RunResult:
        """Run `spec` in a container of its own, used for this run only.

        When this returns, every process of the run is dead; the container itself is removed
        before returning with `remove_sync`, else right after (`settle()` waits for that).
        """
        if mounts:
            raise BackendUnavailable(
                "the docker backend cannot mount a workspace; use EXECUTOR_BACKEND=bwrap "
                "for the fs, db and rest kinds"
            )
        if spec.language == "bash" and len(spec.code.encode()) > MAX_CODE_BYTES:
            raise InvalidSpec(f"a bash program is limited to {MAX_CODE_BYTES} bytes")
        check_network(limits)  # before a forked run, which has none either way
        forked = self._forked
        if forked is not None:
            result = forked.run(spec, limits, on_output, cancel)
            if result is not None:
                return result
        return self._run_in(self._acquire(limits), spec, limits, on_output, cancel)

    def _run_in(
        self,
        container: SandboxContainer,
        spec: RunSpec,
        limits: Limits,
        on_output: OutputCallback | None = None,
        cancel: CancelToken | None = None,
    ) -> RunResult:
        try:
            return DockerSession(self, container, limits, on_output, cancel).run(
                encode_message(spec, limits)
            )
        finally:
            container.close()
            if self._remove_sync:
                self._remove(container.id)
            else:
                self._remover.submit(container.id)

    def _acquire(self, limits: Limits) -> SandboxContainer:
        pool = self._ensure_pool()
        if pool is None:
            return self._start(limits)
        if pool_key(limits) == pool_key(self._pool_limits):
            container = pool.take(START_TIMEOUT_S)
            if container is not None:
                return container
        with pool.live():  # the pool's refills wait for this start
            return self._start(limits)

    def _ensure_pool(self) -> WarmPool | None:
        with self._lock:
            if self._closed:
                raise BackendUnavailable("this docker backend has been closed")
            # With forked runs, containers are for the odd run the template could not take:
            # none are kept waiting.
            if self._pool is None and self._warm_pool_size > 0 and self._forked is None:
                self._pool = WarmPool(
                    size=self._warm_pool_size,
                    start=lambda: self._start(self._pool_limits),
                    discard=self._discard,
                )
            return self._pool

    def _discard(self, container: SandboxContainer) -> None:
        container.close()
        self._remove(container.id)

    def open_session(
        self, *, session_id: str, workdir: str, limits: Limits, lifetime_s: float
    ) -> DockerSessionContainer:
        """A session in a container of its own (session_container.py), labelled with its id,
        `workdir` bound at /workspace; see Backend.open_session. It ends when our attached
        socket closes, and `close()` removes it with this backend's other containers."""
        if self._closed:
            raise BackendUnavailable("this docker backend has been closed")
        return DockerSessionContainer.start(
            self,
            session_id=session_id,
            workdir=workdir,
            limits=limits,
            lifetime_s=lifetime_s,
        )

    def start_session(
        self, *, workspace: str, limits: Limits, session: dict[str, Any], labels: dict[str, str]
    ) -> SandboxContainer:
        """Start a session's container: the supervisor in session mode (driver.py) with
        `workspace` bound at /workspace. `session`: the driver source, its config, env and
        lifetime. The caller owns the container: `remove()` it when the session ends."""
        return self._start(
            limits, session=session, workspace=workspace, labels={**self._labels, **labels}
        )

    def remove(self, container_id: str) -> None:
        """Kill and remove a container now (a session's, when it ends)."""
        self._remove(container_id)

    def _start(
        self,
        limits: Limits,
        *,
        session: dict[str, Any] | None = None,
        workspace: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> SandboxContainer:
        # The shared seccomp deny list (executor/policy/seccomp.py), stacked by the supervisor
        # on Docker's default profile before the program's interpreter starts.
        bpf = base64.b64encode(seccomp_bpf()).decode()
        # Its second argument is the program's (and a session's cells') supervisor, the same
        # one a bwrap sandbox runs (executor/policy/supervisor.py).
        command = ["python3", "-I", "-S", "-c", DRIVER_SOURCE, bpf, wire.supervisor_source()]
        if session is not None:
            command.append(json.dumps(session))
        policy = SandboxPolicy.of(limits, workspace=None if workspace is None else Path(workspace))
        kwargs = container_create_kwargs(
            policy, image=self.image, command=command, labels=labels or self._labels
        )
        try:
            created = self._client().containers.create(**kwargs)
        except docker.errors.DockerException as exc:
            raise SandboxFailed(f"cannot create a sandbox container: {exc}") from exc
        try:
            api = self._api()
            # Attach before start so not one byte of output can be missed.
            handle = api.attach_socket(
                created.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            api.start(created.id)
            container = SandboxContainer(
                id=created.id, sock=getattr(handle, "_sock", handle), handle=handle
            )
            _await_ready(container)
        except (docker.errors.DockerException, OSError, SandboxFailed) as exc:
            self._remove(created.id)
            raise SandboxFailed(f"cannot start a sandbox container: {exc}") from exc
        return container

    def kill(self, container_id: str) -> None:
        try:
            self._api().kill(container_id)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:  # 409: already stopped
            logger.info("kill of a sandbox container failed", extra={"error": str(exc)})

    def inspect_state(self, container_id: str) -> dict[str, Any]:
        try:
            return self._api().inspect_container(container_id).get("State", {})
        except docker.errors.NotFound:
            return {}

    def _remove(self, container_id: str) -> None:
        api = self._api()
        try:
            api.remove_container(container_id, force=True)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: auto-remove is already under way
                raise SandboxFailed(f"cannot remove sandbox container: {exc}") from exc
        try:
            api.wait(container_id, timeout=30, condition="removed")
        except docker.errors.NotFound:
            pass
        except (docker.errors.DockerException, OSError) as exc:
            raise SandboxFailed(f"sandbox container was not removed: {exc}") from exc

    def _list(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        wanted = [f"{SANDBOX_LABEL}=1", *(f"{k}={v}" for k, v in labels.items())]
        return self._api().containers(all=True, filters={"label": wanted})

    def _client(self) -> docker.DockerClient:
        # One client per thread: requests sessions are not meant to be shared across threads.
        client = getattr(self._local, "client", None)
        if client is None:
            if self._docker_url:
                client = docker.DockerClient(base_url=self._docker_url)
            else:
                client = docker.from_env()
            self._local.client = client
            self._reached_engine = True
        return client

    def _api(self) -> Any:
        return self._client().api


def _await_ready(container: SandboxContainer) -> None:
    """Read the supervisor's ready frame, the first thing it writes once it is up."""
    deadline = time.monotonic() + START_TIMEOUT_S
    got = b""
    while len(got) < len(READY) and got == READY[: len(got)]:
        if not container.readable(deadline - time.monotonic()):
            raise SandboxFailed("the sandbox supervisor did not become ready in time")
        data = container.sock.recv(len(READY) - len(got))
        if not data:
            break
        got += data
    if got != READY:
        # Most likely a traceback on the supervisor's stderr: read some of it for the message.
        while len(got) < 4096 and container.readable(1.0) and (data := container.sock.recv(4096)):
            got += data
        raise SandboxFailed(f"the sandbox supervisor failed to start: {got[8:]!r}")


def owner_id(pid: int | None = None) -> str:
    """Who owns a container: boot id, pid namespace, pid and the pid's start time.

    The start time tells a reused pid from the owner; boot id and namespace say whether this
    process can see the owner at all (a worker in another container cannot).
    """
    pid = os.getpid() if pid is None else pid
    return f"{_boot_id()}:{_pid_namespace()}:{pid}:{_start_ticks(pid)}"


def owner_dead(owner: str) -> bool:
    """True if `owner` (an owner_id) ran in this boot and pid namespace and is gone now."""
    boot, namespace, pid, ticks = (owner.split(":") + ["", "", "", ""])[:4]
    if boot != _boot_id() or namespace != str(_pid_namespace()) or not pid.isdigit():
        return False
    return _start_ticks(int(pid)) != ticks


def _boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def _pid_namespace() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


def _start_ticks(pid: int) -> str:
    """The process's start time in clock ticks since boot ("" if there is no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # Field 22; the command name (field 2) may hold spaces and parentheses, so count from its end.
    return stat.rpartition(")")[2].split()[19]


def _age_s(container: dict[str, Any]) -> float:
    return time.time() - float(container.get("Created", time.time()))
