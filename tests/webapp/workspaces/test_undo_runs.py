"""fs, db and rest runs through the web app's real runner and real bwrap sandboxes."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest
from django.test import override_settings

from executor.kinds.errors import NothingPending
from tests.factories import QueryFactory
from tests.webapp.runs.waiting import wait_until
from webapp.runs import runner, services
from webapp.runs.models import Run, RunDirection, RunStatus
from webapp.workspaces import services as ws
from webapp.workspaces.models import ChangeStatus, PendingChange

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fakes"))
from slack_server import FakeSlackServer  # noqa: E402

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")


def finished(run: Run, timeout: float = 60.0) -> Run:
    assert runner.wait(run.pk, timeout), f"run {run.pk} did not finish"
    run.refresh_from_db()
    return run


def change_of(run: Run) -> PendingChange:
    return PendingChange.objects.get(run=run)


def awaiting_choice(run: Run) -> bool:
    return PendingChange.objects.filter(run=run, status=ChangeStatus.PENDING).exists()


def test_an_fs_run_waits_for_keep_and_undo_restores_nothing_changed():
    query = QueryFactory(kind="fs", forward_code="open('joke.txt','w').write('knock knock\\n')\n")
    workspace = ws.workspace_for_query(query)
    run = finished(services.query_run(query=query))
    assert run.status == RunStatus.SUCCEEDED
    change = change_of(run)
    assert change.status == ChangeStatus.PENDING
    assert [(c["path"], c["action"]) for c in change.changes] == [("joke.txt", "added")]
    ws.change_discard(change=change)
    assert not (workspace.root / "joke.txt").exists()
    with pytest.raises(NothingPending):
        ws.change_keep(change=change_of(run))


def test_undo_after_keep_marks_the_forward_change_reversed_once_its_own_change_is_kept():
    query = QueryFactory(
        kind="fs",
        forward_code="open('joke.txt','w').write('knock knock\\n')\n",
        reverse_code="import os\nos.remove('joke.txt')\n",
    )
    forward = finished(services.query_run(query=query))
    ws.change_keep(change=change_of(forward))
    undo = finished(services.query_run(query=query, direction=RunDirection.REVERSE))
    assert change_of(forward).status == ChangeStatus.KEPT  # the undo's change still waits
    ws.change_keep(change=change_of(undo))
    assert change_of(forward).status == ChangeStatus.REVERSED
    assert f"run #{undo.pk}" in change_of(forward).message
    assert not (ws.workspace_for_query(query).root / "joke.txt").exists()


def test_a_discarded_undo_leaves_the_forward_change_kept():
    query = QueryFactory(
        kind="fs",
        forward_code="open('joke.txt','w').write('knock knock\\n')\n",
        reverse_code="import os\nos.remove('joke.txt')\n",
    )
    forward = finished(services.query_run(query=query))
    ws.change_keep(change=change_of(forward))
    undo = finished(services.query_run(query=query, direction=RunDirection.REVERSE))
    ws.change_discard(change=change_of(undo))
    assert change_of(forward).status == ChangeStatus.KEPT


def test_an_fs_run_kept_is_in_the_workspace_and_its_zip():
    query = QueryFactory(kind="fs", forward_code="open('calculator.py','w').write('print(1)\\n')\n")
    workspace = ws.workspace_for_query(query)
    run = finished(services.query_run(query=query))
    ws.change_keep(change=change_of(run))
    assert (workspace.root / "calculator.py").read_text() == "print(1)\n"
    assert change_of(run).status == ChangeStatus.KEPT
    assert b"calculator.py" in ws.workspace_zip(workspace=workspace)


def test_a_second_fs_run_is_refused_while_a_change_awaits_a_choice():
    query = QueryFactory(kind="fs", forward_code="open('a.txt','w').write('a')\n")
    first = finished(services.query_run(query=query))
    second = finished(services.query_run(query=query))
    assert second.status == RunStatus.FAILED
    assert f"in use by run {first.pk}" in second.error


def test_a_db_run_holds_its_transaction_until_undo():
    query = QueryFactory(kind="db", forward_code="db.execute('CREATE TABLE users (name TEXT)')\n")
    workspace = ws.workspace_for_query(query)
    sqlite3.connect(workspace.root / "database.sqlite3").close()
    run = finished(services.query_run(query=query))
    assert run.status == RunStatus.SUCCEEDED
    assert awaiting_choice(run)
    assert change_of(run).deadline is not None
    assert ws.change_discard(change=change_of(run)).status == ChangeStatus.DISCARDED
    conn = sqlite3.connect(workspace.root / "database.sqlite3")
    assert conn.execute("SELECT name FROM sqlite_master").fetchall() == []
    conn.close()


def test_a_db_run_kept_commits_three_users():
    code = (
        "db.execute('CREATE TABLE users (name TEXT)')\n"
        "db.execute(\"INSERT INTO users VALUES ('a'), ('b'), ('c')\")\n"
    )
    query = QueryFactory(kind="db", forward_code=code)
    workspace = ws.workspace_for_query(query)
    run = finished(services.query_run(query=query))
    assert run.status == RunStatus.SUCCEEDED
    assert [c["path"] for c in change_of(run).changes] == [
        "CREATE TABLE users (name TEXT)",
        "INSERT INTO users VALUES ('a'), ('b'), ('c')",
    ]
    assert ws.change_keep(change=change_of(run)).status == ChangeStatus.KEPT
    conn = sqlite3.connect(workspace.root / "database.sqlite3")
    assert conn.execute("SELECT count(*) FROM users").fetchone() == (3,)
    conn.close()


def test_a_pending_db_transaction_is_discarded_after_the_timeout_with_the_reason():
    query = QueryFactory(kind="db", forward_code="db.execute('CREATE TABLE t (x)')\n")
    workspace = ws.workspace_for_query(query)
    with override_settings(UNDOABLE_DB_PENDING_TIMEOUT_S=1):
        run = finished(services.query_run(query=query))
    wait_until(
        lambda: change_of(run).status == ChangeStatus.DISCARDED,
        timeout=10,
        what="the automatic rollback",
    )
    assert change_of(run).timed_out
    assert "nobody chose Keep or Discard in time" in change_of(run).message
    assert not (workspace.root / "database.sqlite3").exists()
    assert ws.workspace_fs(workspace).pending() is None


POST = """
import os, requests
r = requests.post(os.environ["SLACK_URL"] + "/chat.postMessage",
                  headers={"Authorization": "Bearer " + os.environ["SLACK_TOKEN"]},
                  json={"channel": "C1", "text": "joke"})
