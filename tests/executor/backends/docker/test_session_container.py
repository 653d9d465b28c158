"""DockerBackend.open_session: each session is a container of the Docker policy, and no
container the server started (warm pool or session) outlives the server.

The REPL, files, quota, reply-cap and workspace-probe behaviour is
tests/executor/sessions/test_sessions.py, run against both backends; here: what only Docker has.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from executor import quota
from executor.backends.base import Backend, SessionDied
from executor.backends.docker import backend as docker_backend
from executor.backends.docker.backend import DockerBackend, owner_id
from executor.backends.docker.session_container import SESSION_LABEL, DockerSessionContainer
from executor.limits import Limits
from executor.policy.docker_args import container_create_kwargs
from executor.policy.sandbox_policy import SANDBOX_UID as UID
from executor.policy.sandbox_policy import SandboxPolicy
from executor.sessions.config import SessionConfig
from executor.sessions.manager import SessionManager
from tests.prerequisites import REPO

pytestmark = pytest.mark.docker

LIMITS = Limits(wall_time_s=10, memory_mib=96, max_pids=32)


@pytest.fixture(scope="module")
def engine(docker_engine):
    return docker_engine  # this module's short name for it


@pytest.fixture
def root_dir() -> Iterator[str]:
    root = tempfile.mkdtemp(prefix="undoable-sessions-")
    os.chmod(root, 0o711)
    yield os.path.join(root, "sessions")
    # A SIGKILLed server leaves its sessions' quota mounts: they are the test's to remove.
    for workspace in Path(root).glob("sessions/*/workspace"):
        quota.unmount(workspace)
    shutil.rmtree(root)


@pytest.fixture
def manager(root_dir: str, docker_session_backend: Backend) -> Iterator[SessionManager]:
    config = SessionConfig(root_dir=root_dir, limits=LIMITS)
    manager = SessionManager(config, docker_session_backend)
    yield manager
    manager.shutdown()


def labelled(engine, label: str) -> list[dict]:
    return engine.containers(all=True, filters={"label": label})


def gone(engine, container_id: str, timeout_s: float) -> bool:
    """Wait for the engine to say the container is removed; False if it still is not."""
    try:
        engine.wait(container_id, condition="removed", timeout=timeout_s)
    except docker.errors.NotFound:
        return True
    except (docker.errors.DockerException, OSError):  # the wait timed out
        pass
    return not any(c["Id"] == container_id for c in engine.containers(all=True))


def test_a_session_is_a_locked_down_container_labelled_with_its_id_until_closed(engine, manager):
    session = manager.create()
    [container] = labelled(engine, f"{SESSION_LABEL}={session.id}")
    config = engine.inspect_container(container["Id"])
    host = config["HostConfig"]
    assert container["State"] == "running"
    assert (host["NetworkMode"], host["ReadonlyRootfs"], host["CapDrop"]) == ("none", True, ["ALL"])
    assert (config["Config"]["User"], host["Memory"]) == (f"{UID}:{UID}", 96 << 20)
    assert [(m["Source"], m["Destination"]) for m in config["Mounts"]] == [
        (session.workdir, "/workspace")
    ]
    assert session.exec("import os; os.path.exists('/.dockerenv')").stdout == "True\n"

    manager.close(session.id)

    assert gone(engine, container["Id"], timeout_s=10)
    assert not os.path.exists(session.workdir)


def test_a_memory_bomb_ends_the_session_and_names_the_memory_limit(manager):
    session = manager.create()
    result = session.exec("chunks = [bytearray(16 << 20) for _ in range(14)]")
    assert (result.limit, result.oom_killed, session.closed_reason) == ("memory", True, "died")


# The server: a warm pool of stateless containers, an idle session and one inside a long cell.
SERVER = """
import json, sys, threading
from executor import quota
from executor.backends.docker import backend as docker_backend
from executor.backends.docker.backend import DockerBackend
from executor.limits import Limits
from executor.sessions.config import SessionConfig
from executor.sessions.manager import SessionManager
if sys.argv[2] == "sabotage":
    # The protection switched off: containers no longer end when our socket closes.
    real = docker_backend.container_create_kwargs
    docker_backend.container_create_kwargs = lambda policy, **kw: {
        **real(policy, **kw),
        "detach": True,
    }
