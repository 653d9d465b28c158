"""The Docker backend's runs forked from the zygote's template in a container (forked.py,
template.py), against the real engine and sandbox image.

The hostile battery (tests/executor/test_hostile*.py) runs on this path as the "docker"
backend; here: what only the container host adds (its socket, its view of /sys, its own
filter, who may connect), each with a sabotage that must be caught, and what is left behind.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

import docker
import pytest

from executor.backends.docker import forked as forked_module
from executor.backends.docker import template
from executor.backends.docker.backend import DockerBackend
from executor.errors import BackendUnavailable
from executor.limits import Limits
from executor.linux import zygote
from executor.linux.uids import SANDBOX_UID
from executor.policy.sandbox_policy import program_env
from executor.spec import RunSpec
from tests.executor.backends.sabotaged_sources import sabotaged_child
from tests.executor.cross_run import check_no_run_finds_a_file_an_earlier_run_left
from tests.executor.host_processes import processes_of

pytestmark = pytest.mark.docker

LIMITS = Limits(wall_time_s=5, cpu_time_s=5, memory_mib=128, max_pids=32)


def make_backend(warm_pool_size: int = 1) -> DockerBackend:
    built = DockerBackend(warm_pool_size=warm_pool_size, limits=LIMITS)
    try:
        built.self_check()
    except BackendUnavailable as exc:
        built.close()
        pytest.skip(f"the docker backend is unavailable: {exc}")
    return built


@pytest.fixture(scope="module")
def backend(docker_engine: object) -> Iterator[DockerBackend]:
    built = make_backend()
    yield built
    built.close()


def run(backend: DockerBackend, code: str) -> str:
    result = backend.run(RunSpec(code=code), limits=LIMITS)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def template_host(backend: DockerBackend) -> template.ContainerHost:
    keeper = backend._forked._zygote if backend._forked is not None else None
    assert keeper is not None and keeper._template is not None
    host = keeper._template.host
    assert isinstance(host, template.ContainerHost)
    return host


def template_container(backend: DockerBackend) -> str:
    return template_host(backend).container_id


def assert_caught(check: Callable[[DockerBackend], None]) -> None:
    """The check fails on a backend built with the sabotage in place."""
    sabotaged = make_backend(warm_pool_size=0)
    try:
        with pytest.raises(AssertionError):
            check(sabotaged)
    finally:
        sabotaged.close()


def check_runs_are_forked_in_their_own_namespaces(backend: DockerBackend) -> None:
    code = "import os; print(os.getpid(), os.getuid(), *open('/proc/self/uid_map').read().split())"
    before = backend.forked_runs
    uid = str(SANDBOX_UID)
    assert run(backend, code).split() == ["2", uid, uid, uid, "1"]
    assert backend.forked_runs == before + 1


def check_a_run_sees_no_sysfs_and_no_socket_folder(backend: DockerBackend) -> None:
    code = "import os; print(os.listdir('/sys'), os.listdir('/run/undoable'))"
    assert run(backend, code) == "[] []\n"


def check_the_template_runs_under_our_filter_too(backend: DockerBackend) -> None:
    keeper = backend._forked._zygote if backend._forked is not None else None
    assert keeper is not None and keeper._template is not None
    pids = keeper._template.pids()
    assert pids
    for pid in pids:
        with open(f"/proc/{pid}/status") as status:
            filters = next(line.split()[1] for line in status if line.startswith("Seccomp_filters"))
        # Docker's profile and the template's own (bwrap would load the second).
        assert int(filters) >= 2, pid


def check_a_run_gets_the_base_environment_not_the_containers(backend: DockerBackend) -> None:
    # The container starts the template with variables of its own (HOSTNAME, at least).
    environment = run(backend, "import os; print(sorted(os.environ.items()))")
    assert environment == f"{sorted(program_env({}).items())}\n"


def test_runs_are_forked_in_their_own_namespaces(backend):
    check_runs_are_forked_in_their_own_namespaces(backend)


def test_a_run_sees_no_sysfs_and_no_socket_folder(backend):
    check_a_run_sees_no_sysfs_and_no_socket_folder(backend)


def test_the_template_runs_under_our_filter_too(backend):
    check_the_template_runs_under_our_filter_too(backend)


def test_a_run_gets_the_base_environment_not_the_containers(backend):
    check_a_run_gets_the_base_environment_not_the_containers(backend)


def test_the_template_container_is_locked_down(backend):
    client = docker.from_env()
    try:
        attrs = client.api.inspect_container(template_container(backend))
    finally:
        client.close()
    host = attrs["HostConfig"]
    assert attrs["Config"]["User"] == f"{SANDBOX_UID}:{SANDBOX_UID}"
    assert host["NetworkMode"] == "none" and host["CapDrop"] == ["ALL"]
    assert host["ReadonlyRootfs"] and not host["Privileged"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["Memory"] > 0 and host["PidsLimit"] > 0


def test_sabotage_a_run_that_sees_the_containers_sysfs_is_caught(monkeypatch):
    real = template.payload_body
    monkeypatch.setattr(
        template,
        "payload_body",
        lambda **extra: real(**{**extra, "template_covers": ()}),
    )
    assert_caught(check_a_run_sees_no_sysfs_and_no_socket_folder)


def test_sabotage_runs_that_share_the_containers_message_queues_are_caught(monkeypatch):
    real = template.payload_body

    def uncovered(**extra: Any) -> bytes:
        covers = tuple(f for f in extra["template_covers"] if f != "/dev/mqueue")
        assert len(covers) == 2
        return real(**{**extra, "template_covers": covers})

    monkeypatch.setattr(template, "payload_body", uncovered)
    assert_caught(check_no_run_finds_a_file_an_earlier_run_left)


def test_sabotage_a_template_that_keeps_the_containers_environment_is_caught(monkeypatch):
    sabotaged_child(monkeypatch, "    os.environ.clear()\n    os.environ.update(", "    (")
    assert_caught(check_a_run_gets_the_base_environment_not_the_containers)


def test_sabotage_a_template_without_its_own_filter_is_caught(monkeypatch):
    load = "    _seccomp(prepared)\n\n\ndef start("
    sabotaged_child(monkeypatch, load, "\n\ndef start(")
    assert_caught(check_the_template_runs_under_our_filter_too)


def test_a_process_that_connects_first_is_not_taken_for_the_template(monkeypatch, docker_engine):
    """A host process (root; the folder keeps everyone else out) connects before the template:
    it must not get the payload, nor the runs' pipes after it."""
    real_kwargs = template.template_container_kwargs
    rogue: list[socket.socket] = []

    def kwargs_after_a_rogue(**kwargs: Any) -> dict[str, Any]:
        # Before the container exists: the rogue is first in the listener's queue.
        client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        client.connect(os.path.join(kwargs["socket_folder"], "control.sock"))
        rogue.append(client)
        return real_kwargs(**kwargs)

    monkeypatch.setattr(template, "template_container_kwargs", kwargs_after_a_rogue)
    start = lambda: template.start_in_container(  # noqa: E731
        client=docker.from_env, image="undoable-sandbox:latest", uid=SANDBOX_UID, labels={}
    )
    with pytest.raises(zygote.ZygoteUnavailable, match="unexpected peer"):
        start()
    rogue[0].settimeout(5)
    assert rogue[0].recv(1 << 20) == b""  # nothing was sent to it before it was dropped
    # Sabotage: without the kernel's word on the peer, the rogue is taken for the template.
    monkeypatch.setattr(template, "_check_peer", lambda control, pid, uid: None)
    taken = start()
    try:
        assert rogue[1].recv(1 << 20)  # it got the payload
    finally:
        taken.close()


