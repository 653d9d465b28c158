"""executor.quota: a size- and inode-capped tmpfs the kernel enforces, and its clean removal."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor import quota
from executor.errors import ExecutorError

REPO = Path(__file__).resolve().parents[2]
CAP_BYTES = 1 << 20
CHUNK = b"\0" * (64 << 10)


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    """An empty folder; whatever a test mounted on it is gone afterwards."""
    path = tmp_path / "quota"
    path.mkdir()
    yield path
    quota.unmount(path)


def _write_until_full(path: Path, total_bytes: int) -> tuple[int, int | None]:
    """Write `total_bytes` into one file; how many landed, and the errno that stopped it."""
    written = 0
    try:
        with open(path / "big", "wb", buffering=0) as out:
            while written < total_bytes:
                written += out.write(CHUNK)
    except OSError as exc:
        return written, exc.errno
    return written, None


def _capped_writer(path: Path) -> tuple[int, int | None]:
    """Mount a 1 MiB quota on `path` and try to write 3 MiB into it."""
    quota.mount_tmpfs(path, size_bytes=CAP_BYTES, max_inodes=100)
    return _write_until_full(path, 3 * CAP_BYTES)


def _mount_options(path: Path) -> set[str]:
    with open("/proc/self/mountinfo") as lines:
        rows = [line.split(" ") for line in lines if line.split(" ")[4] == str(path)]
    return set(rows[-1][5].split(","))


def test_it_refuses_a_write_past_the_size_cap(folder: Path) -> None:
    written, error = _capped_writer(folder)

    assert error == errno.ENOSPC
    assert written <= CAP_BYTES
    assert (folder / "big").stat().st_size <= CAP_BYTES


def test_it_refuses_a_file_past_the_inode_cap(folder: Path) -> None:
    assert quota.mount_tmpfs(folder, size_bytes=CAP_BYTES, max_inodes=20) is True

    with pytest.raises(OSError) as raised:
        for n in range(100):
            (folder / f"f{n}").touch()

    assert raised.value.errno == errno.ENOSPC
    assert len(os.listdir(folder)) < 20


def test_the_mount_is_nosuid_and_nodev_and_keeps_exec(folder: Path) -> None:
    quota.mount_tmpfs(folder, size_bytes=CAP_BYTES, max_inodes=100)

    options = _mount_options(folder)

    assert {"nosuid", "nodev"} <= options
    assert "noexec" not in options
    assert quota.is_mounted(folder) is True


def test_the_root_gets_the_mode_and_owner_asked_for(folder: Path) -> None:
    quota.mount_tmpfs(folder, size_bytes=CAP_BYTES, max_inodes=100, uid=64123, gid=64123)

    info = folder.stat()

    assert (info.st_mode & 0o7777, info.st_uid, info.st_gid) == (0o711, 64123, 64123)


def test_unmount_leaves_the_empty_folder_and_twice_is_fine(folder: Path) -> None:
    quota.mount_tmpfs(folder, size_bytes=CAP_BYTES, max_inodes=100)
    (folder / "written-inside").write_bytes(b"x")

    quota.unmount(folder)
    quota.unmount(folder)

    assert os.listdir(folder) == []
    assert quota.is_mounted(folder) is False
    assert str(folder) not in Path("/proc/self/mountinfo").read_text()


def test_a_symlink_at_the_path_is_refused_and_never_followed(tmp_path: Path, folder: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(folder)

    with pytest.raises(ExecutorError, match="symlink"):
        quota.mount_tmpfs(link, size_bytes=CAP_BYTES, max_inodes=100)
    quota.mount_tmpfs(folder, size_bytes=CAP_BYTES, max_inodes=100)
    quota.unmount(link)

    assert quota.is_mounted(link) is False
    assert quota.is_mounted(folder) is True


def test_a_non_empty_or_already_mounted_folder_is_refused(folder: Path, tmp_path: Path) -> None:
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep-me").write_bytes(b"x")
    quota.mount_tmpfs(folder, size_bytes=CAP_BYTES, max_inodes=100)

    with pytest.raises(ExecutorError, match="not empty"):
        quota.mount_tmpfs(full, size_bytes=CAP_BYTES, max_inodes=100)
    with pytest.raises(ExecutorError, match="already"):
        quota.mount_tmpfs(folder, size_bytes=CAP_BYTES, max_inodes=100)


def test_without_cap_sys_admin_it_mounts_nothing_and_says_so(folder: Path) -> None:
    probe = (
        "import sys; from pathlib import Path; from executor import quota; "
        "print(quota.mount_tmpfs(Path(sys.argv[1]), size_bytes=1 << 20, max_inodes=10), "
        "quota.supported())"
    )

    done = subprocess.run(
        ["setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin"]
        + [sys.executable, "-c", probe, str(folder)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )

    assert done.stdout.split() == ["False", "False"]
    assert quota.is_mounted(folder) is False


def test_it_is_supported_here_as_root() -> None:
    assert quota.supported() is True


@pytest.mark.sabotage
def test_sabotage_without_the_mount_the_same_writer_writes_past_the_cap(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(quota, "mount_tmpfs", lambda path, **caps: True)

    written, error = _capped_writer(folder)

    assert error is None
    assert written == 3 * CAP_BYTES
