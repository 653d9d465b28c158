"""The client package drives actions and workspaces against the product's real HTTP server,
real sandboxes and the embedded runner: the proofs of issue 43's actions API."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import sys
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest
from undoable_client import ApiError, AsyncClient, Client

from tests.webapp.actions.test_action_undo import database_dump
from webapp.actions import output
from webapp.runs.models import Run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))
from slack_server import FakeSlackServer  # noqa: E402

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("threads_runner", "workspaces_root"),
]


@pytest.fixture
def client(app_server, owner) -> Client:
    return Client(app_server, owner.token)


def test_an_fs_action_writes_a_joke_streams_its_output_and_is_kept(client):
    seen: list[str] = []
    code = "print('writing', flush=True)\nopen('joke.txt', 'w').write('knock knock\\n')\n"
    action = client.action(
        "fs", code, intent="tell a joke", on_output=lambda c: seen.append(c["text"])
    )
    assert "".join(seen) == "writing\n"
    assert action.status == "pending"
    assert [(e["path"], e["action"]) for e in action.change["entries"]] == [("joke.txt", "added")]
    workspace = client.workspace(action.workspace)
    assert workspace.list_files() == []
    action.keep()
    assert action.status == "kept"
    assert workspace.read_file("joke.txt") == b"knock knock\n"
    assert client.get_action(action.id).status == "kept"


def test_a_deleted_file_comes_back_byte_for_byte_with_its_mode(client, workspaces_root):
    workspace = client.workspace()
    blob = bytes(range(256)) * 3
    workspace.write_file("ledger.bin", blob)
    root = next(workspaces_root.glob(f"{workspace.id}/files"))
    os.chmod(root / "ledger.bin", 0o600)
    action = client.action("fs", "import os\nos.remove('ledger.bin')\n", workspace=workspace.id)
    assert [(e["path"], e["action"]) for e in action.change["entries"]] == [
        ("ledger.bin", "deleted")
    ]
    assert action.undo().status == "discarded"
    assert workspace.read_file("ledger.bin") == blob
    assert os.stat(root / "ledger.bin").st_mode & 0o7777 == 0o600


SETUP = (
    "db.execute('CREATE TABLE users (id INTEGER PRIMARY KEY, balance INTEGER)')\n"
    "db.execute('INSERT INTO users (balance) VALUES (10), (20), (30)')\n"
)
ADD_500 = "db.execute('UPDATE users SET balance = balance + 500')\n"


def test_a_db_action_on_sqlite_adds_500_discarded_then_kept(client, tmp_path):
    workspace = client.workspace()
    target = {"sqlite": "bank.db"}
    assert client.action("db", SETUP, workspace=workspace.id, db=target).keep().status == "kept"

    def balances() -> list[int]:
        # A private copy, read through the API: the test never opens the workspace's own file.
        scratch = tmp_path / "bank.db"
        scratch.write_bytes(workspace.read_file("bank.db"))
        with sqlite3.connect(scratch) as db:
            return [row[0] for row in db.execute("SELECT balance FROM users ORDER BY id")]

    undone = client.action("db", ADD_500, workspace=workspace.id, db=target)
    assert undone.status == "pending"
    assert undone.undo().status == "discarded"
    assert balances() == [10, 20, 30]
    kept = client.action("db", ADD_500, workspace=workspace.id, db=target)
    assert kept.keep().status == "kept"
    assert balances() == [510, 520, 530]


@pytest.mark.postgres
def test_a_db_action_on_postgresql_adds_500_discarded_then_kept(client, postgres_server):
    with postgres_server.database() as database:
        with psycopg.connect(database.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE users (id SERIAL PRIMARY KEY, balance INTEGER)")
            conn.execute("INSERT INTO users (balance) VALUES (10), (20)")

        def balances() -> list[int]:
            with psycopg.connect(database.url) as conn:
                return [r[0] for r in conn.execute("SELECT balance FROM users ORDER BY id")]

        options = {"db": {"postgres": "BANK_URL"}, "credentials": {"BANK_URL": database.url}}
        assert client.action("db", ADD_500, **options).undo().status == "discarded"
        assert balances() == [10, 20]
        assert client.action("db", ADD_500, **options).keep().status == "kept"
        assert balances() == [510, 520]
        assert database.url.encode() not in database_dump()


POST = """
import os, requests
r = requests.post(os.environ["SLACK_URL"] + "/chat.postMessage",
                  headers={"Authorization": "Bearer " + os.environ["SLACK_TOKEN"]},
                  json={"channel": "C1", "text": "why did the chicken cross the road"})
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
CANARY = "xoxb-canary-client-4d2e8b"


