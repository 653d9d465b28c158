"""Workspace uploads are all or nothing: any refused entry leaves the workspace as it was, and
every refusal is a message on the page, never a 500."""

from __future__ import annotations

import errno
import io
import os
import stat
import zipfile
from pathlib import Path

import pytest
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from tests.factories import QueryFactory
from webapp.workspaces import services as ws
from webapp.workspaces import uploads

pytestmark = pytest.mark.usefixtures("workspaces_root")


def a_zip(files: dict[str, bytes], *, links: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        for name in links:
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, "/etc/passwd")
    return buffer.getvalue()


def with_a_corrupt_last_member(files: dict[str, bytes]) -> bytes:
    data = bytearray(a_zip(files))
    last = list(files.values())[-1]
    at = bytes(data).rindex(last)  # stored, not compressed: the member's bytes as written
    data[at] ^= 0xFF
    return bytes(data)


def tree(root: Path) -> dict[str, object]:
    """Everything under `root`: files with their bytes, folders and links by kind."""
    found: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = path.read_bytes()
    return found


def upload(client: Client, query_id: int, name: str, data: bytes):
    files = {"files": SimpleUploadedFile(name, data)}
    return client.post(reverse("workspaces:upload", args=[query_id]), files)


def page_messages(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.fixture
def workspace(owner):
    """An fs query's workspace that already holds a file and a folder."""
    workspace = ws.workspace_for_query(QueryFactory(owner=owner, kind="fs"))
    (workspace.root / "kept.txt").write_bytes(b"before")
    (workspace.root / "docs").mkdir()
    (workspace.root / "docs" / "a.md").write_bytes(b"A")
    return workspace


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("w.zip", b"this is not a zip", "w.zip is not a valid zip file"),
        ("w.zip", a_zip({"a": b"1", "a/b": b"2"}), "a is both a file and a folder"),
        ("w.zip", a_zip({"x/": b"", "x": b"2"}), "x is both a file and a folder"),
        ("w.zip", a_zip({"new.txt": b"1", "../escaped.txt": b"x"}), "invalid file name"),
        ("w.zip", a_zip({"new.txt": b"1", "sub/x": b"2"}, links=("sub/l",)), "is a link"),
        ("w.zip", a_zip({"new.txt": b"1", "kept.txt/inner": b"2"}), "kept.txt is a file"),
        ("w.zip", a_zip({"new.txt": b"1", "docs": b"2"}), "docs is a folder"),
        ("w.zip", with_a_corrupt_last_member({"new.txt": b"1", "z.txt": b"zzzz"}), "z.txt"),
    ],
)
def test_a_refused_upload_is_a_message_and_leaves_the_workspace_as_it_was(
    owner_client, workspace, name, data, message
) -> None:
    before = tree(workspace.root)
    response = upload(owner_client, workspace.uses.get().query_id, name, data)
    assert response.status_code == 302
    [shown] = page_messages(response)
    assert shown.startswith("Upload refused: ")
    assert message in shown
    assert tree(workspace.root) == before
    assert not (workspace.root.parent / "escaped.txt").exists()
    assert sorted(os.listdir(workspace.state_dir)) == ["lock"]  # no staging left behind


def test_a_link_in_the_workspace_is_never_written_through(owner_client, workspace, tmp_path):
    (workspace.root / "out").symlink_to(tmp_path)
    before = tree(workspace.root)
    response = upload(
        owner_client, workspace.uses.get().query_id, "w.zip", a_zip({"out/x.txt": b"x"})
    )
    assert "out is a link in the workspace" in page_messages(response)[0]
    assert tree(workspace.root) == before
    assert list(tmp_path.iterdir()) == []


def test_an_accepted_upload_adds_and_replaces_files(owner_client, workspace) -> None:
    data = a_zip({"kept.txt": b"after", "docs/b.md": b"B", "new/deep/c.txt": b"C"})
    response = upload(owner_client, workspace.uses.get().query_id, "w.zip", data)
    assert page_messages(response) == ["Uploaded 3 file(s) to the workspace."]
    assert tree(workspace.root) == {
        "kept.txt": b"after",
        "docs": "dir",
        "docs/a.md": b"A",
        "docs/b.md": b"B",
        "new": "dir",
        "new/deep": "dir",
        "new/deep/c.txt": b"C",
    }
    assert sorted(os.listdir(workspace.state_dir)) == ["lock"]


def fail_on_the_third_file(monkeypatch) -> None:
    """The disk fills up while the third file is written into the workspace."""
    real = uploads._write_temp
    calls = []

    def write(source, parent, temp, mode):
        calls.append(temp)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(source, parent, temp, mode)

    monkeypatch.setattr(uploads, "_write_temp", write)


FOUR_FILES = {"n1.txt": b"1", "new/n2.txt": b"2", "new/n3.txt": b"3", "n4.txt": b"4"}


def test_a_write_failing_half_way_takes_back_what_was_written(
    owner_client, workspace, monkeypatch
) -> None:
    fail_on_the_third_file(monkeypatch)
    before = tree(workspace.root)
    response = upload(owner_client, workspace.uses.get().query_id, "w.zip", a_zip(FOUR_FILES))
    assert "not enough space" in page_messages(response)[0]
    assert tree(workspace.root) == before


@pytest.mark.sabotage
def test_sabotage_without_the_rollback_a_failed_upload_leaves_files_behind(
    owner_client, workspace, monkeypatch
) -> None:
    fail_on_the_third_file(monkeypatch)
    monkeypatch.setattr(uploads, "_rollback", lambda root, made, written: None)
    before = tree(workspace.root)
    upload(owner_client, workspace.uses.get().query_id, "w.zip", a_zip(FOUR_FILES))
    assert tree(workspace.root) != before


@pytest.mark.sabotage
def test_sabotage_without_catching_a_damaged_archive_the_upload_answers_500(
    owner, workspace, monkeypatch
) -> None:
    monkeypatch.setattr(uploads, "_ZIP_ERRORS", ())
    client = Client(raise_request_exception=False)
    client.force_login(owner)
    assert (
        upload(client, workspace.uses.get().query_id, "w.zip", b"this is not a zip").status_code
        == 500
    )
