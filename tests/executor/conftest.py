"""Executor fixtures: one real backend per parameter, and a runner that checks nothing is left.

`backend` is session-scoped and parametrized over the real backends, so every hostile test runs
against bwrap, against Docker's runs forked from its template container ("docker") and against
Docker's container per run ("docker-containers", its path for sessions and when the template is
unavailable). UNDOABLE_TEST_BACKENDS (comma list, default "bwrap,docker,docker-containers")
narrows that; "unsandboxed" is accepted too, to try the suite itself against
the unsafe backend (its deny tests must then fail; test_sabotage.py proves that on its own).
UNDOABLE_SANDBOX_IMAGE picks another Docker image. The session checks Docker once, on its first
docker test (tests/conftest.py): with an engine but no image it builds the image; with no engine
the docker half is skipped with one summary line, or the session stops when
UNDOABLE_REQUIRE_DOCKER=1 (CI).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import docker
import pytest
from hostile_kit import TEST_LIMITS, SandboxRunner
from unsandboxed import UnsandboxedBackend

import executor
from executor.backends.base import Backend
from executor.errors import BackendUnavailable
from executor.linux.cgroup_stock import STOCK_SIZE
from tests.prerequisites import MISSING, SANDBOX_IMAGE

REPO = Path(__file__).resolve().parents[2]
DOCKER_IMAGE = SANDBOX_IMAGE
WARM_POOL_SIZE = 2
DOCKER_SANDBOX_UID = 1000  # the image's user; Docker runs it as the same host uid
# Where a backend could leave files or mounts behind on the host. Neither real backend keeps a
# host temp dir (workdir and /tmp are tmpfs inside the sandbox), so anything new here is a leak.
# ("undoable" alone would match other suites' temp databases created at the same time.)
TRACE_DIRS = ("/tmp", "/dev/shm", str(REPO / "var" / "tmp"))
TRACE_WORDS = ("bwrap", "sandbox-rootfs", "undoable-sandbox", "undoable-run")


def _params() -> list[Any]:
    names = os.environ.get("UNDOABLE_TEST_BACKENDS", "bwrap,docker,docker-containers").split(",")
    docker_mark = [pytest.mark.docker]
    marks = {
        "docker": docker_mark,
        "docker-containers": docker_mark,
        "unsandboxed": [pytest.mark.sabotage],
    }
    return [pytest.param(name, marks=marks.get(name, []), id=name) for name in names]


def _bwrap(rootfs: Path, docker_missing: Callable[[str], NoReturn]) -> Backend:
    try:
        return executor.create_backend(
            "bwrap", rootfs=str(rootfs), warm_pool_size=WARM_POOL_SIZE, pool_limits=TEST_LIMITS
        )
    except BackendUnavailable as exc:
        pytest.exit(f"the bwrap backend is unavailable: {exc}", returncode=MISSING)


def _docker(
    rootfs: Path, docker_missing: Callable[[str], NoReturn], *, zygote: bool = True
) -> Backend:
    try:
        built = executor.create_backend(
            "docker",
            image=DOCKER_IMAGE,
            warm_pool_size=WARM_POOL_SIZE,
            limits=TEST_LIMITS,
            zygote=zygote,
        )
    except BackendUnavailable as exc:
        docker_missing(f"the docker backend is unavailable: {exc}")
    if zygote and built.forked_runs == 0:
        built.close()
        pytest.fail("the docker backend runs no program forked from its template")
    return built


def _docker_containers(rootfs: Path, docker_missing: Callable[[str], NoReturn]) -> Backend:
    return _docker(rootfs, docker_missing, zygote=False)


def _unsandboxed(rootfs: Path, docker_missing: Callable[[str], NoReturn]) -> Backend:
    return UnsandboxedBackend()


FACTORIES = {
    "bwrap": _bwrap,
    "docker": _docker,
    "docker-containers": _docker_containers,
    "unsandboxed": _unsandboxed,
}


@pytest.fixture(scope="session", params=_params())
def backend(
    request: pytest.FixtureRequest,
    sandbox_rootfs: Path,
    docker_missing: Callable[[str], NoReturn],
) -> Iterator[Backend]:
    built = FACTORIES[request.param](sandbox_rootfs, docker_missing)
    yield built
    built.close()
    assert _containers_of(built) == [], "containers outlived backend.close()"
    # Its sandboxes' groups are all in groups of its own (other backends of this process, such
    # as the web app's, have theirs): close() removes those, whatever is left in them.
    owned = getattr(built, "cgroup_parents", {}).values()
    assert [group for group in owned if os.path.exists(group)] == [], (
        "cgroups outlived backend.close()"
    )


@pytest.fixture
def sandbox(backend: Backend, request: pytest.FixtureRequest) -> Iterator[SandboxRunner]:
    """Runs programs on `backend`; afterwards, asserts that the runs left nothing behind."""
    runner = SandboxRunner(
        backend, test_name=request.node.originalname, program_uid=_program_uid(backend)
    )
    before = _host_traces()
    yield runner
    # bwrap tears used sandboxes down in the background: judge what is left once it is done.
    wait_idle = getattr(backend, "wait_idle", None)
    assert wait_idle is None or wait_idle(30.0), "used sandboxes were not torn down in 30 s"
    assert runner.leftovers() == [], "processes of the test's runs are still alive on the host"
    assert _host_traces() - before == set(), "the runs left files or mounts on the host"
    settle = getattr(backend, "settle", None)
    assert settle is None or settle(30.0), "used containers were not removed in 30 s"
    # Only the warm pool's fresh sandboxes may remain; each used one must be gone. A used
    # sandbox's cgroups may be kept for a later run (cgroup_stock.py), but never with a process.
    assert len(_containers_of(backend)) <= WARM_POOL_SIZE, "a used container was left behind"
    groups = _cgroups_of(backend)
    holding = {os.path.basename(path) for path in groups if _holds_a_process(path)}
    assert len(holding) <= WARM_POOL_SIZE, "a used sandbox's cgroup still holds a process"
    kept = {os.path.basename(path) for path in groups} - holding
    assert len(kept) <= STOCK_SIZE, "used sandboxes' cgroups were left beyond the stock"


def _program_uid(backend: Backend) -> int:
    """The host uid a sandboxed program runs as (the kill -9 -1 sentinel runs as it too)."""
    if isinstance(backend, UnsandboxedBackend):
        return backend.uid
    if backend.name == "docker":
        return backend.host_uid if backend.forked_runs else DOCKER_SANDBOX_UID
    return getattr(backend, "host_uid", None) or os.getuid()


def _host_traces() -> set[str]:
    traces = set()
    for directory in TRACE_DIRS:
        names = os.listdir(directory) if os.path.isdir(directory) else []
        traces |= {f"{directory}/{n}" for n in names if any(w in n for w in TRACE_WORDS)}
    with open("/proc/self/mountinfo") as mounts:
        traces |= {line for line in mounts if any(w in line for w in TRACE_WORDS)}
    return traces


def _containers_of(backend: Backend) -> list[str]:
    instance = getattr(backend, "instance_id", None)
    if backend.name != "docker" or instance is None:
        return []
    client = docker.from_env()
    try:
        found = client.containers.list(all=True, filters={"label": f"undoable.backend={instance}"})
        return [container.id for container in found]
    finally:
        client.close()


def _pid_cgroups(parents: dict[str, str]) -> set[str]:
    """Per-sandbox cgroups this process created in `parents` that still exist."""
    prefix = f"undoable-{os.getpid()}-"
    return {
        os.path.join(parent, name)
        for parent in parents.values()
        for name in (os.listdir(parent) if os.path.isdir(parent) else ())
        if name.startswith(prefix)
    }


def _holds_a_process(group: str) -> bool:
    with open(os.path.join(group, "cgroup.procs")) as procs:
        return bool(procs.read().strip())


def _cgroups_of(backend: Backend) -> list[str]:
    """This backend's per-sandbox cgroups that still exist (none without cgroups)."""
    parents: dict[str, str] = getattr(backend, "cgroup_parents", {})
    return sorted(_pid_cgroups(parents))


# Session suites: one backend of each kind for the whole test session, with no warm pool or
# template (a session sandbox is started for it, through Backend.open_session).
@pytest.fixture(scope="session")
def bwrap_session_backend(sandbox_rootfs: Path, docker_missing) -> Iterator[Backend]:
    try:
        built = executor.create_backend(
            "bwrap", rootfs=str(sandbox_rootfs), warm_pool_size=0, zygote=False
        )
    except BackendUnavailable as exc:
        pytest.exit(f"the bwrap backend is unavailable: {exc}", returncode=MISSING)
    yield built
    built.close()


@pytest.fixture(scope="session")
def docker_session_backend(docker_engine, docker_missing) -> Iterator[Backend]:
    try:
        built = executor.create_backend(
            "docker", image=DOCKER_IMAGE, warm_pool_size=0, zygote=False
        )
    except BackendUnavailable as exc:
        docker_missing(f"the docker backend is unavailable: {exc}")
    yield built
    built.close()
    assert _containers_of(built) == [], "session containers outlived backend.close()"


@pytest.fixture(params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def session_backend(request: pytest.FixtureRequest) -> Backend:
    """Each session suite's test runs on both backends' open_session."""
    return request.getfixturevalue(f"{request.param}_session_backend")
