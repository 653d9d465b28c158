"""Workspaces become objects of their own: every existing workspace keeps its id (so its folder)
and its query, and gets the query's owner."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.factories import QueryFactory

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("workspaces", "0003_change_words")]
AFTER = [("workspaces", "0004_workspace_of_its_own")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture(autouse=True)
def back_to_the_latest_schema():
    yield
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_each_workspace_keeps_its_id_its_query_and_gets_the_owner():
    query = QueryFactory(kind="fs")
    old_apps = migrate(BEFORE)
    old = old_apps.get_model("workspaces", "Workspace").objects.create(query_id=query.pk)
    new_apps = migrate(AFTER)
    workspace = new_apps.get_model("workspaces", "Workspace").objects.get(pk=old.pk)
    assert workspace.owner_id == query.owner_id
    use = new_apps.get_model("workspaces", "WorkspaceUse").objects.get(query_id=query.pk)
    assert use.workspace_id == old.pk
