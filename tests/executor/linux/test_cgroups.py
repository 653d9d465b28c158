"""SandboxCgroup's limit files, on plain folders standing in for the cgroup hierarchy."""

from pathlib import Path

from executor.limits import Limits
from executor.linux.cgroups import SandboxCgroup

# The control files a v1 group has from the start (the host writes them, never creates them).
CONTROLS = {
    "memory": ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"),
    "pids": ("pids.max",),
    "cpu": ("cpu.cfs_period_us", "cpu.cfs_quota_us"),
}


def make_controls(tmp_path: Path) -> None:
    for controller, names in CONTROLS.items():
        (tmp_path / controller).mkdir(exist_ok=True)
        for name in names:
            (tmp_path / controller / name).touch()


def groups(tmp_path: Path) -> SandboxCgroup:
    make_controls(tmp_path)
    return SandboxCgroup({controller: str(tmp_path / controller) for controller in CONTROLS})


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

    make_controls(tmp_path)
    cgroup.apply(Limits(memory_mib=32))
    assert (tmp_path / "memory" / "memory.limit_in_bytes").read_text() == str(32 * 1024 * 1024)
