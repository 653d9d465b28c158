"""bwrap-specific behaviour: the warm pool, fail-closed self-check, and nothing left behind.

The hostile-program suite (test_hostile.py) covers what programs cannot do; these tests cover
how this backend manages its sandboxes. Real sandboxes on the real root filesystem.
"""

import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path

import pytest

from executor import CancelToken, Limits, RunSpec, create_backend
from executor.backends.bwrap.backend import BwrapBackend
from executor.errors import BackendUnavailable, InvalidSpec
from executor.linux import pool as pool_module
from executor.linux.cgroup_stock import CgroupStock
from executor.linux.pool import Reaper
from executor.linux.zygote import Template
from executor.policy.mounts import CONTROL_DIR, Mount
from tests.executor.host_processes import processes_of
from tests.prerequisites import ROOTFS as ROOTFS_PATH

ROOTFS = str(ROOTFS_PATH)
# A host uid no other test uses, so "no process left" can be checked exactly.
HOST_UID = 64123
# Another, for a backend closed while the module's `backend` (and its zygote template) lives.
CLOSING_UID = 64124
RECORDED_UIDS = (HOST_UID, CLOSING_UID)
LIMITS = Limits(wall_time_s=5)


def leftovers(backend: BwrapBackend) -> list[int]:
    """Processes of HOST_UID other than the backend's own zygote template (alive until
    `close()`): what the runs left. A run's processes are never the template's: they are in
    the run's own cgroups from before its program starts."""
    template = backend.template_pids()  # first: a run placed in between is in neither
    return sorted(set(processes_of(HOST_UID)) - template)


# Every cgroup folder a run of this module's backends (RECORDED_UIDS) was given: a bwrap
# sandbox's (BwrapBackend._start) or a zygote run's (Template.spawn). Other suites in the same
# process (the web app's warm pool) have groups of their own.
_STARTED_CGROUPS: set[str] = set()
# The stocks of this module's backends: a used zygote run's groups may be kept there, empty.
_STOCKS: weakref.WeakSet[CgroupStock] = weakref.WeakSet()


@pytest.fixture(scope="module", autouse=True)
def record_started_cgroups():
    start = BwrapBackend._start
    fork = Template.spawn

    def recording_start(self, *args, **kwargs):
        sandbox = start(self, *args, **kwargs)
        if self.host_uid in RECORDED_UIDS and sandbox.cgroup is not None:
            _STARTED_CGROUPS.update(sandbox.cgroup.dirs.values())
        return sandbox

    def recording_fork(self, *args, **kwargs):
        run = fork(self, *args, **kwargs)
        if kwargs["expected_uid"] in RECORDED_UIDS and run.cgroup is not None:
            _STARTED_CGROUPS.update(run.cgroup.dirs.values())
        return run

    make_stock = CgroupStock.__init__

    def recording_stock(self, *args, **kwargs):
        make_stock(self, *args, **kwargs)
        _STOCKS.add(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CgroupStock, "__init__", recording_stock)
        patch.setattr(BwrapBackend, "_start", recording_start)
        patch.setattr(Template, "spawn", recording_fork)
        yield


def our_cgroups() -> list[str]:
    """This module's sandbox cgroups that still exist, but for those a stock keeps for later
    runs (which hold no process: CgroupStock.give_back checks, and so do these tests)."""
    kept = {path for stock in _STOCKS for path in stock.kept_dirs()}
    for path in kept & _STARTED_CGROUPS:
        with open(os.path.join(path, "cgroup.procs")) as procs:
            assert procs.read().strip() == "", f"a kept group holds a process: {path}"
    return sorted(path for path in _STARTED_CGROUPS - kept if os.path.isdir(path))


def test_sandboxes_get_cgroups_so_the_leak_checks_below_can_fail():
    backend = create_backend("bwrap", rootfs=ROOTFS, host_uid=HOST_UID, warm_pool_size=1)
    try:
        assert backend.wait_warm(30)
        assert our_cgroups(), "this host gives sandboxes no cgroups: nothing below is checked"
    finally:
        backend.close()
    assert our_cgroups() == []


def test_the_sandbox_runs_as_the_host_uid_with_no_groups_or_inheritable_caps():
    # Give this (root) process a supplementary group the sandbox must not inherit.
    groups = os.getgroups()
    os.setgroups([4])
    backend = create_backend("bwrap", rootfs=ROOTFS, host_uid=HOST_UID, warm_pool_size=1)
    try:
        assert backend.wait_warm(30)
        (launcher,) = [p for p in processes_of(HOST_UID) if _comm(p) == "undoable-launch"]
        status = _status(launcher)
        assert status["Uid"].split() == [str(HOST_UID)] * 4
        assert status["Gid"].split() == [str(HOST_UID)] * 4
        assert status["Groups"] == ""
        assert int(status["CapInh"], 16) == int(status["CapPrm"], 16) == 0
        assert int(status["CapEff"], 16) == 0
    finally:
        os.setgroups(groups)
        backend.close()


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


