"""Undo and the db and rest kinds through the API: a deleted file comes back byte for byte with
its mode, a db change is discarded or kept, a rest action's undo deletes the message it posted
with the ts from FORWARD_OUTPUT, and the credential never reaches the database or the logs."""

from __future__ import annotations

import json
import logging
import sqlite3
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from tests.servers import PASSWORD
from tests.webapp.runs.waiting import wait_until
from webapp.actions import output
from webapp.workspaces import decisions
from webapp.workspaces.models import Workspace
from webapp.workspaces.reaper import fs_pending_expire

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fakes"))
from slack_server import FakeSlackServer  # noqa: E402

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")

ADD_500 = "db.execute('UPDATE accounts SET balance = balance + 500')\n"
SUB_500 = "db.execute('UPDATE accounts SET balance = balance - 500')\n"


def create(persona, body):
    response = persona.post("/api/v1/actions", body)
    assert response.status_code == 201, response.text
    return response.json()


def root_of(action):
    return Workspace.objects.get(pk=action["workspace"]).root


def test_a_pending_delete_undone_restores_the_file_byte_for_byte_with_its_mode(owner):
    first = create(
        owner, {"kind": "fs", "forward_code": "open('keep.bin','wb').write(bytes(range(256)))"}
    )
    owner.post(f"/api/v1/actions/{first['id']}/keep", {})
    target = root_of(first) / "keep.bin"
    target.chmod(0o640)
    before = target.read_bytes()
    body = {
        "kind": "fs",
        "forward_code": "import os\nos.remove('keep.bin')\n",
        "workspace": first["workspace"],
    }
    second = create(owner, body)
    assert second["status"] == "pending"
    assert [(e["path"], e["action"]) for e in second["change"]["entries"]] == [
        ("keep.bin", "deleted")
    ]
    undone = owner.post(f"/api/v1/actions/{second['id']}/undo", {"credentials": {}}).json()
    assert undone["status"] == "discarded"
    assert target.read_bytes() == before == bytes(range(256))
    assert target.stat().st_mode & 0o7777 == 0o640


def test_a_kept_fs_action_is_undone_by_its_reverse_program(owner):
    action = create(
        owner,
        {
            "kind": "fs",
            "forward_code": "open('joke.txt','w').write('knock')",
            "reverse_code": "import os\nos.remove('joke.txt')\n",
        },
    )
    owner.post(f"/api/v1/actions/{action['id']}/keep", {})
    assert (root_of(action) / "joke.txt").exists()
    undone = owner.post(f"/api/v1/actions/{action['id']}/undo", {}).json()
    assert undone["status"] == "reversed", undone
    assert not (root_of(action) / "joke.txt").exists()


def balances(action) -> list[int]:
    with sqlite3.connect(root_of(action) / "bank.sqlite3") as db:
        return [row[0] for row in db.execute("SELECT balance FROM accounts ORDER BY id")]


@pytest.fixture
def bank(owner) -> dict:
    """A workspace holding bank.sqlite3 with two accounts (made by a kept db action)."""
    setup = (
        "db.execute('CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER)')\n"
        "db.execute('INSERT INTO accounts (balance) VALUES (100), (250)')\n"
    )
    made = create(owner, {"kind": "db", "forward_code": setup, "db": {"sqlite": "bank.sqlite3"}})
    assert made["status"] == "pending", made
    assert owner.post(f"/api/v1/actions/{made['id']}/keep", {}).json()["status"] == "kept"
    return made


def test_a_db_action_on_sqlite_discarded_leaves_balances_and_kept_changes_them(owner, bank):
    body = {
        "kind": "db",
        "forward_code": ADD_500,
        "workspace": bank["workspace"],
        "db": {"sqlite": "bank.sqlite3"},
    }
    discarded = create(owner, body)
    assert discarded["status"] == "pending"
    [statement] = discarded["change"]["entries"]
    assert statement["path"] == "UPDATE accounts SET balance = balance + 500"
    assert "2" in statement["summary"]  # the row count
    assert (
        owner.post(f"/api/v1/actions/{discarded['id']}/discard", {}).json()["status"] == "discarded"
    )
    assert balances(bank) == [100, 250]
    kept = create(owner, body)
    assert owner.post(f"/api/v1/actions/{kept['id']}/keep", {}).json()["status"] == "kept"
    assert balances(bank) == [600, 750]


