"""Zygote runs' cgroups kept for later runs (executor/linux/cgroup_stock.py): a kept
group holds no process, carries no limit's counter and little charged memory to the next run,
and takes whatever limits the next run has.

Real groups on the host's cgroup hierarchy and real zygote runs; the sabotage tests at the end
switch each check of the stock off and show that these tests notice.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator

import pytest

from executor import Limits, RunResult, RunSpec
from executor.backends.bwrap.backend import BwrapBackend
from executor.linux import cgroup_stock, cgroups
from executor.linux.cgroup_stock import CgroupStock
from tests.executor.linux.test_zygote import assert_caught
from tests.prerequisites import ROOTFS

HOST_UID = 64127
LIMITS = Limits(wall_time_s=10)
CHARGE_FILE = "/dev/shm/undoable-cgroup-stock-test"
HOG = "x = bytearray(200 * 1024 * 1024)\nprint(len(x))"
FAILS = "raise SystemExit(3)"
CHARGED_BYTES = 4 * cgroup_stock.KEEP_MAX_CHARGED_BYTES

PARENTS = cgroups.available_parents()
pytestmark = pytest.mark.skipif(
    not {"memory", "pids"} <= PARENTS.keys(), reason="this host gives no memory and pids cgroups"
)


@pytest.fixture(scope="module")
def backend() -> Iterator[BwrapBackend]:
    built = make_backend()
    yield built
    built.close()


@pytest.fixture
def stock() -> Iterator[CgroupStock]:
    made = CgroupStock(PARENTS)
    yield made
    made.close()


def make_backend() -> BwrapBackend:
    backend = BwrapBackend(str(ROOTFS), host_uid=HOST_UID, zygote=True)
    backend.self_check()
    return backend


def run_then_settle(backend: BwrapBackend, code: str, limits: Limits = LIMITS) -> RunResult:
    """One zygote run; returns once its cgroups are back in the stock (or removed)."""
    before = backend.zygote_runs
    result = backend.run(RunSpec(code=code), limits=limits)
    assert backend.zygote_runs == before + 1, "the run did not come from the zygote"
    assert backend.wait_idle(30)
    return result


def stock_of(backend: BwrapBackend) -> CgroupStock:
    keeper = backend._zygote
    assert keeper is not None
    return keeper._run_cgroups


# --- checks, each a function of a backend or a stock so the sabotage tests can reuse them ----


def check_a_memory_kill_is_not_named_again_in_the_next_run(backend: BwrapBackend) -> None:
    # The next run takes the group the run before it gave back, if it was kept (the stock
    # hands out the last one).
    hog = run_then_settle(backend, HOG, Limits(wall_time_s=10, memory_mib=64))
    assert hog.limit == "memory", hog.stderr[-500:]
    after = run_then_settle(backend, FAILS)
    assert (after.exit_code, after.limit, after.oom_killed) == (3, None, False)


def check_a_group_that_refused_a_fork_is_removed(stock: CgroupStock) -> None:
    # The program's RLIMIT_NPROC refuses its forks before pids.max does, so no run reaches
    # this counter; a process of the test's own does.
    group = stock.take()
    with open(os.path.join(group.dirs["pids"], "pids.max"), "w") as out:
        out.write("1")

    def fork_refused() -> None:
        with open(os.path.join(group.dirs["pids"], "cgroup.procs"), "w") as out:
            out.write("0")
        with pytest.raises(BlockingIOError):
            os.fork()

    child = in_child(fork_refused)
    assert os.waitpid(child, 0)[1] == 0
    assert group.pids_max_hit()
    dirs = dict(group.dirs)
    stock.give_back(group)
    assert len(stock) == 0, "a group whose pids.max refused a fork was kept"
    assert not any(os.path.exists(path) for path in dirs.values())


def check_a_group_with_a_process_left_is_removed(stock: CgroupStock) -> None:
    group = stock.take()
    child = in_child(lambda: time.sleep(60))
    try:
        for procs in group.procs_files:
            with open(procs, "w") as out:
                out.write(str(child))
        dirs = dict(group.dirs)
        stock.give_back(group)
        assert group.dirs == {}, "the run's object still reaches the groups"
        assert len(stock) == 0, "a group holding a process was kept"
        assert not any(os.path.exists(path) for path in dirs.values())
        assert os.waitpid(child, 0)[1] == signal.SIGKILL
    finally:
        _end(child)


def check_a_group_charged_with_memory_is_removed(stock: CgroupStock) -> None:
    group = stock.take()

    def charge() -> None:
        # Pages of a file on the host's /dev/shm stay charged to the writer's group after it
        # exits, as the page cache a run read in does.
        with open(os.path.join(group.dirs["memory"], "cgroup.procs"), "w") as out:
            out.write("0")
        with open(CHARGE_FILE, "wb") as out:
            out.write(b"x" * CHARGED_BYTES)

    child = in_child(charge)
    try:
        assert os.waitpid(child, 0)[1] == 0
        assert group.memory_charged_bytes() > cgroup_stock.KEEP_MAX_CHARGED_BYTES
        dirs = dict(group.dirs)
        stock.give_back(group)
        assert len(stock) == 0, "a group still charged with the run's memory was kept"
        assert not any(os.path.exists(path) for path in dirs.values())
    finally:
        if os.path.exists(CHARGE_FILE):
            os.unlink(CHARGE_FILE)


def check_runs_may_raise_and_lower_the_memory_limit(backend: BwrapBackend) -> None:
    for memory_mib in (64, 512, 64, 512):
        result = run_then_settle(
            backend,
            "print(len(bytearray(40 << 20)))",
            Limits(wall_time_s=10, memory_mib=memory_mib),
        )
        assert result.stdout == f"{40 << 20}\n", result.stderr[-500:]
    assert len(stock_of(backend)) > 0, "no group was kept: nothing above was reused"


def in_child(work: Callable[[], object]) -> int:
    """Fork a child that does `work`, then exits 0 (1 if it raised); its pid."""
    child = os.fork()
    if child == 0:
        status = 1
        try:
            work()
            status = 0
        finally:
            os._exit(status)
    return child


def _end(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


# --- the tests ------------------------------------------------------------------------------


def test_a_clean_group_is_kept_handed_out_again_and_removed_on_close():
    stock = CgroupStock(PARENTS)
    group = stock.take()
    dirs = dict(group.dirs)
    stock.give_back(group)
    assert (group.dirs, len(stock)) == ({}, 1)
    again = stock.take()
    assert again.dirs == dirs
    stock.give_back(again)
    stock.close()
    assert not any(os.path.exists(path) for path in dirs.values())
    late = CgroupStock(PARENTS)
    late.close()
    given_after_close = late.take()
    late.give_back(given_after_close)
    assert len(late) == 0


def test_a_group_with_a_process_left_is_removed(stock):
    check_a_group_with_a_process_left_is_removed(stock)


def test_a_group_charged_with_memory_is_removed(stock):
    check_a_group_charged_with_memory_is_removed(stock)


def test_a_group_that_refused_a_fork_is_removed(stock):
    check_a_group_that_refused_a_fork_is_removed(stock)


def test_a_memory_kill_is_not_named_again_in_the_next_run(backend):
    check_a_memory_kill_is_not_named_again_in_the_next_run(backend)


def test_runs_may_raise_and_lower_the_memory_limit(backend):
    check_runs_may_raise_and_lower_the_memory_limit(backend)


def test_zygote_runs_one_after_another_make_no_new_groups(backend):
    assert run_then_settle(backend, "print(1)").stdout == "1\n"
    before = _groups_made()
    for _ in range(5):
        assert run_then_settle(backend, "print(1)").stdout == "1\n"
    assert _groups_made() == before


def _groups_made() -> set[str]:
    parent = PARENTS["pids"]
    return {name for name in os.listdir(parent) if name.startswith(f"undoable-{os.getpid()}-")}


# --- sabotage: each check of the stock switched off ------------------------------------------


def _sabotaged(monkeypatch: pytest.MonkeyPatch, clean: Callable[..., bool]) -> None:
    monkeypatch.setattr(CgroupStock, "_clean", staticmethod(clean))


def test_sabotage_keeping_a_group_with_a_process_is_caught(monkeypatch, stock):
    _sabotaged(monkeypatch, lambda group: True)
    with pytest.raises(AssertionError):
        check_a_group_with_a_process_left_is_removed(stock)


def test_sabotage_keeping_a_charged_group_is_caught(monkeypatch, stock):
    monkeypatch.setattr(cgroup_stock, "KEEP_MAX_CHARGED_BYTES", 1 << 40)
    with pytest.raises(AssertionError):
        check_a_group_charged_with_memory_is_removed(stock)


def test_sabotage_keeping_a_group_whose_pids_max_was_hit_is_caught(monkeypatch, stock):
    _sabotaged(monkeypatch, lambda group: group.empty())
    with pytest.raises(AssertionError):
        check_a_group_that_refused_a_fork_is_removed(stock)


def test_sabotage_keeping_a_group_with_an_oom_kill_is_caught(monkeypatch):
    _sabotaged(monkeypatch, lambda group: group.empty())
    assert_caught(check_a_memory_kill_is_not_named_again_in_the_next_run, make_backend)


def test_sabotage_memory_limits_written_in_one_order_are_caught(monkeypatch):
    monkeypatch.setattr(cgroups, "memory_limit_order", lambda before, limit: cgroups.MEMORY_PAIR)
    assert_caught(check_runs_may_raise_and_lower_the_memory_limit, make_backend)
