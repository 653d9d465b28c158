"""/api/v1/workspaces: made without a query, files written, listed, read and deleted by the
host, never through a link; shared by the actions that name it."""

from __future__ import annotations

import contextlib
import io
import os
import zipfile
from pathlib import Path

import pytest

from webapp.workspaces import files
from webapp.workspaces.models import Workspace

pytestmark = pytest.mark.usefixtures("workspaces_root")


def new_workspace(persona) -> tuple[int, Path]:
    response = persona.post("/api/v1/workspaces", {})
    assert response.status_code == 201
    workspace_id = response.json()["id"]
    return workspace_id, Workspace.objects.get(pk=workspace_id).root


def test_files_are_written_listed_read_and_deleted(owner):
    wid, root = new_workspace(owner)
    put = owner.put(f"/api/v1/workspaces/{wid}/files/data/raw.bin", b"\x00\x01\xfe\xff")
    assert put.json() == {"path": "data/raw.bin", "size": 4}
    assert (root / "data" / "raw.bin").read_bytes() == b"\x00\x01\xfe\xff"
    listed = owner.get(f"/api/v1/workspaces/{wid}/files").json()
    assert [e["path"] for e in listed["entries"]] == ["data/raw.bin"]
    read = owner.get(f"/api/v1/workspaces/{wid}/files/data/raw.bin")
    assert read.content == b"\x00\x01\xfe\xff"
    assert owner.delete(f"/api/v1/workspaces/{wid}/files/data").status_code == 204
    assert list(root.iterdir()) == []
    assert owner.get(f"/api/v1/workspaces/{wid}/files/data/raw.bin").status_code == 404


def test_a_zip_goes_in_all_or_nothing_and_comes_out(owner):
    wid, root = new_workspace(owner)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("a/b.txt", "bee")
    response = owner.post(f"/api/v1/workspaces/{wid}/zip", None, raw=buffer.getvalue())
    assert [e["path"] for e in response.json()["entries"]] == ["a/b.txt"]
    out = zipfile.ZipFile(io.BytesIO(owner.get(f"/api/v1/workspaces/{wid}/zip").content))
    assert out.read("a/b.txt") == b"bee"
    bad = owner.post(f"/api/v1/workspaces/{wid}/zip", None, raw=b"not a zip")
    assert bad.status_code == 400 and "not a valid zip file" in bad.json()["error"]


def test_another_users_workspace_is_not_found(owner, stranger):
    wid, root = new_workspace(owner)
    owner.put(f"/api/v1/workspaces/{wid}/files/mine.txt", b"mine")
    for response in (
        stranger.get(f"/api/v1/workspaces/{wid}/files"),
        stranger.get(f"/api/v1/workspaces/{wid}/files/mine.txt"),
        stranger.put(f"/api/v1/workspaces/{wid}/files/mine.txt", b"theirs"),
        stranger.delete(f"/api/v1/workspaces/{wid}/files/mine.txt"),
        stranger.get(f"/api/v1/workspaces/{wid}/zip"),
    ):
        assert response.status_code == 404
    assert (root / "mine.txt").read_bytes() == b"mine"


@pytest.mark.parametrize("path", ["../escape.txt", "a/../../escape.txt", "%2e%2e/escape.txt"])
def test_a_path_out_of_the_workspace_is_refused(owner, path):
    wid, root = new_workspace(owner)
    response = owner.put(f"/api/v1/workspaces/{wid}/files/{path}", b"x")
    assert response.status_code in (400, 404)
    assert not (root.parent / "escape.txt").exists()
    assert not (root.parent.parent / "escape.txt").exists()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "host"
    secret.mkdir()
    (secret / "secret.txt").write_text("host secret")
    return secret


def plant_links(root: Path, outside: Path) -> None:
    """What a run could leave behind: links to a host folder and file."""
    os.symlink(outside, root / "out")
    os.symlink(outside / "secret.txt", root / "secret.txt")


def test_links_in_the_workspace_are_never_followed(owner, outside):
    wid, root = new_workspace(owner)
    plant_links(root, outside)
    assert owner.get(f"/api/v1/workspaces/{wid}/files/secret.txt").status_code == 400
    assert owner.get(f"/api/v1/workspaces/{wid}/files/out/secret.txt").status_code == 400
    assert owner.put(f"/api/v1/workspaces/{wid}/files/out/new.txt", b"x").status_code == 400
    assert not (outside / "new.txt").exists()
    assert owner.delete(f"/api/v1/workspaces/{wid}/files/out/secret.txt").status_code == 400
    assert owner.delete(f"/api/v1/workspaces/{wid}/files/out").status_code == 204
    assert (outside / "secret.txt").read_text() == "host secret"
    assert not (root / "out").is_symlink()


@contextlib.contextmanager
def following_parent_of(root: Path, rel: str):
    """parent_of as a careless implementation would be: links followed all the way."""
    full = root / rel
    fd = os.open(full.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield fd, full.name
    finally:
        os.close(fd)


@pytest.mark.sabotage
def test_sabotage_following_links_reads_a_host_file_through_the_workspace(
    owner, outside, monkeypatch
):
    monkeypatch.setattr(files, "parent_of", following_parent_of)
    wid, root = new_workspace(owner)
    plant_links(root, outside)
    assert owner.get(f"/api/v1/workspaces/{wid}/files/out/secret.txt").content == b"host secret"


@pytest.mark.usefixtures("threads_runner")
def test_actions_share_a_workspace_and_its_files_wait_while_a_change_is_pending(owner):
    wid, root = new_workspace(owner)
    owner.put(f"/api/v1/workspaces/{wid}/files/in.txt", b"2")
    code = "open('out.txt', 'w').write(str(int(open('in.txt').read()) * 21))"
    action = owner.post(
        "/api/v1/actions", {"kind": "fs", "forward_code": code, "workspace": wid}
    ).json()
    assert (action["status"], action["workspace"]) == ("pending", wid)
    busy = owner.put(f"/api/v1/workspaces/{wid}/files/in.txt", b"3")
    assert busy.status_code == 409 and "pending change" in busy.json()["error"]
    owner.post(f"/api/v1/actions/{action['id']}/keep", {})
    assert owner.get(f"/api/v1/workspaces/{wid}/files/out.txt").content == b"42"
