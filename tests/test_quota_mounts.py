"""The tests' own clean-up of quota tmpfs (tests/quota_mounts.py) holds also while a sabotage
has switched the product's unmount off: pytest may undo that patch only after the teardown."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor import quota
from tests.quota_mounts import ours_under, remove_var_dir, unmount_under


def mount_under(root: Path) -> Path:
    folder = root / "sessions" / "1" / "workspace"
    folder.mkdir(parents=True)
    assert quota.mount_tmpfs(folder, size_bytes=1 << 20, max_inodes=64)
    return folder


def test_the_teardown_unmounts_while_the_products_unmount_is_patched_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = mount_under(tmp_path)
    assert ours_under(tmp_path) == [str(folder)]
    monkeypatch.setattr(quota, "unmount", lambda path: None)

    unmount_under(tmp_path)

    assert ours_under(tmp_path) == []


def test_a_servers_var_folder_is_unmounted_and_removed(tmp_path: Path) -> None:
    var = tmp_path / "var"
    mount_under(var)

    remove_var_dir(var)

    assert ours_under(tmp_path) == []
    assert not var.exists()