limits = Limits(wall_time_s=60, memory_mib=96, max_pids=32)
pool = DockerBackend(warm_pool_size=1, limits=limits, zygote=False)
assert pool.wait_warm(timeout=60)
manager = SessionManager(SessionConfig(root_dir=sys.argv[1], limits=limits), pool)
idle, busy = manager.create(), manager.create()
threading.Thread(target=busy.exec, args=("import time; time.sleep(3600)",)).start()
print(json.dumps({"pool": pool.warm_container_ids(), "sessions": [idle.id, busy.id]}), flush=True)
threading.Event().wait()
"""


def sigkilled_server(engine, root_dir: str, mode: str) -> list[str]:
    """Start SERVER, SIGKILL it once its containers run; the ids of those containers."""
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, root_dir, mode], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    assert server.stdout is not None
    started = json.loads(server.stdout.readline())
    sessions = [labelled(engine, f"{SESSION_LABEL}={sid}") for sid in started["sessions"]]
    ids = [*started["pool"], *(c["Id"] for found in sessions for c in found)]
    assert len(ids) == 3
    server.kill()  # SIGKILL: no finally, no close(), no reaper thread
    server.wait()
    return ids


def test_no_container_outlives_a_sigkilled_server(engine, root_dir):
    ids = sigkilled_server(engine, root_dir, "protected")
    killed_at = time.monotonic()

    assert all(gone(engine, container_id, timeout_s=10) for container_id in ids)
    print(f"all containers gone {time.monotonic() - killed_at:.2f}s after the SIGKILL")


@pytest.mark.sabotage
def test_sabotage_containers_that_ignore_their_socket_outlive_the_server(engine, root_dir):
    ids = sigkilled_server(engine, root_dir, "sabotage")
    try:
        assert not any(gone(engine, container_id, timeout_s=3) for container_id in ids)
        # The next start's reaper is the second line: it removes them by their owner label.
        assert DockerBackend(warm_pool_size=0).reap_stale() >= len(ids)
        assert all(gone(engine, container_id, timeout_s=10) for container_id in ids)
    finally:
        for container_id in ids:
            with contextlib.suppress(docker.errors.APIError):  # gone, or already being removed
                engine.remove_container(container_id, force=True)


def leaked_container(engine, owner: str) -> str:
    kwargs = container_create_kwargs(
        SandboxPolicy.of(LIMITS),
        image="undoable-sandbox:latest",
        command=["true"],
        labels={"undoable.owner": owner},
    )
    return str(docker.from_env().containers.create(**kwargs).id)


def test_startup_reaps_only_containers_whose_owner_is_gone(engine):
    finished = subprocess.Popen(["sleep", "60"])
    dead_owner = owner_id(finished.pid)  # taken while it lives: its pid and start time
    finished.kill()
    finished.wait()
    ours, reused_pid = owner_id(), owner_id().rsplit(":", 1)[0] + ":1"
    other_host = "another-boot:1:1:1"
    ids = {o: leaked_container(engine, o) for o in (dead_owner, ours, reused_pid, other_host)}
    try:
        DockerBackend(warm_pool_size=0).reap_stale()
        left = {o for o, container_id in ids.items() if not gone(engine, container_id, 0.5)}
        assert left == {ours, other_host}
    finally:
        for container_id in ids.values():
            with contextlib.suppress(docker.errors.APIError):  # gone, or already being removed
                engine.remove_container(container_id, force=True)


@pytest.mark.sabotage
def test_sabotage_a_reaper_that_trusts_every_owner_leaves_the_dead_ones(engine, monkeypatch):
    monkeypatch.setattr(docker_backend, "owner_dead", lambda owner: False)
    finished = subprocess.Popen(["sleep", "60"])
    dead_owner = owner_id(finished.pid)
    finished.kill()
    finished.wait()
    container_id = leaked_container(engine, dead_owner)
    try:
        DockerBackend(warm_pool_size=0).reap_stale()
        assert not gone(engine, container_id, 0.5)
    finally:
        engine.remove_container(container_id, force=True)


def started_with_lifetime(manager, tmp_path, lifetime_s: float) -> DockerSessionContainer:
    workdir = tmp_path / "workspace"
    workdir.mkdir()
    os.chown(workdir, UID, UID)
    sandbox = manager.backend.open_session(
        session_id="lifetime",
        workdir=str(workdir),
        limits=LIMITS,
        lifetime_s=lifetime_s,
    )
    sandbox.send({"language": "python", "code": "import time; time.sleep(60)", "timeout_s": 9})
    return sandbox


def test_a_session_container_ends_at_its_lifetime_without_the_host(engine, manager, tmp_path):
    sandbox = started_with_lifetime(manager, tmp_path, lifetime_s=1.0)
    try:
        # Nobody on the host kills it: the supervisor's own deadline ends the container.
        with pytest.raises(SessionDied, match="exited"):
            sandbox.receive(deadline=time.monotonic() + 30)
        assert gone(engine, sandbox.container.id, timeout_s=10)
    finally:
        sandbox.kill()


@pytest.mark.sabotage
def test_sabotage_with_a_lifetime_past_the_wait_the_container_lives_on(manager, tmp_path):
    sandbox = started_with_lifetime(manager, tmp_path, lifetime_s=3600.0)
    try:
        with pytest.raises(SessionDied, match="no reply before the deadline"):
            sandbox.receive(deadline=time.monotonic() + 3)
        assert sandbox.alive
    finally:
        sandbox.kill()
