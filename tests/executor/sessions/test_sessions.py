"""executor.sessions.manager against real sandboxes, bwrap and Docker alike (each backend's
open_session, tests/executor/conftest.py): REPL semantics, files, reaping, limits, the
workspace probe. The Docker half needs the engine and builds the sandbox image (tests/conftest.py).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor import quota
from executor.backends import session_channel
from executor.backends.base import Backend
from executor.errors import BackendUnavailable, ExecutorError, InvalidSpec
from executor.limits import Limits
from executor.sessions.files import FileMissing, WorkspaceFull
from executor.sessions.manager import (
    Session,
    SessionBusy,
    SessionConfig,
    SessionManager,
    SessionNotFound,
)
from tests.quota_mounts import WRITE_40_MIB, mounted_anywhere


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie is gone for every purpose but its /proc entry.
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


@pytest.fixture
def reaped() -> dict[str, threading.Event]:
    return {}


@pytest.fixture
def manager_factory(reaped: dict[str, threading.Event], session_backend: Backend) -> Iterator:
    managers: list[SessionManager] = []
    # The sandbox runs as an unprivileged host uid: its workspace's parents must be traversable
    # (pytest's tmp_path lives under a 0700 directory).
    root = tempfile.mkdtemp(prefix="undoable-sessions-")
    os.chmod(root, 0o711)

    def make(**overrides) -> SessionManager:
        def on_close(session_id: str, reason: str) -> None:
            reaped.setdefault(session_id, threading.Event()).set()

        options = {"limits": Limits(wall_time_s=5), **overrides}
        config = SessionConfig(root_dir=os.path.join(root, "sessions"), **options)
        manager = SessionManager(config, session_backend, on_close=on_close)
        managers.append(manager)
        return manager

    yield make
    for manager in managers:
        manager.shutdown()
    shutil.rmtree(root)


def test_state_functions_and_imports_persist(manager_factory):
    session = manager_factory().create()
    session.exec("import json\ndef double(x):\n    return 2 * x")
    assert session.exec("json.dumps(double(21))").stdout == "'42'\n"


def test_the_program_runs_as_the_unprivileged_sandbox_user_without_network(manager_factory):
    session = manager_factory().create()
    out = session.exec(
        "import os, socket\nprint(os.getuid(), os.getcwd())\n"
        "socket.create_connection(('1.1.1.1', 53), timeout=2)"
    )
    assert out.stdout == "1000 /workspace\n"
    assert "OSError" in out.stderr or "unreachable" in out.stderr


def test_a_syntax_error_is_reported_and_state_survives(manager_factory):
    session = manager_factory().create()
    session.exec("kept = 'yes'")
    bad = session.exec("def broken(:\n  pass")
    assert bad.exit_code == 1 and "SyntaxError" in bad.stderr
    assert session.exec("kept").stdout == "'yes'\n"


def test_sys_exit_in_a_cell_does_not_end_the_session(manager_factory):
    session = manager_factory().create()
    assert session.exec("import sys; sys.exit(4)").exit_code == 4
    assert session.exec("'alive'").stdout == "'alive'\n"


def test_output_beyond_the_cap_is_truncated(manager_factory):
    session = manager_factory(limits=Limits(wall_time_s=5, max_output_bytes=1000)).create()
    result = session.exec("print('x' * 5000)")
    assert result.truncated is True
    assert len(result.stdout) == 1000


def test_a_cell_that_kills_the_interpreter_ends_the_session(manager_factory):
    manager = manager_factory()
    session = manager.create()
    result = session.exec("import os; os._exit(0)")
    assert result.exit_code is None and "state is lost" in result.stderr
    with pytest.raises(SessionNotFound):
        session.exec("1")
    assert process_gone(session.pid)


def test_one_command_at_a_time(manager_factory):
    session = manager_factory().create()
    session.write_file("go", b"")
    started = threading.Event()
    worker = threading.Thread(
        target=lambda: (started.set(), session.exec("import time; time.sleep(1.5)"))
    )
    worker.start()
    started.wait(5)
    # The worker holds the lock from its first instruction: poll for it without sleeping.
    while not session._lock.locked() and worker.is_alive():
        threading.Event().wait(0.01)
    with pytest.raises(SessionBusy):
        session.exec("1")
    worker.join(10)


def test_an_idle_session_is_reaped_and_its_sandbox_killed(manager_factory, reaped):
    manager = manager_factory(idle_timeout_s=0.5)
    session = manager.create()
    reaped[session.id] = threading.Event()
    pid, workdir = session.pid, session.workdir
    assert not process_gone(pid)
    assert reaped[session.id].wait(15)
    assert process_gone(pid)
    assert not os.path.exists(workdir)
    with pytest.raises(SessionNotFound):
        manager.get(session.id)


def test_the_max_lifetime_ends_a_busy_session_too(manager_factory, reaped):
    manager = manager_factory(idle_timeout_s=600, max_lifetime_s=1.0)
    session = manager.create()
    reaped[session.id] = threading.Event()
    assert reaped[session.id].wait(15)
    assert process_gone(session.pid)


def test_files_refuse_traversal_and_links(manager_factory):
    session = manager_factory().create()
    session.exec("import os; os.symlink('/', 'root'); os.mkfifo('pipe')")
    for bad in ("../x", "/etc/passwd", "a/../../x", ""):
        with pytest.raises(InvalidSpec):
            session.write_file(bad, b"x")
    with pytest.raises(FileMissing):
        session.read_file("root/etc/passwd")
    with pytest.raises(FileMissing):
        session.read_file("pipe")
    kinds = {entry.name: entry.kind for entry in session.list_files()}
    assert kinds == {"root": "other", "pipe": "other"}
    session.delete_file("root")
    assert Path("/etc/passwd").exists()


def test_uploaded_files_belong_to_the_sandbox_user(manager_factory):
    session = manager_factory().create()
    session.write_file("sub/data.txt", b"v1")
    assert session.exec("open('sub/data.txt', 'a').write('+more')").exit_code == 0
    assert session.read_file("sub/data.txt") == b"v1+more"


# --- the workspace quota ---------------------------------------------------------------------

QUOTA_MIB = 16
# A 64 MiB file size limit, so only the workspace quota can stop a 40 MiB write.
QUOTA_LIMITS = Limits(wall_time_s=10, max_file_size_mib=64)


def test_a_cell_cannot_write_past_the_workspace_quota(manager_factory):
    manager = manager_factory(limits=QUOTA_LIMITS, workdir_quota_mib=QUOTA_MIB)
    session = manager.create()
    workdir = session.workdir

    result = session.exec(WRITE_40_MIB)

    assert result.stdout == "ENOSPC No space left on device\n"
    assert os.path.getsize(os.path.join(workdir, "big")) <= QUOTA_MIB << 20
    assert session.exec("'still answering'").stdout == "'still answering'\n"
    manager.close(session.id)
    assert not mounted_anywhere(workdir)
    assert not os.path.exists(workdir)


def test_the_workspace_caps_how_many_files_it_holds(manager_factory):
    session = manager_factory(workdir_max_inodes=50).create()

    result = session.exec(
        "import errno\ntry:\n    [open(f'f{n}', 'w').close() for n in range(200)]\n"
        "except OSError as exc:\n    print(errno.errorcode[exc.errno])"
    )

    assert result.stdout == "ENOSPC\n"
    assert len(os.listdir(session.workdir)) < 50


def test_an_upload_into_a_full_workspace_is_refused_and_leaves_nothing(manager_factory):
    session = manager_factory(limits=QUOTA_LIMITS, workdir_quota_mib=QUOTA_MIB).create()
    session.exec(WRITE_40_MIB)

    with pytest.raises(WorkspaceFull):
        session.write_file("more.bin", b"x" * (1 << 20))

    assert [entry.name for entry in session.list_files()] == ["big"]
    session.delete_file("big")
    session.write_file("more.bin", b"x" * (1 << 20))
    assert session.exec("len(open('more.bin', 'rb').read())").stdout == f"{1 << 20}\n"


def test_a_reaped_session_leaves_no_mount_behind(manager_factory, reaped):
    manager = manager_factory(idle_timeout_s=0.5)
    session = manager.create()
    reaped[session.id] = threading.Event()
    assert mounted_anywhere(session.workdir)

    assert reaped[session.id].wait(15)

    assert not mounted_anywhere(session.workdir)
    assert not os.path.exists(session.workdir)


def test_a_session_that_fails_to_start_leaves_no_mount_or_folder(manager_factory, monkeypatch):
    manager = manager_factory()
    # The driver's source is the one thing both backends start from: a broken one never says
    # it is ready.
    monkeypatch.setattr(session_channel, "driver_source", lambda: "raise SystemExit(3)")
    # Only this manager's folder counts: other test processes mount and unmount quotas too.
    root = os.path.realpath(manager.config.root_dir)

    with pytest.raises(ExecutorError):
        manager.create()

    assert f" {root}/" not in Path("/proc/self/mountinfo").read_text()
    assert os.listdir(root) == []


def test_without_mount_privilege_the_manager_warns_once(manager_factory, monkeypatch, caplog):
    monkeypatch.setattr(quota, "supported", lambda: False)

    manager_factory()
    session = manager_factory().create()

    warnings = [r for r in caplog.records if "no quota" in r.getMessage()]
    assert len(warnings) == 2  # one per manager, none per session
    assert not mounted_anywhere(session.workdir)
    assert os.stat(session.workdir).st_uid == session.uid


@pytest.mark.sabotage
def test_sabotage_without_the_quota_mount_a_cell_writes_past_it(manager_factory, monkeypatch):
    monkeypatch.setattr(quota, "mount_tmpfs", lambda path, **caps: False)
    session = manager_factory(limits=QUOTA_LIMITS, workdir_quota_mib=QUOTA_MIB).create()

    result = session.exec(WRITE_40_MIB)

    assert result.stdout == "wrote it all\n"
    assert os.path.getsize(os.path.join(session.workdir, "big")) == 40 << 20


# A session's reply is capped on its header (issue 14, item 6).
MIB = 1024 * 1024
REPLY_LIMITS = Limits(wall_time_s=3, max_output_bytes=64 * 1024)
# The cell finds the driver's reply fd in the driver's own frame (it runs in that process),
# announces a 4 GiB reply (executor/policy/wire.py's frame), then streams 16 MiB of it.
FORGED_REPLY = """
import os, sys
frame = sys._getframe()
while "reply_fd" not in frame.f_locals:
    frame = frame.f_back
