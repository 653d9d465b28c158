"""SandboxCgroup's limit files, on plain folders standing in for the cgroup hierarchy."""

from pathlib import Path

from executor.backends.bwrap.cgroups import SandboxCgroup
from executor.limits import Limits


def groups(tmp_path: Path) -> SandboxCgroup:
    dirs = {}
    for controller in ("memory", "pids", "cpu"):
        (tmp_path / controller).mkdir()
        dirs[controller] = str(tmp_path / controller)
    return SandboxCgroup(dirs)


def test_apply_writes_the_limits(tmp_path: Path) -> None:
    cgroup = groups(tmp_path)
    cgroup.apply(Limits(memory_mib=64, max_pids=10))
    assert (tmp_path / "memory" / "memory.limit_in_bytes").read_text() == str(64 * 1024 * 1024)
    assert (tmp_path / "pids" / "pids.max").read_text() == "14"  # the supervisor's allowance
    assert (tmp_path / "cpu" / "cpu.cfs_quota_us").read_text() == "100000"


def test_applying_the_same_limits_again_writes_nothing_and_a_change_is_written(
    tmp_path: Path,
) -> None:
    cgroup = groups(tmp_path)
    cgroup.apply(Limits(memory_mib=64))
    for written in tmp_path.glob("*/*"):
        written.unlink()

    cgroup.apply(Limits(memory_mib=64))
    assert list(tmp_path.glob("*/*")) == []

    cgroup.apply(Limits(memory_mib=32))
    assert (tmp_path / "memory" / "memory.limit_in_bytes").read_text() == str(32 * 1024 * 1024)
