"""Deleting a query takes its workspace off the disk: files, state, the pending copy and its
tmpfs; a server folder keeps the person's files; a rolled-back delete removes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import transaction
from django.test import override_settings
from django.urls import reverse

from executor import quota
from tests.factories import QueryFactory
from tests.webapp.runs.conftest import sandbox_backend, threads_runner  # noqa: F401
from tests.webapp.workspaces.conftest import workspaces_root  # noqa: F401
from webapp.history import services as history
from webapp.queries.models import Query
from webapp.runs import runner, services
from webapp.workspaces import removal
from webapp.workspaces import services as ws
from webapp.workspaces.models import ChangeStatus, PendingChange, Workspace

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")
WRITES = "open('joke.txt', 'w').write('knock knock')\n"


def mount_points() -> list[str]:
    with open(quota.MOUNTINFO) as lines:
        return [line.split(" ")[4] for line in lines]


def mounted_under(folder: Path) -> list[str]:
    return [m for m in mount_points() if m.startswith(str(folder.resolve()))]


@pytest.fixture
def unmount_leftovers(workspaces_root) -> Iterator[None]:  # noqa: F811
    """Sabotaged tests leave a tmpfs: remove it with the real unmount, before the folder goes."""
    real_unmount = quota.unmount
    yield
    for pending in workspaces_root.glob("*/state/pending"):
        real_unmount(pending)


def with_a_pending_fs_change(query: Query) -> Workspace:
    workspace = ws.workspace_for_query(query)
    (workspace.root / "mine.txt").write_text("mine")
    run = services.query_run(query=query)
    assert runner.wait(run.pk, 60)
    assert PendingChange.objects.get(run=run).status == ChangeStatus.PENDING
    assert quota.is_mounted(workspace.state_dir / "pending")
    return workspace


def test_deleting_a_query_removes_its_workspace_and_pending_copy(
    owner,
    owner_client,
    workspaces_root,  # noqa: F811
) -> None:
    query = QueryFactory(owner=owner, kind="fs", forward_code=WRITES)
    workspace = with_a_pending_fs_change(query)
    folder = workspace.root.parent
    response = owner_client.post(reverse("history:delete", args=[query.pk]))
    assert response.status_code == 302
    assert not folder.exists()
    assert mounted_under(workspaces_root) == []


def test_a_server_folder_keeps_the_persons_files_only_our_state_goes(
    owner,
    workspaces_root,  # noqa: F811
) -> None:
    person = workspaces_root / "person"
    person.mkdir(mode=0o755)
    (person / "notes.txt").write_text("theirs")
    query = QueryFactory(owner=owner, kind="fs", forward_code=WRITES)
    with override_settings(UNDOABLE_WORKSPACE_SERVER_FOLDERS=[str(person)]):
        ws.workspace_set_server_folder(workspace=ws.workspace_for_query(query), folder=str(person))
        workspace = with_a_pending_fs_change(query)
    history.query_delete(query=query)
    assert sorted(p.name for p in person.iterdir()) == ["mine.txt", "notes.txt"]
    assert not workspace.state_dir.exists()
    assert mounted_under(workspaces_root) == []


def test_a_rolled_back_delete_removes_nothing(owner) -> None:
    query = QueryFactory(owner=owner, kind="fs", forward_code=WRITES)
    query_id = query.pk  # the instance forgets it in the delete, rolled back or not
    workspace = with_a_pending_fs_change(query)
    with pytest.raises(RuntimeError), transaction.atomic():
        history.query_delete(query=query)
        raise RuntimeError("something after the delete failed")
    assert (workspace.root / "mine.txt").read_text() == "mine"
    assert quota.is_mounted(workspace.state_dir / "pending")
    # The query is still there, and a delete that commits does remove its files.
    history.query_delete(query=Query.objects.get(pk=query_id))
    assert not workspace.root.parent.exists()


@pytest.mark.sabotage
def test_sabotage_removing_before_the_commit_loses_the_files_of_a_query_still_there(
    owner, monkeypatch
) -> None:
    monkeypatch.setattr(history, "_after_commit", lambda work: work())
    query = QueryFactory(owner=owner, kind="fs", forward_code=WRITES)
    query_id = query.pk  # the instance forgets it in the delete, rolled back or not
    workspace = with_a_pending_fs_change(query)
    with pytest.raises(RuntimeError), transaction.atomic():
        history.query_delete(query=query)
        raise RuntimeError("something after the delete failed")
    assert Query.objects.filter(pk=query_id).exists()
    assert not workspace.root.exists()


@pytest.mark.sabotage
@pytest.mark.usefixtures("unmount_leftovers")
def test_sabotage_without_the_unmount_the_pending_tmpfs_stays_mounted(
    owner,
    monkeypatch,
    workspaces_root,  # noqa: F811
) -> None:
    # The deletion reaches the unmount through the executor's top-level name.
    monkeypatch.setattr(removal, "quota_unmount", lambda path: None)
    query = QueryFactory(owner=owner, kind="fs", forward_code=WRITES)
    with_a_pending_fs_change(query)
    history.query_delete(query=query)
    assert mounted_under(workspaces_root) != []


def test_a_workspace_another_query_shares_stays_when_one_query_is_deleted(owner) -> None:
    first = QueryFactory(owner=owner, kind="fs")
    workspace = ws.workspace_for_query(first)
    (workspace.root / "mine.txt").write_text("mine")
    second = QueryFactory(owner=owner, kind="fs")
    ws.workspace_attach(query=second, workspace=workspace)
    history.query_delete(query=first)
    assert (workspace.root / "mine.txt").read_text() == "mine"
    assert ws.workspace_for_query(second).pk == workspace.pk
    history.query_delete(query=second)
    assert not workspace.root.parent.exists()
