"""The workspace panel's pages: owner only, upload/download, hosts, Keep/Discard by POST."""

from __future__ import annotations

import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from tests.factories import QueryFactory, RunFactory
from webapp.workspaces import services as ws
from webapp.workspaces.models import ChangeStatus, PendingChange

pytestmark = pytest.mark.usefixtures("workspaces_root")


def a_zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_the_owner_uploads_a_zip_and_downloads_it_back(owner, owner_client):
    query = QueryFactory(owner=owner, kind="fs")
    upload = SimpleUploadedFile("w.zip", a_zip({"a.txt": b"A", "sub/.hidden": b"H"}))
    response = owner_client.post(reverse("workspaces:upload", args=[query.pk]), {"files": upload})
    assert response.status_code == 302
    data = owner_client.get(reverse("workspaces:download", args=[query.pk])).content
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert {n: archive.read(n) for n in archive.namelist()} == {
            "a.txt": b"A",
            "sub/.hidden": b"H",
        }


def test_a_zip_cannot_write_outside_the_workspace(owner, owner_client):
    query = QueryFactory(owner=owner, kind="fs")
    workspace = ws.workspace_for_query(query)
    upload = SimpleUploadedFile("evil.zip", a_zip({"../escaped.txt": b"x"}))
    owner_client.post(reverse("workspaces:upload", args=[query.pk]), {"files": upload})
    assert not (workspace.root.parent / "escaped.txt").exists()
    assert list(workspace.root.iterdir()) == []


def test_a_stranger_gets_404_for_the_panel_and_the_change(owner, stranger_client):
    query = QueryFactory(owner=owner, kind="fs")
    change = PendingChange.objects.create(
        run=RunFactory(query=query), kind="fs", status=ChangeStatus.PENDING
    )
    assert stranger_client.get(reverse("workspaces:panel", args=[query.pk])).status_code == 404
    assert stranger_client.get(reverse("workspaces:download", args=[query.pk])).status_code == 404
    url = reverse("workspaces:change-keep", args=[change.pk])
    assert stranger_client.post(url).status_code == 404
    change.refresh_from_db()
    assert change.status == ChangeStatus.PENDING


def test_the_owner_edits_the_allowed_hosts(owner, owner_client):
    query = QueryFactory(owner=owner, kind="rest", hosts=["a.example"])
    owner_client.post(
        reverse("workspaces:hosts", args=[query.pk]), {"hosts": "slack.com\n127.0.0.1:8080\n"}
    )
    query.refresh_from_db()
    assert query.hosts == ["slack.com", "127.0.0.1:8080"]
    panel = owner_client.get(reverse("workspaces:panel", args=[query.pk])).content.decode()
    assert "slack.com\n127.0.0.1:8080" in panel


def test_the_panel_says_undo_is_best_effort_for_an_irreversible_action(owner, owner_client):
    query = QueryFactory(owner=owner, kind="rest", reversible=False)
    page = owner_client.get(reverse("queries:query-detail", args=[query.pk])).content.decode()
    assert "best effort" in page
    assert 'data-reversible="false"' in page