def test_a_rest_action_posts_and_its_undo_deletes_the_message_and_no_canary_is_kept(client, caplog):
    caplog.set_level(logging.DEBUG)
    with FakeSlackServer(token=CANARY) as slack:
        creds = {"SLACK_URL": slack.base_url, "SLACK_TOKEN": CANARY}
        action = client.action(
            "rest",
            POST,
            reverse_code=DELETE,
            hosts=[f"127.0.0.1:{slack.port}"],
            credentials=creds,
            intent="post a joke",
        )
        assert action.status == "pending", action.data
        ts = json.loads(action.stdout)["ts"]
        assert [m["ts"] for m in slack.messages("C1")] == [ts]
        with pytest.raises(ApiError) as without:
            action.undo()
        assert without.value.status == 400 and "SLACK_TOKEN" in without.value.message
        assert action.undo(creds).status == "reversed"
        assert slack.wait_for_deleted(ts, timeout_s=10)["ts"] == ts
        assert action.reverse["stdout"] == "True\n"
    assert CANARY not in caplog.text
    assert CANARY.encode() not in database_dump()


def test_a_retry_with_the_same_idempotency_key_runs_the_action_once(client):
    first = client.action("python", "print('once')", idempotency_key="retry-1")
    again = client.action("python", "print('once')", idempotency_key="retry-1")
    assert (first.id, again.id, again.stdout) == (first.id, first.id, "once\n")
    assert Run.objects.filter(query_id=first.id).count() == 1
    with pytest.raises(ApiError) as other:
        client.action("python", "print('twice')", idempotency_key="retry-1")
    assert other.value.status == 409


def test_another_users_action_and_workspace_answer_404(client, app_server, stranger):
    action = client.action("fs", "open('x', 'w').write('x')")
    theirs = Client(app_server, stranger.token)
    for call in (
        lambda: theirs.get_action(action.id),
        lambda: theirs.request("POST", f"/actions/{action.id}/keep", body=b"{}"),
        lambda: theirs.request("POST", f"/actions/{action.id}/undo", body=b"{}"),
        lambda: theirs.workspace(action.workspace).list_files(),
        lambda: theirs.workspace(action.workspace).read_file("x"),
    ):
        with pytest.raises(ApiError) as refused:
            call()
        assert refused.value.status == 404
    assert client.get_action(action.id).status == "pending"


@pytest.mark.parametrize(
    "raw",
    [b"{", b"\xff\xfe", b'{"kind": "python", "forward_code": "1"' + b"}" * 3, b"[" * 50_000],
)
def test_malformed_and_hostile_json_is_a_400_with_a_clear_error(app_server, owner, raw):
    request = urllib.request.Request(  # noqa: S310 (our own local server)
        f"{app_server}/api/v1/actions",
        data=raw,
        method="POST",
        headers={"Authorization": f"Bearer {owner.token}", "Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)  # noqa: S310
    assert refused.value.code == 400
    assert json.loads(refused.value.read())["error"]
    assert Run.objects.count() == 0


def test_wait_follows_an_action_the_server_answered_before_it_settled(client, monkeypatch):
    monkeypatch.setattr(output, "MAX_WAIT_S", 0.0)  # the server answers at once
    action = client.action("python", "import time\ntime.sleep(1)\nprint('slept')")
    assert action.status in ("queued", "running")
    assert action.wait(timeout_s=60).status == "succeeded"
    assert action.stdout == "slept\n"


def test_the_async_client_runs_and_keeps_an_action(app_server, owner):
    async def main() -> tuple[str, str]:
        client = AsyncClient(app_server, owner.token)
        action = await client.action("fs", "open('a.txt', 'w').write('a')")
        before = action.status
        await action.keep()
        return before, (await client.get_action(action.id)).status

    assert asyncio.run(main()) == ("pending", "kept")