fd = frame.f_locals["reply_fd"]
os.write(fd, b"c" + (2**32 - 1).to_bytes(4, "big"))
chunk = b"x" * (1 << 20)
for _ in range(16):
    os.write(fd, chunk)
"""


def test_a_forged_reply_header_ends_the_session_at_once(manager_factory):
    session = manager_factory(limits=REPLY_LIMITS).create()
    cap = session_channel.max_reply_bytes(REPLY_LIMITS)
    tracemalloc.start()
    try:
        result = session.exec(FORGED_REPLY)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"the session's reply was larger than {cap} bytes" in result.stderr
    assert (result.limit, result.exit_code) == ("output", None)
    assert result.duration_s < REPLY_LIMITS.wall_time_s
    assert peak < 4 * MIB
    assert session.closed_reason == "died"


def test_an_honest_reply_at_the_output_cap_still_arrives(manager_factory):
    session = manager_factory(limits=REPLY_LIMITS).create()
    code = "import sys\nprint('\\x01' * 70000)\nprint('\\x02' * 70000, file=sys.stderr)"
    result = session.exec(code)
    assert (result.truncated, result.limit) == (True, "output")
    assert len(result.stdout) == REPLY_LIMITS.max_output_bytes


def test_sabotage_without_the_cap_the_host_buffers_the_forged_reply(
    manager_factory,
    monkeypatch,
):
    cap = session_channel.max_reply_bytes(REPLY_LIMITS)
    monkeypatch.setattr(session_channel, "max_reply_bytes", lambda limits: math.inf)
    session = manager_factory(limits=REPLY_LIMITS).create()
    sandbox = session._sandbox
    result = session.exec(FORGED_REPLY)
    assert "no reply before the deadline" in result.stderr
    assert sandbox._frames.buffered > 16 * MIB > cap


# Every signal there is to the session's PID 1 (bwrap's init, or the Docker supervisor), then
# what PID 1 catches: nothing, so the kernel dropped them all (issue 41, item 9).
SIGNAL_PID_1 = """
import os, signal
for sig in sorted(signal.valid_signals()):
    os.kill(1, sig)
