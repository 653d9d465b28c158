"""`undoable do`: GoEx's flow with the scripted fake LLM, at a terminal and in a script."""

from __future__ import annotations

import io
import json
import logging

import pexpect
import pytest
from undoable_client import Client

from tests.clients.cli import Cli
from tests.fakes.llm_server import tool_call
from tests.webapp.actions.test_action_undo import database_dump

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("threads_runner", "workspaces_root"),
]
JOKE = {
    "forward_code": "print('writing', flush=True)\nopen('joke.txt', 'w').write('knock knock\\n')",
    "reverse_code": "import os\nos.remove('joke.txt')",
    "explanation": "Writes a joke to joke.txt.",
    "credentials": [],
    "hosts": [],
    "reversible": True,
}
CANARY = "canary-do-5e1b77"


@pytest.fixture
def cli(tmp_path, app_server, owner) -> Cli:
    return Cli(tmp_path, app_server, owner.token)


@pytest.fixture
def api(app_server, owner) -> Client:
    return Client(app_server, owner.token)


def joke_at_a_terminal(cli: Cli, workspace: int, answers: list[tuple[str, str]]) -> str:
    child = cli.spawn("do", "write a joke to joke.txt", "--kind", "fs", "--workspace",
                      str(workspace))  # fmt: skip
    child.logfile_read = shown = io.StringIO()
    child.expect("Writes a joke")
    child.expect("forward: runs now")
    child.expect("reverse: undoes it")
    for question, answer in answers:
        child.expect_exact(question)
        child.sendline(answer)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, shown.getvalue()
    return shown.getvalue()


def test_do_shows_both_programs_runs_shows_the_change_and_keeps_it(cli, api, fake_llm):
    fake_llm.script(tool_call(JOKE))
    workspace = api.workspace()
    shown = joke_at_a_terminal(cli, workspace.id, [("Run it?", "y"), ("[k]eep or [d]iscard", "k")])
    assert "writing" in shown and "+ joke.txt" in shown and "kept" in shown
    assert workspace.read_file("joke.txt") == b"knock knock\n"


def test_do_discarded_leaves_the_workspace_as_it_was(cli, api, fake_llm):
    fake_llm.script(tool_call(JOKE))
    workspace = api.workspace()
    workspace.write_file("old.txt", "old")
    before = workspace.download_zip()
    shown = joke_at_a_terminal(cli, workspace.id, [("Run it?", "y"), ("[k]eep or [d]iscard", "d")])
    assert "+ joke.txt" in shown and "discarded" in shown
    assert [e["path"] for e in workspace.list_files()] == ["old.txt"]
    assert workspace.download_zip() == before


def test_do_with_the_programs_edited_in_the_editor_runs_the_edited_ones(cli, api, fake_llm):
    fake_llm.script(tool_call(JOKE))
    cli.env["EDITOR"] = "sed -i s/knock/KNOCK/"
    workspace = api.workspace()
    joke_at_a_terminal(
        cli, workspace.id, [("Run it?", "e"), ("Run it?", "y"), ("[k]eep or [d]iscard", "k")]
    )
    assert workspace.read_file("joke.txt") == b"KNOCK knock\n"


def test_do_answered_no_runs_nothing(cli, api, fake_llm):
    fake_llm.script(tool_call(JOKE))
    child = cli.spawn("do", "write a joke", "--kind", "fs")
    child.expect_exact("Run it?")
    child.sendline("n")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    assert api.actions() == []


