"""The `undoable` command against the live server: piped, as JSON, and at a terminal."""

from __future__ import annotations

import io
import json
import logging
import stat
from pathlib import Path

import pexpect
import pytest

from tests.clients.cli import Cli
from tests.webapp.actions.test_action_undo import database_dump

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("threads_runner", "workspaces_root", "sessions"),
]
ANSI = "\x1b["
CANARY = "canary-cli-7f3a9c1e"
# Sabotage patches, run in the command's own process before it starts.
WIDE_MODE = "from undoable_client.cli import config\nconfig.PRIVATE_MODE = 0o644"
ECHO = (
    "import typer\nfrom undoable_client.cli import main\n"
    "main.ask_secret = lambda label: typer.prompt(label, hide_input=False)"
)


@pytest.fixture
def cli(tmp_path, app_server, owner) -> Cli:
    return Cli(tmp_path, app_server, owner.token)


def record(child: pexpect.spawn) -> io.StringIO:
    child.logfile_read = io.StringIO()
    return child.logfile_read


def test_exec_of_stdin_prints_the_output_and_exits_with_the_programs_code(cli):
    done = cli.run(
        "exec", "-", input="import sys\nprint('hi')\nprint('oops', file=sys.stderr)\nsys.exit(3)\n"
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "hi\n", "oops\n")


def test_exec_json_parses_and_keeps_the_exit_code(cli):
    done = cli.run("exec", "-", "--json", input="print(6 * 7)\nraise SystemExit(5)\n")
    result = json.loads(done.stdout)
    assert (done.returncode, result["stdout"], result["exit_code"]) == (5, "42\n", 5)


def test_piped_output_holds_no_ansi_codes_even_for_tables_and_errors(cli, app_server):
    session = cli.run("session", "new")
    sid = session.stdout.strip()
    put = cli.run("session", "put", sid, "-", "a.txt", input="hello")
    listed = cli.run("session", "ls", sid)
    refused = Cli(cli.home, app_server, "udb_wrong").run("exec", "-", input="print(1)")
    for done in (session, put, listed, refused):
        assert ANSI not in done.stdout + done.stderr
    assert listed.stdout == "a.txt\tfile\t5\n"
    assert refused.returncode == 1 and refused.stderr.startswith("error: missing, invalid")
    assert cli.run("session", "get", sid, "a.txt").stdout == "hello"
    fetched = json.loads(cli.run("session", "get", sid, "a.txt", "--json").stdout)
    assert (fetched["size"], fetched["data_base64"]) == (5, "aGVsbG8=")
    assert cli.run("session", "rm", sid).returncode == 0
    assert cli.run("session", "ls", sid).returncode == 1


def test_every_command_answers_json_that_parses(cli, owner, app_server):
    from undoable_client import Client

    action = Client(app_server, owner.token).action("fs", "open('j.txt', 'w').write('j')")
    sid = json.loads(cli.run("session", "new", "--json").stdout)["id"]
    cli.run("creds", "add", "API_KEY", "--json", input="v\n")
    for args in (
        ["session", "ls", sid],
        ["action", "ls"],
        ["action", "show", str(action.id)],
        ["review"],
        ["creds", "ls"],
        ["action", "keep", str(action.id)],
        ["session", "rm", sid],
    ):
        done = cli.run(*args, "--json")
        assert done.returncode == 0, (args, done.stderr)
        json.loads(done.stdout)
    assert (
        json.loads(cli.run("action", "show", str(action.id), "--json").stdout)["status"] == "kept"
    )
    refused = cli.run("action", "show", "999999", "--json")
    assert refused.returncode == 1 and json.loads(refused.stdout)["error"]


def test_review_lists_the_pending_actions_and_discard_throws_one_away(cli, owner, app_server):
    from undoable_client import Client

    action = Client(app_server, owner.token).action("fs", "open('j.txt', 'w').write('j')")
    assert [a["id"] for a in json.loads(cli.run("review", "--json").stdout)["actions"]] == [
        action.id
    ]
    shown = cli.run("action", "show", str(action.id))
    assert "+ j.txt" in shown.stdout
    assert cli.run("action", "discard", str(action.id)).returncode == 0
    assert json.loads(cli.run("review", "--json").stdout)["actions"] == []


def test_at_a_terminal_exec_shows_the_output(cli, tmp_path):
    (tmp_path / "p.py").write_text("print('from a file')\nraise SystemExit(4)\n")
    child = cli.spawn("exec", "p.py")
    child.expect("from a file")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 4


def test_at_a_terminal_an_action_shows_its_change_in_colour(cli, owner, app_server):
    from undoable_client import Client

    action = Client(app_server, owner.token).action("fs", "open('j.txt', 'w').write('j')")
    child = cli.spawn("action", "show", str(action.id))
    shown = record(child)
    child.expect(pexpect.EOF)
    child.close()
    assert "+ j.txt" in shown.getvalue() and ANSI in shown.getvalue()


# -- login: the token is typed unseen and kept in a file of its owner's alone --------------


def login(cli: Cli, app_server: str, token: str, patch: str = "") -> str:
    bare = Cli(cli.home)  # no UNDOABLE_* in its environment
    child = bare.spawn("login", app_server, patch=patch)
    shown = record(child)
    child.expect("API token")
    child.sendline(token)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, shown.getvalue()
    return shown.getvalue()