def test_when_the_template_dies_runs_go_on(backend):
    client = docker.from_env()
    try:
        client.api.kill(template_container(backend))
    finally:
        client.close()
    for _ in range(3):
        assert run(backend, "print(6*7)") == "42\n"


def test_nothing_of_the_template_outlives_close(docker_engine):
    built = make_backend()
    container = template_container(built)
    folder = template_host(built)._folder
    # Root's alone once the template is connected, and the socket is gone from it.
    info = os.stat(folder)
    assert (info.st_uid, info.st_mode & 0o777, os.listdir(folder)) == (0, 0o700, [])
    run(built, "print(1)")
    assert built.wait_warm(30)
    pool = built._forked._pool if built._forked is not None else None
    assert pool is not None and len(pool) == 1
    # The template's processes and the waiting run's (other backends' run as the same uid).
    ours = built.template_pids() | pool._ready[0].cgroup.pids()
    assert len(ours) >= 2
    built.close()
    assert ours & set(processes_of(SANDBOX_UID)) == set()
    client = docker.from_env()
    try:
        assert not client.api.containers(all=True, filters={"id": container})
    finally:
        client.close()
    assert not os.path.exists(folder)


def test_without_cgroups_of_its_own_every_run_gets_a_container(monkeypatch, docker_engine):
    monkeypatch.setattr(forked_module.cgroups, "available_parents", lambda: {})
    built = make_backend(warm_pool_size=0)
    try:
        assert run(built, "print(6*7)") == "42\n"
        assert built.forked_runs == 0
    finally:
        built.close()


def test_socket_folders_of_dead_backends_are_removed_and_live_ones_kept(tmp_path):
    gone_pid = _a_free_pid()
    stale = tmp_path / f"{template.FOLDER_PREFIX}{gone_pid}-abc"
    live = tmp_path / f"{template.FOLDER_PREFIX}{os.getpid()}-def"
    other = tmp_path / "undoable-zygote-notapid-x"
    for folder in (stale, live, other):
        folder.mkdir()
    assert template.remove_stale_folders(str(tmp_path)) == [stale.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def _a_free_pid() -> int:
    with open("/proc/sys/kernel/pid_max") as limit:
        top = int(limit.read())
    return next(pid for pid in range(top - 1, 1, -1) if not os.path.exists(f"/proc/{pid}"))


def test_a_process_outside_the_container_is_not_taken_for_its_first(docker_engine):
    """The template is used only if the engine's container process is ours to see and check:
    a pid outside the container (here this test's own) is refused."""
    with pytest.raises(zygote.ZygoteUnavailable, match="not ours to see"):
        template._local_process(os.getpid(), "0123456789abcdef")


def test_sabotage_without_the_cgroup_check_any_pid_passes(monkeypatch, docker_engine):
    monkeypatch.setattr(template, "_pids_group", lambda pid: "0123456789abcdef")
    with pytest.raises(pytest.fail.Exception):
        test_a_process_outside_the_container_is_not_taken_for_its_first(docker_engine)