print(r.text)
"""
DELETE = """
import json, os, requests
sent = json.loads(os.environ["FORWARD_OUTPUT"])
r = requests.post(os.environ["SLACK_URL"] + "/chat.delete",
                  headers={"Authorization": "Bearer " + os.environ["SLACK_TOKEN"]},
                  json={"channel": sent["channel"], "ts": sent["ts"]})
print(r.json()["ok"])
"""


def test_a_rest_reverse_deletes_the_message_with_the_forward_output():
    with FakeSlackServer(token="xoxb-web") as slack:
        query = QueryFactory(
            kind="rest",
            forward_code=POST,
            reverse_code=DELETE,
            hosts=[f"127.0.0.1:{slack.port}"],
            credential_names=["SLACK_URL", "SLACK_TOKEN"],
        )
        creds = {"SLACK_URL": slack.base_url, "SLACK_TOKEN": "xoxb-web"}
        forward = finished(services.query_run(query=query, credentials=creds))
        assert forward.status == RunStatus.SUCCEEDED, forward.error
        ts = json.loads("".join(forward.chunks.values_list("text", flat=True)))["ts"]
        reverse = finished(
            services.query_run(query=query, direction=RunDirection.REVERSE, credentials=dict(creds))
        )
        assert "True" in "".join(reverse.chunks.values_list("text", flat=True))
        assert slack.wait_for_deleted(ts, timeout_s=5)["text"] == "joke"


def test_a_rest_run_cannot_reach_the_hosts_redis():
    code = "import requests\nprint(requests.get('http://127.0.0.1:6379/').status_code)\n"
    query = QueryFactory(kind="rest", forward_code=code, hosts=["api.example.com"])
    run = finished(services.query_run(query=query))
    assert "".join(run.chunks.values_list("text", flat=True)) == "403\n"
