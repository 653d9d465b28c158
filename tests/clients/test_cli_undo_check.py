"""`undoable action show` says what an Undo proved: a verified Discard, or what the reverse
program after a Keep left different."""

from __future__ import annotations

import pytest

from tests.clients.cli import Cli

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("threads_runner", "workspaces_root"),
]
WRITES_TWO = "open('joke.txt', 'w').write('knock')\nopen('notes.txt', 'w').write('who')\n"


@pytest.fixture
def cli(tmp_path, app_server, owner) -> Cli:
    return Cli(tmp_path, app_server, owner.token)


def test_action_show_names_what_the_reverse_program_left(cli, owner, app_server):
    from undoable_client import Client

    action = Client(app_server, owner.token).action(
        "fs", WRITES_TWO, reverse_code="import os\nos.remove('joke.txt')\n"
    )
    action.keep()
    assert action.undo().status == "reversed"
    shown = cli.run("action", "show", str(action.id)).stdout
    assert "undo: the undo left these differences (1):" in shown
    assert "notes.txt: extra" in shown


def test_action_show_says_a_discard_was_verified(cli, owner, app_server):
    from undoable_client import Client

    action = Client(app_server, owner.token).action("fs", WRITES_TWO)
    action.discard()
    assert (
        "undo verified: the state is as before the run"
        in cli.run("action", "show", str(action.id)).stdout
    )


def test_action_show_says_what_the_probe_found(cli, owner, app_server):
    from undoable_client import Client

    from tests.webapp.actions.test_rest_probe import DELETE, GONE, POST, TOKEN, FakeSlackServer

    with FakeSlackServer(token=TOKEN) as slack:
        creds = {"SLACK_URL": slack.base_url, "SLACK_TOKEN": TOKEN}
        action = Client(app_server, owner.token).action(
            "rest",
            POST,
            reverse_code=DELETE,
            probe=GONE,
            hosts=[f"127.0.0.1:{slack.port}"],
            credentials=creds,
        )
        assert action.undo(credentials=creds).status == "reversed"
    assert "probe: the effect is gone (exit 0)" in cli.run("action", "show", str(action.id)).stdout
