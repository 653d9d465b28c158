"""`undoable do --kind db --db FILE|URL`: a SQLite file of this machine, or a PostgreSQL URL."""

from __future__ import annotations

import hashlib
import io
import json
import sqlite3

import pexpect
import psycopg
import pytest
from undoable_client import Client

from tests.clients.cli import Cli
from tests.fakes.llm_server import tool_call
from tests.webapp.actions.test_action_undo import database_dump

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("threads_runner", "workspaces_root"),
]
ADD_500 = {
    "forward_code": "db.execute('UPDATE users SET balance = balance + 500')\n",
    "reverse_code": "db.execute('UPDATE users SET balance = balance - 500')\n",
    "explanation": "Adds 500 to every balance.",
    "credentials": [],
    "hosts": [],
    "reversible": True,
}
NOT_CHANGED = (
    "from undoable_client.cli.local_db import LocalDatabase\n"
    "LocalDatabase.unchanged = lambda self: True"
)


@pytest.fixture
def cli(tmp_path, app_server, owner) -> Cli:
    return Cli(tmp_path, app_server, owner.token)


@pytest.fixture
def bank(tmp_path):
    path = tmp_path / "mine" / "bank.db"
    path.parent.mkdir()
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, balance INTEGER)")
        db.execute("INSERT INTO users (balance) VALUES (10), (20)")
    db.close()
    path.chmod(0o640)
    return path


def balances(path) -> list[int]:
    db = sqlite3.connect(path)
    try:
        return [row[0] for row in db.execute("SELECT balance FROM users ORDER BY id")]
    finally:
        db.close()


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def add_500(cli: Cli, bank, decision: str, *, meanwhile=None, patch: str = "") -> tuple[int, str]:
    child = cli.spawn("do", "add 500 to every balance", "--kind", "db", "--db", str(bank),
                      patch=patch)  # fmt: skip
    child.logfile_read = shown = io.StringIO()
    child.expect_exact("Run it?")
    child.sendline("y")
    child.expect_exact("(2 row(s) affected)")
    child.expect_exact("[k]eep or [d]iscard")
    if meanwhile:
        meanwhile()
    child.sendline(decision)
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus, shown.getvalue()


def test_do_db_on_a_local_sqlite_file_kept_replaces_the_file(cli, fake_llm, bank):
    fake_llm.script(tool_call(ADD_500))
    status, shown = add_500(cli, bank, "k")
    assert status == 0, shown
    assert "UPDATE users SET balance = balance + 500" in shown and "applied bank.db" in shown
    assert balances(bank) == [510, 520]
    assert oct(bank.stat().st_mode & 0o777) == oct(0o640)
    assert sorted(p.name for p in bank.parent.iterdir()) == ["bank.db"]


def test_do_db_on_a_local_sqlite_file_discarded_leaves_it_byte_for_byte(cli, fake_llm, bank):
    fake_llm.script(tool_call(ADD_500))
    before = digest(bank)
    status, shown = add_500(cli, bank, "d")
    assert status == 0, shown
    assert digest(bank) == before and balances(bank) == [10, 20]


def write_meanwhile(bank) -> None:
    with sqlite3.connect(bank) as db:
        db.execute("INSERT INTO users (balance) VALUES (30)")
    db.close()


def test_deny_a_local_database_changed_since_it_was_sent_is_not_replaced(
    cli, app_server, owner, fake_llm, bank
):
    fake_llm.script(tool_call(ADD_500))
    status, shown = add_500(cli, bank, "k", meanwhile=lambda: write_meanwhile(bank))
    assert status == 1 and "changed since it" in shown
    assert balances(bank) == [10, 20, 30]  # the write made meanwhile is still there
    assert Client(app_server, owner.token).actions()[0].status == "discarded"


@pytest.mark.sabotage
def test_sabotage_without_the_check_a_changed_database_is_replaced(cli, fake_llm, bank):
    fake_llm.script(tool_call(ADD_500))
    add_500(cli, bank, "k", meanwhile=lambda: write_meanwhile(bank), patch=NOT_CHANGED)
    assert balances(bank) == [510, 520]  # the row written meanwhile is lost


def test_a_database_open_elsewhere_is_refused_before_anything_is_asked(cli, fake_llm, bank):
    bank.with_name("bank.db-wal").write_bytes(b"")
    done = cli.run("do", "add 500", "--kind", "db", "--db", str(bank), "--yes")
    assert done.returncode == 1 and "bank.db-wal exists" in done.stderr
    assert fake_llm.requests == []


@pytest.mark.postgres
def test_do_db_with_a_postgresql_url_sends_it_for_that_call_alone(cli, fake_llm, postgres_server):
    with postgres_server.database() as database:
        with psycopg.connect(database.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE users (id SERIAL PRIMARY KEY, balance INTEGER)")
            conn.execute("INSERT INTO users (balance) VALUES (10), (20)")
        fake_llm.script(tool_call(ADD_500))
        done = cli.run("do", "add 500", "--kind", "db", "--db", database.url, "--yes", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["action"]["status"] == "kept"
        with psycopg.connect(database.url) as conn:
            found = [r[0] for r in conn.execute("SELECT balance FROM users ORDER BY id")]
        assert found == [510, 520]
        assert database.url not in json.dumps(fake_llm.requests)
        assert database.url.encode() not in database_dump()
