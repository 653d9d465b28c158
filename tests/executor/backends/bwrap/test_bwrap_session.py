"""BwrapBackend.open_session: what only a bwrap session has. Its REPL, files, quota and reply cap
are tests/executor/sessions/test_sessions.py, run against both backends."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.backends.base import Backend, SessionChannel, SessionDied
from executor.limits import Limits

LIMITS = Limits(wall_time_s=10)


@pytest.fixture
def workdir(bwrap_session_backend: Backend) -> Iterator[str]:
    # The sandbox's uid must traverse to its workspace (pytest's tmp_path is under a 0700 folder).
    root = tempfile.mkdtemp(prefix="undoable-bwrap-session-")
    os.chmod(root, 0o711)
    folder = os.path.join(root, "workspace")
    os.mkdir(folder, 0o700)
    uid = bwrap_session_backend.session_uid
    if uid is not None:
        os.chown(folder, uid, uid)
    yield folder
    for name in os.listdir(folder):
        os.unlink(os.path.join(folder, name))
    os.rmdir(folder)
    os.rmdir(root)


def sleeping(backend: Backend, workdir: str, lifetime_s: float) -> SessionChannel:
    sandbox = backend.open_session(
        session_id="lifetime", workdir=workdir, limits=LIMITS, lifetime_s=lifetime_s
    )
    sandbox.send({"language": "python", "code": "import time; time.sleep(60)", "timeout_s": 9})
    return sandbox


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_a_bwrap_session_ends_at_its_lifetime_without_the_host(bwrap_session_backend, workdir):
    sandbox = sleeping(bwrap_session_backend, workdir, lifetime_s=1.0)
    try:
        # Nobody on the host kills it: the launcher's hard kill ends the sandbox.
        with pytest.raises(SessionDied, match="exited"):
            sandbox.receive(deadline=time.monotonic() + 30)
    finally:
        sandbox.kill()
    assert process_gone(sandbox.pid)


@pytest.mark.sabotage
def test_sabotage_with_a_lifetime_past_the_wait_the_bwrap_session_lives_on(
    bwrap_session_backend, workdir
):
    sandbox = sleeping(bwrap_session_backend, workdir, lifetime_s=3600.0)
    try:
        with pytest.raises(SessionDied, match="no reply before the deadline"):
            sandbox.receive(deadline=time.monotonic() + 3)
        assert sandbox.alive
    finally:
        sandbox.kill()
    assert process_gone(sandbox.pid)


def test_a_bwrap_session_is_in_cgroups_of_its_backend(bwrap_session_backend, workdir):
    """Its cgroups are made in the backend's own groups, which the backend's close() removes
    with anything left in them."""
    sandbox = bwrap_session_backend.open_session(
        session_id="cgroups", workdir=workdir, limits=LIMITS, lifetime_s=30.0
    )
    try:
        groups = Path(f"/proc/{sandbox.pid}/cgroup").read_text()
    finally:
        sandbox.kill()
    parents = bwrap_session_backend.cgroup_parents.values()  # type: ignore[attr-defined]
    if not parents:
        pytest.skip("this host gives the backend no cgroups")
    assert any(os.path.basename(parent) in groups for parent in parents), groups