POST = """
import os, requests
r = requests.post(os.environ["SLACK_URL"] + "/chat.postMessage",
                  headers={"Authorization": "Bearer " + os.environ["SLACK_TOKEN"]},
                  json={"channel": "C1", "text": "a joke"})
print(r.text)
"""
DELETE = """
import json, os, requests
sent = json.loads(os.environ["FORWARD_OUTPUT"].splitlines()[0])
r = requests.post(os.environ["SLACK_URL"] + "/chat.delete",
                  headers={"Authorization": "Bearer " + os.environ["SLACK_TOKEN"]},
                  json={"channel": sent["channel"], "ts": sent["ts"]})
print(r.json()["ok"])
"""
CANARY = "xoxb-canary-7f3a9c1e"


def test_a_rest_action_undo_deletes_its_message_and_the_credential_is_nowhere(owner, caplog):
    caplog.set_level(logging.DEBUG)
    with FakeSlackServer(token=CANARY) as slack:
        creds = {"SLACK_URL": slack.base_url, "SLACK_TOKEN": CANARY}
        body = {
            "kind": "rest",
            "forward_code": POST + "print(os.environ['SLACK_TOKEN'])\n",
            "reverse_code": DELETE,
            "hosts": [f"127.0.0.1:{slack.port}"],
            "credentials": creds,
            "intent": "post a joke to #general",
        }
        action = create(owner, body)
        assert action["status"] == "pending", action
        assert CANARY not in json.dumps(action) and "****" in action["stdout"]
        ts = json.loads(action["stdout"].splitlines()[0])["ts"]
        assert action["change"]["forward_output"] == action["stdout"]
        without = owner.post(f"/api/v1/actions/{action['id']}/undo", {"credentials": {}})
        assert without.status_code == 400 and "SLACK_TOKEN" in without.json()["error"]
        undone = owner.post(f"/api/v1/actions/{action['id']}/undo", {"credentials": creds}).json()
        assert undone["status"] == "reversed", undone
        assert slack.wait_for_deleted(ts, timeout_s=10)["text"] == "a joke"
    assert CANARY not in caplog.text
    assert CANARY.encode() not in database_dump()


def database_dump() -> bytes:
    """Every row of every table, as bytes."""
    dump = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f'SELECT * FROM "{table}"')  # noqa: S608 (our own table names)
            dump.append(repr(cursor.fetchall()).encode())
    return b"\n".join(dump)


def test_a_rest_action_kept_stays_kept_and_one_not_decided_in_time_expires(owner, settings):
    body = {"kind": "rest", "forward_code": "print('posted')", "reverse_code": "print('unposted')"}
    kept = create(owner, body)
    assert owner.post(f"/api/v1/actions/{kept['id']}/keep", {}).json()["status"] == "kept"
    assert owner.post(f"/api/v1/actions/{kept['id']}/discard", {}).status_code == 409
    settings.UNDOABLE_REST_PENDING_TIMEOUT_S = 0.001
    late = create(owner, body)
    assert late["status"] == "expired"
    assert "The effect stands" in late["error"]
    assert owner.post(f"/api/v1/actions/{late['id']}/undo", {}).json()["status"] == "reversed"