with open("/proc/1/status") as status:
    caught = next(line.split()[1] for line in status if line.startswith("SigCgt:"))
print("PID 1 catches", caught)
"""


def check_a_cell_cannot_signal_the_sessions_pid_1(manager: SessionManager) -> None:
    session = manager.create()
    session.exec("kept = 'yes'")
    assert session.exec(SIGNAL_PID_1).stdout == f"PID 1 catches {'0' * 16}\n"
    assert session.exec("kept").stdout == "'yes'\n"


def test_a_cell_cannot_signal_the_sessions_pid_1(manager_factory):
    check_a_cell_cannot_signal_the_sessions_pid_1(manager_factory())


@pytest.mark.sabotage
@pytest.mark.parametrize(
    # bwrap's sessions have bwrap's own init as PID 1: nothing of ours to sabotage there.
    "session_backend",
    [pytest.param("docker", marks=pytest.mark.docker)],
    indirect=True,
)
def test_sabotage_a_docker_session_supervisor_with_a_sigint_handler_is_caught(
    manager_factory, monkeypatch
):
    from executor.backends.docker import backend as docker_backend

    drop = "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    keep = "    signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    assert drop in docker_backend.DRIVER_SOURCE
    monkeypatch.setattr(
        docker_backend, "DRIVER_SOURCE", docker_backend.DRIVER_SOURCE.replace(drop, keep)
    )
    with pytest.raises((AssertionError, ExecutorError)):
        check_a_cell_cannot_signal_the_sessions_pid_1(manager_factory())


def close_during_a_cell(manager: SessionManager) -> tuple[object, int]:
    """Close a session while a cell runs on another thread: what the cell returned (or
    raised), and the sandbox's pid."""
    session = manager.create()
    outcome: dict[str, object] = {}

    def cell() -> None:
        try:
            outcome["result"] = session.exec("import time; time.sleep(4)")
        except Exception as exc:  # what a request thread would turn into a 500
            outcome["result"] = exc

    worker = threading.Thread(target=cell)
    worker.start()
    while not session._lock.locked() and worker.is_alive():
        threading.Event().wait(0.01)
    threading.Event().wait(0.3)  # the cell is reading its reply
    manager.close(session.id)
    worker.join(15)
    return outcome.get("result"), session.pid