def test_login_takes_the_token_unseen_keeps_it_0600_and_later_commands_use_it(
    cli, app_server, owner
):
    shown = login(cli, app_server, owner.token)
    assert owner.token not in shown
    path = cli.home / "config" / "undoable" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == {"url": app_server, "token": owner.token}
    assert Cli(cli.home).run("exec", "-", input="print(1)").stdout == "1\n"


def test_login_with_a_wrong_token_keeps_nothing(cli, app_server):
    child = Cli(cli.home).spawn("login", app_server)
    child.expect("API token")
    child.sendline("udb_wrong")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    assert not (cli.home / "config" / "undoable" / "config.json").exists()


@pytest.mark.sabotage
def test_sabotage_without_the_private_mode_the_config_file_is_world_readable(
    cli, app_server, owner
):
    login(cli, app_server, owner.token, patch=WIDE_MODE)
    path = cli.home / "config" / "undoable" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) != 0o600


@pytest.mark.sabotage
def test_sabotage_with_an_echoing_prompt_the_token_shows_on_screen(cli, app_server, owner):
    assert owner.token in login(cli, app_server, owner.token, patch=ECHO)


# -- credentials: typed unseen, kept here, sent for one call, never kept by the server ------


def add_credential(cli: Cli, name: str, value: str, patch: str = "") -> str:
    child = cli.spawn("creds", "add", name, patch=patch)
    shown = record(child)
    child.expect(name)
    child.sendline(value)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, shown.getvalue()
    return shown.getvalue()


REVERSE = "import os\nprint('key is', os.environ['API_KEY'])\nprint(len(os.environ['API_KEY']))\n"


def test_a_credential_typed_at_the_prompt_is_never_on_screen_in_the_database_or_logs(
    cli, app_server, owner, caplog
):
    from undoable_client import Client

    caplog.set_level(logging.DEBUG)
    shown = add_credential(cli, "API_KEY", CANARY)
    assert CANARY not in shown
    store = cli.home / "config" / "undoable" / "credentials.json"
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    assert cli.run("creds", "ls").stdout == "API_KEY\n"
    # The action names the credential when it is made (a stand-in value then), the real one
    # goes with the undo alone.
    action = Client(app_server, owner.token).action(
        "python", "print('done')", reverse_code=REVERSE, credentials={"API_KEY": "stand-in"}
    )
    undone = cli.run("action", "undo", str(action.id), "--cred", "API_KEY")
    assert undone.returncode == 0, undone.stderr
    assert f"{len(CANARY)}\n" in undone.stdout  # the reverse program had the value
    assert CANARY not in undone.stdout + undone.stderr  # the server masked it in the output
    assert CANARY not in caplog.text
    assert CANARY.encode() not in database_dump()
    assert cli.run("creds", "rm", "API_KEY").returncode == 0
    assert cli.run("creds", "ls").stdout == ""
    assert CANARY not in store.read_text()


@pytest.mark.sabotage
def test_sabotage_with_an_echoing_prompt_the_credential_shows_on_screen(cli):
    assert CANARY in add_credential(cli, "API_KEY", CANARY, patch=ECHO)


@pytest.mark.sabotage
def test_sabotage_without_the_private_mode_the_credential_file_is_world_readable(cli):
    add_credential(cli, "API_KEY", CANARY, patch=WIDE_MODE)
    store = cli.home / "config" / "undoable" / "credentials.json"
    assert stat.S_IMODE(store.stat().st_mode) != 0o600


def test_a_bad_credential_name_is_refused_before_any_prompt(cli):
    done = cli.run("creds", "add", "not a name")
    assert done.returncode == 1 and "not a valid credential name" in done.stderr


def test_mcp_without_its_module_says_what_to_install(cli):
    block = "import sys\nsys.modules['undoable_client.mcp_stdio'] = None"
    done = cli.run("mcp", patch=block)
    assert (done.returncode, done.stderr) == (
        1,
        "error: the MCP server is not installed: install undoable-client[mcp]\n",
    )


def test_with_a_keyring_the_value_lives_there_and_the_file_lists_only_names(cli, tmp_path):
    ring = tmp_path / "keyring.json"
    cli.env.update(
        PYTHON_KEYRING_BACKEND="file_keyring.FileKeyring",
        PYTHONPATH=f"{cli.env['PYTHONPATH']}:{Path(__file__).parent}",
        TEST_KEYRING_FILE=str(ring),
    )
    assert CANARY not in add_credential(cli, "API_KEY", CANARY)
    assert json.loads(ring.read_text()) == {"undoable/API_KEY": CANARY}
    listing = (cli.home / "config" / "undoable" / "credentials.json").read_text()
    assert "API_KEY" in listing and CANARY not in listing
    assert "FileKeyring" in json.loads(cli.run("creds", "ls", "--json").stdout)["where"]
    assert cli.run("creds", "rm", "API_KEY").returncode == 0
    assert json.loads(ring.read_text()) == {}


def test_an_action_rehearsed_through_the_client_shows_its_verdict_and_class(cli, owner, app_server):
    from undoable_client import Client

    action = Client(app_server, owner.token).action(
        "fs",
        "open('/workspace/j.txt', 'w').write('j')",
        reverse_code="open('/workspace/j.txt', 'w').close()",
        rehearse="only",
    )
    assert (action.action_class, action.rehearsal["restored"]) == ("reversible", False)
    shown = cli.run("action", "show", str(action.id)).stdout
    assert "class: reversible" in shown
    assert "rehearsal: 1 path(s) differ after the reverse program" in shown
    assert "j.txt: extra" in shown
