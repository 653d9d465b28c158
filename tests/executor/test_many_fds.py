"""A host process holding descriptors numbered past 1024 (select()'s FD_SETSIZE) still starts
warm sandboxes and session cells: every wait goes through poll
(executor/linux/fdwait.py)."""

from __future__ import annotations

import os
import resource
import select
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.backends.bwrap.backend import BwrapBackend
from executor.errors import SandboxFailed
from executor.limits import Limits
from executor.linux import fdwait
from executor.linux.pool import Sandbox
from executor.sessions.config import SessionConfig
from executor.sessions.manager import SessionManager
from executor.spec import RunSpec

ROOTFS = Path(__file__).resolve().parents[2] / "var" / "sandbox-rootfs"
HELD_PAIRS = 550  # 1,100 descriptors: whatever this process opens next is numbered past 1024


def fill_fds_below_1025() -> list[int]:
    """Hold every free descriptor numbered 1024 or lower, so the next one opened is past it. A
    backend closed by an earlier test (its zygote template's sockets) can free low numbers after
    the fixture ran; a test about select() refills them right before the wait it tests."""
    held = []
    while (fd := os.dup(0)) <= 1024:
        held.append(fd)
    os.close(fd)
    return held


@pytest.fixture
def high_fds() -> Iterator[list[int]]:
    """Raise the soft RLIMIT_NOFILE, then hold enough descriptors that new fds land above 1024;
    yields the list of held ones (a test may add to it)."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, max(before[1], 4096)))
    held = [socket.socketpair() for _ in range(HELD_PAIRS)]
    extra = fill_fds_below_1025()
    probe = os.dup(0)
    os.close(probe)
    assert probe > 1024
    yield extra
    for a, b in held:
        a.close()
        b.close()
    for fd in extra:
        os.close(fd)
    resource.setrlimit(resource.RLIMIT_NOFILE, before)


@pytest.fixture
def manager(bwrap_session_backend) -> Iterator[SessionManager]:
    root = tempfile.mkdtemp(prefix="undoable-many-fds-")
    os.chmod(root, 0o711)
    config = SessionConfig(root_dir=os.path.join(root, "sessions"), limits=Limits(wall_time_s=5))
    sessions = SessionManager(config, bwrap_session_backend)
    yield sessions
    sessions.shutdown()
    shutil.rmtree(root)


def select_wait(fd: int, timeout_s: float) -> bool:
    """The wait as it was before poll: select() refuses any fd past FD_SETSIZE."""
    readable, _, _ = select.select([fd], [], [], timeout_s)
    return bool(readable)


def start_pooled_sandbox(backend: BwrapBackend) -> Sandbox:
    """The warm pool's own start (BwrapBackend._start_pooled), without the pool's retries."""
    return Sandbox.start(
        rootfs=backend.rootfs,
        limits=backend.pool_limits,
        hard_limit_s=60,
        host_uid=backend.host_uid,
        cgroup_parents=backend.cgroup_parents,
    )


def test_a_warm_sandbox_starts_and_runs_past_1024_descriptors(high_fds):
    backend = BwrapBackend(str(ROOTFS), warm_pool_size=1)
    backend.self_check()
    try:
        assert backend.wait_warm(30.0)
        result = backend.run(RunSpec(code="print(6*7)"), limits=backend.pool_limits)
    finally:
        backend.close()
    assert (result.stdout, backend.stats["warm"]) == ("42\n", 1)


def test_a_session_cell_runs_past_1024_descriptors(high_fds, manager):
    session = manager.create()
    assert session.exec("6*7").stdout == "42\n"


def test_a_sandbox_that_never_gets_ready_is_destroyed_at_once(monkeypatch):
    backend = BwrapBackend(str(ROOTFS))
    sandbox = start_pooled_sandbox(backend)
    groups = list(sandbox.cgroup.dirs.values())
    monkeypatch.setattr(fdwait, "wait_readable", lambda fd, timeout_s: False)
    with pytest.raises(SandboxFailed, match="no ready signal"):
        sandbox.wait_ready(10.0)
    backend.close()
    assert sandbox.proc.returncode is not None
    assert groups and not any(os.path.exists(group) for group in groups)


@pytest.mark.sabotage
def test_sabotage_a_select_wait_fails_past_1024_and_the_sandbox_is_still_destroyed(
    high_fds, manager, monkeypatch
):
    monkeypatch.setattr(fdwait, "wait_readable", select_wait)
    backend = BwrapBackend(str(ROOTFS))
    high_fds.extend(fill_fds_below_1025())
    sandbox = start_pooled_sandbox(backend)
    with pytest.raises(ValueError, match=r"filedescriptor out of range in select\(\)"):
        sandbox.wait_ready(10.0)
    backend.close()
    assert sandbox.proc.returncode is not None
    high_fds.extend(fill_fds_below_1025())  # what the backend's close freed
    with pytest.raises(ValueError, match=r"filedescriptor out of range in select\(\)"):
        manager.create()