def test_a_pending_db_action_nobody_decides_is_discarded_by_the_timeout_and_says_so(
    owner, bank, settings
):
    settings.UNDOABLE_DB_PENDING_TIMEOUT_S = 1
    body = {
        "kind": "db",
        "forward_code": ADD_500,
        "workspace": bank["workspace"],
        "db": {"sqlite": "bank.sqlite3"},
    }
    action = create(owner, body)
    assert action["status"] == "pending"
    wait_until(
        lambda: owner.get(f"/api/v1/actions/{action['id']}").json()["status"] == "discarded",
        timeout=15,
        what="the pending timeout",
    )
    ended = owner.get(f"/api/v1/actions/{action['id']}").json()
    assert ended["change"]["timed_out"] and "nobody chose Keep or Discard in time" in ended["error"]
    assert balances(bank) == [100, 250]
    late = owner.post(f"/api/v1/actions/{action['id']}/keep", {})
    assert late.status_code == 409 and "this one is discarded" in late.json()["error"]


@pytest.fixture
def pg_url(postgres_server) -> Iterator[str]:
    with postgres_server.database() as database:
        with psycopg.connect(database.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE accounts (id SERIAL PRIMARY KEY, balance INTEGER)")
            conn.execute("INSERT INTO accounts (balance) VALUES (100), (250)")
        yield database.url


def pg_balances(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute("SELECT balance FROM accounts ORDER BY id")]


@pytest.mark.postgres
def test_a_db_action_on_postgresql_discarded_leaves_balances_and_kept_changes_them(owner, pg_url):
    body = {
        "kind": "db",
        "forward_code": ADD_500,
        "db": {"postgres": "BANK_URL"},
        "credentials": {"BANK_URL": pg_url},
    }
    discarded = create(owner, body)
    assert discarded["status"] == "pending", discarded
    assert discarded["change"]["engine"] == "postgres"
    assert owner.post(f"/api/v1/actions/{discarded['id']}/undo", {}).json()["status"] == "discarded"
    assert pg_balances(pg_url) == [100, 250]
    kept = create(owner, body)
    assert owner.post(f"/api/v1/actions/{kept['id']}/keep", {}).json()["status"] == "kept"
    assert pg_balances(pg_url) == [600, 750]
    assert pg_url.encode() not in database_dump()


@pytest.fixture
def mariadb_url(mariadb_server) -> Iterator[str]:
    import mysql.connector

    with mariadb_server.database() as database:
        conn = mysql.connector.connect(
            host="127.0.0.1", port=mariadb_server.port, user="root", password=PASSWORD,
            database=database.name, use_pure=True, autocommit=True,
        )  # fmt: skip
        try:
            cur = conn.cursor()
            cur.execute("CREATE TABLE accounts (id INT AUTO_INCREMENT PRIMARY KEY, balance INT)")
            cur.execute("INSERT INTO accounts (balance) VALUES (100), (250)")
        finally:
            conn.close()
        yield database.url


def mariadb_balances(mariadb_server, url: str) -> list[int]:
    import mysql.connector

    conn = mysql.connector.connect(
        host="127.0.0.1", port=mariadb_server.port, user="root", password=PASSWORD,
        database=url.rsplit("/", 1)[1], use_pure=True,
    )  # fmt: skip
    try:
        cur = conn.cursor()
        cur.execute("SELECT balance FROM accounts ORDER BY id")
        return [row[0] for row in cur.fetchall()]
    finally:
        conn.close()


@pytest.mark.mariadb
def test_a_db_action_on_a_mariadb_url_discarded_leaves_balances_and_kept_changes_them(
    owner, mariadb_server, mariadb_url
):
    body = {
        "kind": "db",
        "forward_code": ADD_500,
        "db": {"url": "BANK_URL"},
        "credentials": {"BANK_URL": mariadb_url},
    }
    discarded = create(owner, body)
    assert discarded["status"] == "pending", discarded
    assert discarded["change"]["engine"] == "mariadb"
    assert owner.post(f"/api/v1/actions/{discarded['id']}/undo", {}).json()["status"] == "discarded"
    assert mariadb_balances(mariadb_server, mariadb_url) == [100, 250]
    kept = create(owner, body)
    assert owner.post(f"/api/v1/actions/{kept['id']}/keep", {}).json()["status"] == "kept"
    assert mariadb_balances(mariadb_server, mariadb_url) == [600, 750]
    assert mariadb_url.encode() not in database_dump()


@pytest.mark.mariadb
def test_a_pending_mariadb_action_nobody_decides_is_rolled_back_by_the_timeout(
    owner, mariadb_server, mariadb_url, settings
):
    settings.UNDOABLE_DB_PENDING_TIMEOUT_S = 1
    body = {
        "kind": "db",
        "forward_code": ADD_500,
        "db": {"url": "BANK_URL"},
        "credentials": {"BANK_URL": mariadb_url},
    }
    action = create(owner, body)
    assert action["status"] == "pending", action
    wait_until(
        lambda: owner.get(f"/api/v1/actions/{action['id']}").json()["status"] == "discarded",
        timeout=15,
        what="the pending timeout",
    )
    assert owner.get(f"/api/v1/actions/{action['id']}").json()["change"]["timed_out"]
    assert mariadb_balances(mariadb_server, mariadb_url) == [100, 250]


def test_a_pending_fs_action_past_its_timeout_is_discarded_by_the_reaper_and_says_so(
    owner, settings
):
    action = create(owner, {"kind": "fs", "forward_code": "open('late.txt', 'w').write('x')"})
    settings.UNDOABLE_FS_PENDING_TIMEOUT_S = 1
    assert fs_pending_expire(now=timezone.now()) == []  # not yet
    ended = fs_pending_expire(now=timezone.now() + timedelta(seconds=2))
    assert len(ended) == 1
    state = owner.get(f"/api/v1/actions/{action['id']}").json()
    assert state["status"] == "discarded" and state["change"]["timed_out"]
    assert "nobody chose Keep or Discard in time" in state["error"]
    assert list(root_of(action).iterdir()) == []
    late = owner.post(f"/api/v1/actions/{action['id']}/keep", {})
    assert late.status_code == 409


def test_a_kept_fs_action_is_not_discarded_by_the_reaper(owner, settings):
    action = create(owner, {"kind": "fs", "forward_code": "open('kept.txt', 'w').write('x')"})
    owner.post(f"/api/v1/actions/{action['id']}/keep", {})
    settings.UNDOABLE_FS_PENDING_TIMEOUT_S = 1
    assert fs_pending_expire(now=timezone.now() + timedelta(seconds=2)) == []
    assert (root_of(action) / "kept.txt").exists()


def test_a_db_keep_whose_holder_is_in_another_process_answers_once_committed(
    owner, bank, monkeypatch
):
    # As from a Celery worker: nothing in this process is woken; the holder polls the row.
    monkeypatch.setattr(decisions, "decision_made", lambda change_id, wait_s=0.0: False)
    body = {
        "kind": "db",
        "forward_code": ADD_500,
        "workspace": bank["workspace"],
        "db": {"sqlite": "bank.sqlite3"},
    }
    kept = create(owner, body)
    assert owner.post(f"/api/v1/actions/{kept['id']}/keep", {}).json()["status"] == "kept"
    assert balances(bank) == [600, 750]
    discarded = create(owner, body)
    answer = owner.post(f"/api/v1/actions/{discarded['id']}/discard", {}).json()
    assert answer["status"] == "discarded"
    assert balances(bank) == [600, 750]


@pytest.mark.sabotage
def test_sabotage_without_waiting_for_the_holder_a_keep_answers_before_it_is_applied(
    owner, bank, monkeypatch
):
    monkeypatch.setattr(decisions, "decision_made", lambda change_id, wait_s=0.0: False)
    monkeypatch.setattr(output, "DECISION_WAIT_S", 0.0)
    body = {
        "kind": "db",
        "forward_code": ADD_500,
        "workspace": bank["workspace"],
        "db": {"sqlite": "bank.sqlite3"},
    }
    action = create(owner, body)
    assert owner.post(f"/api/v1/actions/{action['id']}/keep", {}).json()["status"] == "pending"
