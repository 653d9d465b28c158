"""Existing changes move to the one vocabulary: a failed run's change was `discarded` and is now
`failed`; a person's Discard (`undone`) and the pending timeout (`rolled_back_timeout`) are both
`discarded`, the latter marked as timed out with its reason."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.factories import RunFactory

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("workspaces", "0002_alter_pendingchange_run")]
AFTER = [("workspaces", "0003_change_words")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture(autouse=True)
def back_to_the_latest_schema():
    yield
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_old_states_are_migrated_to_the_design_words():
    old_apps = migrate(BEFORE)
    change = old_apps.get_model("workspaces", "PendingChange")
    old = {
        "discarded": ("The run failed.", "failed", False),
        "undone": ("Rolled back.", "discarded", False),
        "rolled_back_timeout": ("", "discarded", True),
        "undo_requested": ("", "discard_requested", False),
        "kept": ("Committed.", "kept", False),
        "pending": ("", "pending", False),
    }
    ids = {}
    for status, (message, _, _) in old.items():
        run_id = RunFactory().pk
        ids[status] = change.objects.create(
            run_id=run_id, kind="db", status=status, message=message
        ).pk
    new_apps = migrate(AFTER)
    migrated = new_apps.get_model("workspaces", "PendingChange")
    for status, (_message, new_status, timed_out) in old.items():
        row = migrated.objects.get(pk=ids[status])
        assert (row.status, row.timed_out) == (new_status, timed_out), status
    timeout_row = migrated.objects.get(pk=ids["rolled_back_timeout"])
    assert "nobody chose Keep or Discard in time" in timeout_row.message
    # And back: the reverse migration restores every old word.
    back_apps = migrate(BEFORE)
    restored = back_apps.get_model("workspaces", "PendingChange")
    assert {row.pk: row.status for row in restored.objects.all()} == {
        pk: status for status, pk in ids.items()
    }