@pytest.fixture(scope="module")
def backend():
    backend = create_backend("bwrap", rootfs=ROOTFS, host_uid=HOST_UID)
    yield backend
    backend.close()


@pytest.fixture
def pooled():
    backend = create_backend("bwrap", rootfs=ROOTFS, host_uid=HOST_UID, warm_pool_size=2)
    assert backend.wait_warm(30)
    yield backend
    backend.close()


@pytest.fixture
def pooled_without_zygote():
    backend = create_backend(
        "bwrap", rootfs=ROOTFS, host_uid=HOST_UID, warm_pool_size=2, zygote=False
    )
    assert backend.wait_warm(30)
    yield backend
    backend.close()


def test_a_warm_run_uses_a_pooled_sandbox(pooled):
    result = pooled.run(RunSpec(code="print(1+1)"), limits=LIMITS)
    assert result.stdout == "2\n"
    assert pooled.stats == {"warm": 1, "cold": 0}


def test_a_pooled_sandbox_is_never_reused(pooled):
    leave = "open('/workspace/left','w').write('x'); open('/tmp/left','w').write('x')"
    pooled.run(RunSpec(code=leave), limits=LIMITS)
    assert pooled.wait_warm(30)
    look = "import os; print(os.path.exists('/workspace/left'), os.path.exists('/tmp/left'))"
    result = pooled.run(RunSpec(code=look), limits=LIMITS)
    assert result.stdout == "False False\n"
    assert pooled.stats["warm"] == 2


def test_a_pooled_sandbox_gets_the_run_env_but_never_the_host_env(pooled, monkeypatch):
    monkeypatch.setenv("HOST_CANARY", "c4n4ry")
    code = (
        "import os\n"
        "print(os.environ['TOKEN'])\n"
        "print(b'c4n4ry' in open('/proc/1/environ','rb').read())\n"
        "print(b'c4n4ry' in open('/proc/self/environ','rb').read())\n"
    )
    result = pooled.run(RunSpec(code=code, env={"TOKEN": "t0k"}), limits=LIMITS)
    assert result.stdout == "t0k\nFalse\nFalse\n"


WORKSPACE_MIB = "import os; s = os.statvfs('/workspace'); print(s.f_blocks * s.f_frsize >> 20)"


def test_a_run_that_does_not_fit_the_pool_is_forked_for_its_own_limits(pooled):
    result = pooled.run(RunSpec(code=WORKSPACE_MIB), limits=Limits(workdir_quota_mib=8))
    assert result.stdout == "8\n"  # not one of the pool's runs: they have the pool's 64 MiB
    assert pooled.zygote_runs == 1
    assert pooled.stats == {"warm": 1, "cold": 0}  # a zygote run counts as warm


def test_without_the_zygote_runs_that_do_not_fit_the_pool_start_cold(pooled_without_zygote):
    backend = pooled_without_zygote
    result = backend.run(RunSpec(code=WORKSPACE_MIB), limits=Limits(workdir_quota_mib=8))
    assert result.stdout == "8\n"
    assert backend.stats == {"warm": 0, "cold": 1}
    assert backend.zygote_runs == 0


def test_closing_the_pool_leaves_no_process_or_cgroup():
    backend = create_backend("bwrap", rootfs=ROOTFS, host_uid=HOST_UID, warm_pool_size=2)
    assert backend.wait_warm(30)
    backend.close()
    assert processes_of(HOST_UID) == []
    assert our_cgroups() == []


def test_a_double_forked_daemon_is_gone_when_the_run_returns(backend):
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(1000)\n"
        "    os._exit(0)\n"
        "print('parent done')\n"
    )
    result = backend.run(RunSpec(code=code), limits=LIMITS)
    assert result.stdout == "parent done\n"
    assert backend.wait_idle(30)
    assert leftovers(backend) == []
    assert our_cgroups() == []


def test_a_timeout_kills_a_sigterm_ignoring_process_tree(backend):
    code = "trap '' TERM; (trap '' TERM; while :; do :; done) & echo started; while :; do :; done"
    result = backend.run(RunSpec(code=code, language="bash"), limits=Limits(wall_time_s=1))
    assert result.timed_out
    assert result.signal == 9
    assert result.stdout == "started\n"
    assert backend.wait_idle(30)
    assert leftovers(backend) == []
    assert our_cgroups() == []