def test_do_yes_json_in_a_script_sends_the_credential_for_that_call_alone(
    cli, api, fake_llm, caplog
):
    caplog.set_level(logging.DEBUG)
    assert cli.run("creds", "add", "API_KEY", input=f"{CANARY}\n").returncode == 0
    code = "import os\nprint(len(os.environ['API_KEY']), os.environ['API_KEY'])"
    fake_llm.script(tool_call({**JOKE, "forward_code": code, "credentials": ["API_KEY"]}))
    done = cli.run("do", "print the key's length", "--kind", "python", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    assert "\x1b[" not in done.stdout + done.stderr
    answer = json.loads(done.stdout)
    assert answer["proposal"]["credentials"] == ["API_KEY"]
    assert (answer["action"]["status"], answer["action"]["stdout"]) == (
        "succeeded",
        f"{len(CANARY)} ****\n",
    )
    assert "API_KEY" in json.dumps(fake_llm.requests[0]) and CANARY not in json.dumps(
        fake_llm.requests
    )
    assert CANARY not in caplog.text
    assert CANARY.encode() not in database_dump()


def test_do_fs_yes_keeps_without_asking(cli, api, fake_llm):
    fake_llm.script(tool_call(JOKE))
    workspace = api.workspace()
    done = cli.run("do", "a joke", "--kind", "fs", "--workspace", str(workspace.id), "--yes")
    assert done.returncode == 0, done.stderr
    assert "+ joke.txt" in done.stdout and "\x1b[" not in done.stdout + done.stderr
    assert workspace.read_file("joke.txt") == b"knock knock\n"


# -- --dir: a folder of this machine is the workspace ----------------------------------------

NOT_CHANGED = (
    "from undoable_client.cli.local_dir import LocalFolder\n"
    "LocalFolder.unchanged = lambda self: True"
)


def joke_in_a_folder(cli: Cli, folder, decision: str, *, meanwhile=None, patch: str = ""):
    child = cli.spawn("do", "write a joke to joke.txt", "--kind", "fs", "--dir", str(folder),
                      patch=patch)  # fmt: skip
    child.logfile_read = shown = io.StringIO()
    child.expect_exact("Run it?")
    child.sendline("y")
    child.expect("joke.txt")
    child.expect_exact("[k]eep or [d]iscard")
    if meanwhile:
        meanwhile()
    child.sendline(decision)
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus, shown.getvalue()


@pytest.fixture
def folder(tmp_path):
    mine = tmp_path / "mine"
    (mine / "notes").mkdir(parents=True)
    (mine / "notes" / "old.txt").write_text("old")
    return mine


def test_do_dir_kept_writes_the_joke_into_the_local_folder(cli, fake_llm, folder):
    fake_llm.script(tool_call(JOKE))
    status, shown = joke_in_a_folder(cli, folder, "k")
    assert status == 0, shown
    assert (folder / "joke.txt").read_text() == "knock knock\n"
    assert (folder / "notes" / "old.txt").read_text() == "old"


def test_do_dir_discarded_leaves_the_folder_byte_for_byte(cli, fake_llm, folder):
    from undoable_client.cli.local_dir import fingerprint

    fake_llm.script(tool_call(JOKE))
    before = fingerprint(folder)
    status, _ = joke_in_a_folder(cli, folder, "d")
    assert status == 0 and fingerprint(folder) == before


def test_deny_a_folder_changed_since_it_was_sent_is_not_written(cli, api, fake_llm, folder):
    fake_llm.script(tool_call(JOKE))
    edit = lambda: (folder / "notes" / "old.txt").write_text("edited meanwhile")  # noqa: E731
    status, shown = joke_in_a_folder(cli, folder, "k", meanwhile=edit)
    assert status == 1 and "changed since it was" in shown
    assert not (folder / "joke.txt").exists()
    assert api.actions()[0].status == "discarded"


@pytest.mark.sabotage
def test_sabotage_without_the_check_a_changed_folder_is_written(cli, fake_llm, folder):
    fake_llm.script(tool_call(JOKE))
    edit = lambda: (folder / "notes" / "old.txt").write_text("edited meanwhile")  # noqa: E731
    joke_in_a_folder(cli, folder, "k", meanwhile=edit, patch=NOT_CHANGED)
    assert (folder / "joke.txt").exists()


def test_do_db_on_a_sqlite_file_shows_the_statements_and_rows_then_keeps(
    cli, api, fake_llm, tmp_path
):
    import sqlite3

    workspace = api.workspace()
    setup = (
        "db.execute('CREATE TABLE users (id INTEGER PRIMARY KEY, balance INTEGER)')\n"
        "db.execute('INSERT INTO users (balance) VALUES (10), (20)')\n"
    )
    api.action("db", setup, workspace=workspace.id, db={"sqlite": "bank.db"}).keep()
    add_500 = "db.execute('UPDATE users SET balance = balance + 500')\n"
    fake_llm.script(tool_call({**JOKE, "forward_code": add_500, "reverse_code": ""}))
    child = cli.spawn("do", "add 500 to every balance", "--kind", "db", "--workspace",
                      str(workspace.id), "--db", "bank.db")  # fmt: skip
    child.logfile_read = shown = io.StringIO()
    child.expect_exact("Run it?")
    child.sendline("y")
    child.expect_exact("[k]eep or [d]iscard")
    child.sendline("k")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, shown.getvalue()
    assert "UPDATE users SET balance = balance + 500" in shown.getvalue()
    assert "(2 row(s) affected)" in shown.getvalue()
    copy = tmp_path / "bank.db"
    copy.write_bytes(workspace.read_file("bank.db"))
    with sqlite3.connect(copy) as db:
        assert [r[0] for r in db.execute("SELECT balance FROM users ORDER BY id")] == [510, 520]


@pytest.mark.mariadb
def test_do_db_url_runs_on_the_credentials_mariadb_database_and_keeps(
    cli, fake_llm, mariadb_server
):
    import mysql.connector

    from tests.servers import PASSWORD

    with mariadb_server.database() as database:
        options = {"host": "127.0.0.1", "port": mariadb_server.port, "user": "root",
                   "password": PASSWORD, "database": database.name, "use_pure": True}  # fmt: skip
        conn = mysql.connector.connect(**options, autocommit=True)
        try:
            conn.cursor().execute("CREATE TABLE users (id INT PRIMARY KEY, balance INT)")
            conn.cursor().execute("INSERT INTO users VALUES (1, 10), (2, 20)")
            assert cli.run("creds", "add", "BANK_URL", input=f"{database.url}\n").returncode == 0
            add_500 = "db.execute('UPDATE users SET balance = balance + 500')\n"
            fake_llm.script(tool_call({**JOKE, "forward_code": add_500, "reverse_code": ""}))
            done = cli.run("do", "add 500 to every balance", "--kind", "db",
                           "--db-url", "BANK_URL", "--yes", "--json")  # fmt: skip
            assert done.returncode == 0, done.stderr
            action = json.loads(done.stdout)["action"]
            assert (action["status"], action["change"]["engine"]) == ("kept", "mariadb"), action
            cursor = conn.cursor()
            cursor.execute("SELECT balance FROM users ORDER BY id")
            assert [row[0] for row in cursor.fetchall()] == [510, 520]
            assert PASSWORD not in done.stdout + done.stderr
        finally:
            conn.close()


def test_do_rest_posts_then_undo_runs_the_reverse_with_the_kept_credentials(cli, api, fake_llm):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))
    from slack_server import FakeSlackServer

    from tests.clients.test_client_actions import DELETE, POST

    with FakeSlackServer(token=CANARY) as slack:
        cli.run("creds", "add", "SLACK_URL", input=f"{slack.base_url}\n")
        cli.run("creds", "add", "SLACK_TOKEN", input=f"{CANARY}\n")
        host = f"127.0.0.1:{slack.port}"
        proposal = {**JOKE, "forward_code": POST, "reverse_code": DELETE,
                    "credentials": ["SLACK_URL", "SLACK_TOKEN"], "hosts": [host]}  # fmt: skip
        fake_llm.script(tool_call(proposal))
        child = cli.spawn("do", "post a joke to Slack", "--kind", "rest", "--host", host)
        child.logfile_read = shown = io.StringIO()
        child.expect_exact("Run it?")
        child.sendline("y")
        child.expect_exact("[k]eep, [u]ndo")
        posted = [m["ts"] for m in slack.messages("C1")]
        child.sendline("u")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0, shown.getvalue()
        assert len(posted) == 1 and slack.wait_for_deleted(posted[0], timeout_s=10)
    assert "reversed" in shown.getvalue() and CANARY not in shown.getvalue()
    assert api.actions()[0].status == "reversed"
