"""The cgroups a backend leaves (issue 41, item 13): none once `close()` returns, whatever was
still in them, and those of a killed server are removed by the next one's start, with their
processes and their child groups. On this host's real cgroup v1 hierarchies."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from executor.backends.bwrap.backend import BwrapBackend
from executor.linux import cgroups
from executor.linux.kernel_files import write_text
from executor.spec import RunSpec
from tests.prerequisites import ROOTFS

REPO = Path(__file__).resolve().parents[4]
PARENTS = cgroups.available_parents()
REMOVE_TREE = cgroups.remove_tree  # for the tests' own clean-up, also under sabotage
pytestmark = pytest.mark.skipif(not PARENTS, reason="no cgroup hierarchy this process may write")


def a_dead_pid() -> int:
    ended = subprocess.Popen(["true"])
    ended.wait()
    return ended.pid


@contextlib.contextmanager
def groups_holding_a_process(owner: int, tops: dict[str, str]) -> Iterator[subprocess.Popen]:
    """`tops` (one per controller, named for `owner`), each with a child group that holds a
    sleeping process, as a server killed mid-run leaves them."""
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        for top in tops.values():
            child = os.path.join(top, f"undoable-{owner}-1")
            os.makedirs(child)
            write_text(os.path.join(child, "cgroup.procs"), str(sleeper.pid))
        yield sleeper
    finally:
        sleeper.kill()
        sleeper.wait()
        for top in tops.values():
            REMOVE_TREE(top)


def tops_for(owner: int, prefix: str = "undoable-") -> dict[str, str]:
    return {name: os.path.join(parent, f"{prefix}{owner}-0") for name, parent in PARENTS.items()}


def check_a_start_removes_a_dead_owners_groups(prefix: str = "undoable-") -> None:
    owner = a_dead_pid()
    tops = tops_for(owner, prefix)
    with groups_holding_a_process(owner, tops) as sleeper:
        BwrapBackend(str(ROOTFS), zygote=False).close()  # its start sweeps
        assert [top for top in tops.values() if os.path.exists(top)] == []
        assert sleeper.wait(timeout=10) == -9


# A backend's own groups, and a zygote template's as they were named at the top before.
@pytest.mark.parametrize("prefix", ["undoable-", "undoable-zygote-"])
def test_a_start_removes_a_dead_owners_groups_with_their_processes_and_children(
    prefix: str,
) -> None:
    check_a_start_removes_a_dead_owners_groups(prefix)


# A server with a zygote, a warm pool and one run behind it, killed while it waits.
SERVER = """
import sys
from executor.backends.bwrap.backend import BwrapBackend
from executor.spec import RunSpec
backend = BwrapBackend(sys.argv[1], warm_pool_size=2)
backend.self_check()
backend.run(RunSpec(code="print(1)"), limits=backend.pool_limits)
print("ready", flush=True)
sys.stdin.read()
"""


def groups_of(pid: int) -> list[str]:
    names = (f"undoable-{pid}-", f"undoable-zygote-{pid}-")
    return [
        os.path.join(parent, name)
        for parent in PARENTS.values()
        for name in os.listdir(parent)
        if name.startswith(names)
    ]


def check_a_killed_servers_groups_go_at_the_next_start() -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(ROOTFS)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None and server.stdout.readline() == b"ready\n"
    finally:
        server.kill()
        server.wait()
    try:
        assert groups_of(server.pid) != []  # what it left, or this proves nothing
        BwrapBackend(str(ROOTFS), zygote=False).close()
        assert groups_of(server.pid) == []
    finally:
        for group in groups_of(server.pid):
            REMOVE_TREE(group)


def test_a_killed_servers_groups_go_at_the_next_start() -> None:
    check_a_killed_servers_groups_go_at_the_next_start()


def test_a_start_leaves_a_live_owners_groups_alone() -> None:
    tops = tops_for(os.getppid())  # alive: this test's parent
    with groups_holding_a_process(os.getppid(), tops) as sleeper:
        BwrapBackend(str(ROOTFS), zygote=False).close()
        assert all(os.path.isdir(top) for top in tops.values())
        assert sleeper.poll() is None


def check_close_leaves_no_group(backend: BwrapBackend) -> None:
    """A sandbox group that outlived its run's teardown (with a process in it) goes too."""
    owned = dict(backend.cgroup_parents)
    leaked = {name: os.path.join(group, "undoable-leaked") for name, group in owned.items()}
    try:
        with groups_holding_a_process(os.getpid(), leaked) as sleeper:
            backend.close()
            assert [group for group in owned.values() if os.path.exists(group)] == []
            assert sleeper.wait(timeout=10) == -9
    finally:
        for group in owned.values():
            REMOVE_TREE(group)


def test_close_removes_the_backends_groups_and_what_is_left_in_them() -> None:
    backend = BwrapBackend(str(ROOTFS), warm_pool_size=1)
    backend.self_check()
    assert backend.run(RunSpec(code="print(1)"), limits=backend.pool_limits).stdout == "1\n"
    check_close_leaves_no_group(backend)


def rmdir_only(path: str, timeout_s: float = 5.0) -> bool:
    """The sweep as it was: rmdir, which refuses a group holding a process or a child group."""
    with contextlib.suppress(OSError):
        os.rmdir(path)
    return not os.path.exists(path)


@pytest.mark.sabotage
@pytest.mark.parametrize(
    "check",
    [
        check_a_start_removes_a_dead_owners_groups,
        check_a_killed_servers_groups_go_at_the_next_start,
        lambda: check_close_leaves_no_group(BwrapBackend(str(ROOTFS), zygote=False)),
    ],
    ids=["start", "killed-server", "close"],
)
def test_sabotage_removing_only_empty_groups_is_caught(
    monkeypatch: pytest.MonkeyPatch, check: Callable[[], None]
) -> None:
    monkeypatch.setattr(cgroups, "remove_tree", rmdir_only)
    with pytest.raises(AssertionError):
        check()
