"""An Undo after a Keep runs the reverse program; what it left different from the workspace the
forward run began from is recorded with it and shown (API, page): a report, not an alarm. A
Discard or rollback is verified and shown too."""

from __future__ import annotations

import logging

import pytest

from tests.webapp.actions.test_action_undo import ADD_500, pg_url  # noqa: F401 (a fixture)
from webapp.audit.models import AuditEntry
from webapp.audit.verify import audit_verify
from webapp.workspaces.models import PendingChange

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")

WRITES_TWO = "open('joke.txt', 'w').write('knock')\nopen('notes.txt', 'w').write('who')\n"


def kept_then_undone(owner, reverse_code: str) -> dict:
    action = owner.post(
        "/api/v1/actions",
        {"kind": "fs", "forward_code": WRITES_TWO, "reverse_code": reverse_code},
    ).json()
    assert owner.post(f"/api/v1/actions/{action['id']}/keep", {}).json()["status"] == "kept"
    undone = owner.post(f"/api/v1/actions/{action['id']}/undo", {}).json()
    assert undone["status"] == "reversed", undone
    return undone


def test_a_reverse_program_that_restores_the_workspace_leaves_no_difference(owner):
    undone = kept_then_undone(owner, "import os\nos.remove('joke.txt')\nos.remove('notes.txt')\n")
    check = undone["reverse"]["undo_check"]
    assert (check["matched"], check["differences"], check["diff"]) == (True, 0, [])
    assert check["before"] == check["after"]
    # The ledger's entry for the reverse program's Keep holds both digests.
    kept = AuditEntry.objects.filter(event="keep").order_by("seq").last()
    assert kept is not None
    assert (kept.digests["state_before"], kept.digests["matched"]) == (check["before"], True)
    assert audit_verify()[1] is None


def test_what_a_reverse_program_left_behind_is_named_and_shown(owner, caplog):
    undone = kept_then_undone(owner, "import os\nos.remove('joke.txt')\n")
    check = undone["reverse"]["undo_check"]
    assert check["matched"] is False and check["differences"] == 1
    [left] = check["diff"]
    assert (left["path"], left["change"]) == ("notes.txt", "extra")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # not an alarm
    owner.client.force_login(owner.user)
    page = owner.client.get(f"/queries/{undone['id']}/").content.decode()
    assert "The undo left these differences" in page
    assert "<code>notes.txt</code> extra" in page


def test_a_discard_is_verified_on_the_page(owner):
    action = owner.post("/api/v1/actions", {"kind": "fs", "forward_code": WRITES_TWO}).json()
    owner.post(f"/api/v1/actions/{action['id']}/discard", {})
    check = PendingChange.objects.get(run__query_id=action["id"]).undo_check
    assert check["matched"] is True
    entry = AuditEntry.objects.get(event="discard")
    assert (entry.digests["state_before"], entry.digests["state_after"]) == (
        check["before"],
        check["after"],
    )
    owner.client.force_login(owner.user)
    page = owner.client.get(f"/queries/{action['id']}/").content.decode()
    assert "Verified: the workspace is as it was before the run" in page


@pytest.mark.postgres
def test_a_postgresql_rollback_is_verified_on_the_touched_tables(owner, pg_url):  # noqa: F811
    body = {"kind": "db", "forward_code": ADD_500, "db": {"url": "BANK_URL"},
            "credentials": {"BANK_URL": pg_url}}  # fmt: skip
    action = owner.post("/api/v1/actions", body).json()
    assert action["status"] == "pending", action
    discarded = owner.post(f"/api/v1/actions/{action['id']}/discard", {}).json()
    check = discarded["change"]["undo_check"]
    assert (check["matched"], check["tables"]) == (True, ["public.accounts"])
    owner.client.force_login(owner.user)
    page = owner.client.get(f"/queries/{action['id']}/").content.decode()
    assert (
        "Verified: the database is as it was before the run (tables read: public.accounts)" in page
    )
