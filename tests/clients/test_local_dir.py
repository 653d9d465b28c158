"""`undoable do --dir`: a folder of this machine is the workspace. The change comes back from a
server the CLI does not trust; these prove how it is applied (deny, then sabotage)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from undoable_client.cli import local_dir
from undoable_client.cli.local_dir import LocalDirError, apply_change, pack


def a_tar(*members: tuple[str, bytes | str, str]) -> bytes:
    """Members (name, content or link target, type "file" | "symlink")."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = str(data)
                archive.addfile(info)
            else:
                blob = data if isinstance(data, bytes) else data.encode()
                info.size = len(blob)
                info.mode = 0o4777  # setuid and world-writable: the filter must mask them
                archive.addfile(info, io.BytesIO(blob))
    return buffer.getvalue()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "a.txt").write_text("a")
    return tmp_path / "mine"


def test_an_added_file_is_written_with_its_mode_masked(folder):
    apply_change(
        folder, a_tar(("joke.txt", "knock", "file")), [{"path": "joke.txt", "action": "added"}]
    )
    assert (folder / "joke.txt").read_text() == "knock"
    assert (folder / "joke.txt").stat().st_mode & 0o7777 == 0o755


# The hostile server's answer: a link out of the folder, then a file written through it.
THROUGH_A_LINK = [("out", "..", "symlink"), ("out/escaped.txt", "pwned", "file")]
ENTRIES = [{"path": "out", "action": "added"}, {"path": "out/escaped.txt", "action": "added"}]


def test_deny_a_link_out_of_the_folder_in_the_servers_tar_is_refused(folder):
    with pytest.raises(tarfile.FilterError):
        apply_change(folder, a_tar(*THROUGH_A_LINK), ENTRIES)
    assert not (folder.parent / "escaped.txt").exists()


@pytest.mark.sabotage
def test_sabotage_without_the_data_filter_the_tar_writes_outside_the_folder(folder, monkeypatch):
    monkeypatch.setattr(local_dir, "EXTRACT_FILTER", "fully_trusted")
    apply_change(folder, a_tar(*THROUGH_A_LINK), ENTRIES)
    assert (folder.parent / "escaped.txt").read_text() == "pwned"


def test_deny_a_path_leaving_the_folder_is_refused_before_anything_is_written(folder):
    with pytest.raises(LocalDirError):
        apply_change(
            folder, a_tar(("../x.txt", "x", "file")), [{"path": "../x.txt", "action": "added"}]
        )
    assert not (folder.parent / "x.txt").exists()


def test_deny_a_deletion_does_not_follow_a_link_out_of_the_folder(folder):
    (folder.parent / "precious.txt").write_text("keep me")
    (folder / "link").symlink_to(folder.parent)
    with pytest.raises(LocalDirError):
        apply_change(folder, a_tar(), [{"path": "link/precious.txt", "action": "deleted"}])
    assert (folder.parent / "precious.txt").read_text() == "keep me"


@pytest.mark.sabotage
def test_sabotage_a_deletion_that_follows_links_removes_a_file_outside(folder, monkeypatch):
    (folder.parent / "precious.txt").write_text("keep me")
    (folder / "link").symlink_to(folder.parent)
    monkeypatch.setattr(local_dir, "delete_no_follow", lambda root, path: os.unlink(root / path))
    local_dir.apply_change(folder, a_tar(), [{"path": "link/precious.txt", "action": "deleted"}])
    assert not (folder.parent / "precious.txt").exists()


def test_a_folder_past_the_size_cap_is_refused_with_a_clear_message(folder, monkeypatch):
    monkeypatch.setattr(local_dir, "MAX_DIR_BYTES", 10)
    (folder / "big.bin").write_bytes(b"x" * 11)
    with pytest.raises(LocalDirError, match="too large to send"):
        pack(folder)


def test_a_folder_with_a_link_is_refused(folder):
    (folder / "link").symlink_to("/etc/passwd")
    with pytest.raises(LocalDirError, match="symbolic link"):
        pack(folder)