def test_cancel_from_another_thread_stops_the_run_and_cleans_up(backend):
    token = CancelToken()
    started = threading.Event()

    def on_output(chunk):
        started.set()

    def cancel_when_started():
        assert started.wait(10)
        token.cancel()

    canceller = threading.Thread(target=cancel_when_started)
    canceller.start()
    code = "import sys, time\nsys.stdout.write('go\\n')\ntime.sleep(60)"
    result = backend.run(RunSpec(code=code), limits=LIMITS, on_output=on_output, cancel=token)
    canceller.join()
    assert result.cancelled
    assert not result.timed_out
    assert result.stdout == "go\n"
    assert backend.wait_idle(30)
    assert leftovers(backend) == []


def test_close_waits_for_the_teardown_of_a_run_that_just_returned():
    backend = create_backend("bwrap", rootfs=ROOTFS, host_uid=CLOSING_UID)
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(1000)\nprint('left a child')\n"
    result = backend.run(RunSpec(code=code), limits=LIMITS)
    backend.close()
    assert result.stdout == "left a child\n"
    assert processes_of(CLOSING_UID) == []  # closed: its zygote template is gone too
    assert our_cgroups() == []


def test_all_output_written_before_the_program_exits_is_in_the_result(backend):
    # More than a pipe holds on each stream, then exit at once: the run ends on the exit
    # status, so what is still buffered in the pipes must be drained into the result.
    code = "import sys\nsys.stdout.write('o' * 300_000)\nsys.stderr.write('e' * 200_000)\n"
    result = backend.run(RunSpec(code=code), limits=LIMITS)
    assert (result.exit_code, len(result.stdout), len(result.stderr)) == (0, 300_000, 200_000)
    assert set(result.stdout + result.stderr) == {"o", "e"}


def test_exit_code_137_is_not_a_signal_but_sigkill_is(backend):
    exited = backend.run(RunSpec(code="import os; os._exit(137)"), limits=LIMITS)
    killed = backend.run(RunSpec(code="import os; os.kill(os.getpid(), 9)"), limits=LIMITS)
    assert (exited.exit_code, exited.signal) == (137, None)
    assert (killed.exit_code, killed.signal) == (None, 9)


def test_a_memory_bomb_is_reported_as_oom_killed(backend):
    code = "hog = []\nwhile True: hog.append(bytearray(8 * 1024 * 1024))"
    result = backend.run(RunSpec(code=code), limits=Limits(memory_mib=64, wall_time_s=10))
    assert result.oom_killed
    assert result.signal == 9
    assert backend.wait_idle(30)
    assert our_cgroups() == []


def test_output_past_the_cap_is_truncated_and_the_program_stopped(backend):
    code = "while True: print('x' * 99)"
    result = backend.run(RunSpec(code=code), limits=Limits(max_output_bytes=1000))
    assert result.truncated
    assert len(result.stdout) == 1000
    assert not result.timed_out


def test_a_character_split_between_writes_arrives_whole(backend):
    code = (
        "import os, time\n"
        "os.write(1, '€'.encode()[:2]); time.sleep(0.2); os.write(1, '€'.encode()[2:])\n"
    )
    chunks = []
    result = backend.run(RunSpec(code=code), limits=LIMITS, on_output=chunks.append)
    assert result.stdout == "€"
    assert "".join(c.text for c in chunks) == "€"


def test_interpreter_mode_echoes_bare_expressions(backend):
    spec = RunSpec(code="x = 20\nx + 1\nNone\n'done'", interpreter_mode=True)
    result = backend.run(spec, limits=LIMITS)
    assert result.stdout == "21\n'done'\n"


def test_files_and_stdin_reach_the_program(backend):
    spec = RunSpec(
        code="cat data/in.txt; tr a-z A-Z",
        language="bash",
        files={"data/in.txt": b"from a file\n"},
        stdin=b"from stdin\n",
    )
    result = backend.run(spec, limits=LIMITS)
    assert result.stdout == "from a file\nFROM STDIN\n"


def sandbox_mounts() -> list[str]:
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [line for line in lines if "sandbox-rootfs" in line or " /workspace " in line]


def test_runs_leave_no_mount_on_the_host(backend):
    before = sandbox_mounts()
    backend.run(RunSpec(code="print(1)"), limits=LIMITS)
    assert backend.wait_idle(30)
    assert sandbox_mounts() == before


def test_self_check_refuses_a_missing_rootfs(tmp_path):
    with pytest.raises(BackendUnavailable, match="root filesystem"):
        create_backend("bwrap", rootfs=str(tmp_path / "nothing-here"))


def test_self_check_refuses_when_bwrap_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BackendUnavailable, match="bwrap"):
        BwrapBackend(ROOTFS).self_check()


@pytest.mark.parametrize("present", [False, True], ids=["missing", "not-executable"])
def test_self_check_refuses_when_the_launcher_is_not_built(monkeypatch, tmp_path, present):
    # Without the launcher nothing would join the cgroups, drop root or enforce the hard limit.
    launcher = tmp_path / "undoable-launch"
    if present:
        launcher.write_text("")
        launcher.chmod(0o644)
    monkeypatch.setattr("executor.backends.bwrap.backend.LAUNCHER", str(launcher))
    with pytest.raises(BackendUnavailable, match="make launcher"):
        BwrapBackend(ROOTFS, host_uid=HOST_UID).self_check()