def test_closing_a_session_during_a_cell_ends_the_cell_with_a_reason(manager_factory):
    result, pid = close_during_a_cell(manager_factory())
    # The cell saw its sandbox end, not a descriptor closed under it (which another thread
    # could already have reopened as someone else's file).
    assert not isinstance(result, Exception), result
    assert result.exit_code is None and "state is lost" in result.stderr  # type: ignore[union-attr]
    assert process_gone(pid)


@pytest.mark.sabotage
def test_sabotage_closing_the_descriptors_under_a_cell_makes_it_fail(
    manager_factory, session_backend, monkeypatch
):
    if session_backend.name == "docker":
        pytest.skip("the Docker channel reads its closed socket as the sandbox's end")
    # As before: the sandbox killed and its pipes closed at once, whatever a cell is reading.
    monkeypatch.setattr(Session, "kill", lambda self, *, reason="closed": self._release(reason))
    result, _ = close_during_a_cell(manager_factory())
    assert isinstance(result, OSError), result  # EBADF, which the API answered as a 500


# --- the workspace probe: a manager proves its backend's sandboxes use its folders -------------


@pytest.fixture
def sandbox_sees_other_folders(monkeypatch, session_backend: Backend) -> Iterator[None]:
    """Stand-in for a remote Docker engine, or a server in a container of its own: the sandbox
    gets a folder of the same purpose from elsewhere (here: an empty folder of ours)."""
    elsewhere_root = tempfile.mkdtemp(prefix="undoable-elsewhere-")
    os.chmod(elsewhere_root, 0o711)
    real = type(session_backend).open_session

    def elsewhere(self, *, workdir: str, **options):
        other = tempfile.mkdtemp(dir=elsewhere_root)
        uid = self.session_uid
        if uid is not None and os.geteuid() == 0:
            os.chown(other, uid, uid)
        return real(self, workdir=other, **options)

    monkeypatch.setattr(type(session_backend), "open_session", elsewhere)
    yield
    shutil.rmtree(elsewhere_root)


def test_deny_a_manager_whose_sandboxes_miss_its_folders_refuses_to_start(
    manager_factory, sandbox_sees_other_folders
):
    with pytest.raises(BackendUnavailable, match="must bind this process's session folders"):
        manager_factory()


@pytest.mark.sabotage
def test_sabotage_without_the_probe_a_session_misses_its_own_files(
    manager_factory, sandbox_sees_other_folders, monkeypatch
):
    from executor.sessions import manager as manager_module

    monkeypatch.setattr(manager_module, "_check_workspaces", lambda *args: None)
    session = manager_factory().create()
    session.write_file("data.txt", b"uploaded")
    assert "FileNotFoundError" in session.exec("open('data.txt').read()").stderr