@pytest.fixture
def shared():
    """A host folder the sandbox user (HOST_UID on the host) owns; pytest's tmp is 0700."""
    base = Path(ROOTFS).parent / "tmp"
    base.mkdir(exist_ok=True)
    base.chmod(0o711)
    folder = Path(tempfile.mkdtemp(prefix="mounted-", dir=base)).resolve()
    os.chown(folder, HOST_UID, HOST_UID)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_run_with_mounts_gets_a_fresh_sandbox_and_the_pool_never_sees_them(pooled, shared):
    mounts = [Mount(shared, "/workspace", writable=True)]
    code = "open('/workspace/out.txt', 'w').write('written inside')"
    result = pooled.run(RunSpec(code=code), limits=LIMITS, mounts=mounts)
    assert result.ok, result.stderr
    assert (shared / "out.txt").read_text() == "written inside"
    assert pooled.stats == {"warm": 0, "cold": 1}
    look = pooled.run(RunSpec(code="import os; print(os.listdir('/workspace'))"), limits=LIMITS)
    assert look.stdout == "[]\n"
    assert pooled.stats == {"warm": 1, "cold": 1}


def test_a_read_only_mount_is_readable_but_not_writable(backend, shared):
    (shared / "in.txt").write_text("from the host")
    code = (
        "import os\n"
        f"print(open('{CONTROL_DIR}/in.txt').read())\n"
        "try:\n"
        f"    open('{CONTROL_DIR}/new.txt', 'w')\n"
        "except OSError as exc:\n"
        "    print(exc.errno == 30)\n"
    )
    before = sandbox_mounts()
    result = backend.run(RunSpec(code=code), limits=LIMITS, mounts=[Mount(shared, CONTROL_DIR)])
    assert result.stdout == "from the host\nTrue\n", result.stderr
    assert sorted(p.name for p in shared.iterdir()) == ["in.txt"]
    assert backend.wait_idle(30)
    assert sandbox_mounts() == before


def test_a_refused_mount_starts_no_sandbox(backend, shared):
    stats = dict(backend.stats)
    with pytest.raises(InvalidSpec, match="destination"):
        backend.run(RunSpec(code="print(1)"), limits=LIMITS, mounts=[Mount(shared, "/etc")])
    assert backend.stats == stats
    assert backend.wait_idle(30)  # earlier tests' sandboxes; this one started none
    assert leftovers(backend) == []
    assert our_cgroups() == []


class BlockedTeardown:
    """A used sandbox whose teardown blocks until released (the reaper's own behaviour is
    what is tested here; the sandboxes above test real teardowns)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.destroyed_on: threading.Thread | None = None

    def destroy(self, *, exiting: bool) -> None:
        assert self.release.wait(10)
        self.destroyed_on = threading.current_thread()


def test_the_reaper_is_busy_until_a_teardown_is_done_and_close_waits_for_it():
    reaper = Reaper()
    blocked = BlockedTeardown()
    reaper.submit(blocked, exiting=True)
    assert not reaper.wait_idle(0.05)
    closer = threading.Thread(target=reaper.close)
    closer.start()
    closer.join(0.05)
    assert closer.is_alive()
    blocked.release.set()
    closer.join(10)
    assert not closer.is_alive()
    assert blocked.destroyed_on is not None
    assert reaper.wait_idle(0)


def test_a_full_or_closed_reaper_tears_down_on_the_callers_thread():
    reaper = Reaper(max_pending=1)
    queued, overflow, late = BlockedTeardown(), BlockedTeardown(), BlockedTeardown()
    overflow.release.set()
    late.release.set()
    reaper.submit(queued, exiting=False)
    reaper.submit(overflow, exiting=False)
    assert overflow.destroyed_on is threading.current_thread()
    queued.release.set()
    reaper.close()
    reaper.submit(late, exiting=False)
    assert late.destroyed_on is threading.current_thread()
    assert queued.destroyed_on is not threading.current_thread()


def test_a_teardown_waits_a_moment_after_the_result_unless_the_reaper_closes(monkeypatch):
    monkeypatch.setattr(pool_module, "REAP_SETTLE_S", 0.5)
    reaper = Reaper()
    first, second = BlockedTeardown(), BlockedTeardown()
    first.release.set()
    second.release.set()
    reaper.submit(first, exiting=True)
    assert not reaper.wait_idle(0.3), "torn down before the result's reply could go out"
    assert reaper.wait_idle(10)
    reaper.submit(second, exiting=True)
    reaper.close()  # does not wait out the moment
    assert second.destroyed_on is not None
