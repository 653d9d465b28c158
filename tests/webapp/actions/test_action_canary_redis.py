"""A credential given to an action (a rest action's forward run, and its Undo with the
credential given again) or to the query page's rehearsal (a Celery task) never travels through
Redis or Celery in the clear: with the Celery runner, the Redis channel layer and the Redis
cache (the one-shot handoff), every command sent to Redis (MONITOR), every key and value left
in it (Celery bodies decoded) and the worker's log are free of the canary. With the handoff's
encryption switched off (sabotage) the same sweep finds it."""

from __future__ import annotations

import secrets
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.urls import reverse

from tests.factories import QueryFactory
from tests.webapp.credentials.test_canary import _redis_contents
from webapp.credentials import handoff

pytestmark = [pytest.mark.celery]

CANARY = "canary-" + secrets.token_hex(16)
PRINTS_IT = "import os\nprint('the token is', os.environ['CANARY_TOKEN'], flush=True)\n"
REST = {
    "kind": "rest",
    "intent": "post with the canary token",
    "forward_code": PRINTS_IT,
    "reverse_code": PRINTS_IT,
    "credentials": {"CANARY_TOKEN": CANARY},
}


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A short folder: the worker's var folder holds the rest kind's egress socket, and a
    socket's path is limited to 108 bytes (pytest's own tmp_path is longer)."""
    folder = Path(tempfile.mkdtemp(prefix="uac-", dir="/tmp"))
    folder.chmod(0o755)  # the sandbox's user traverses it to the socket
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def swept(owner, celery_worker, redis_monitor, redis_url) -> tuple[dict, list[str]]:
    """Run the action and its Undo; (the undone action, the places the canary was found)."""
    action = owner.post("/api/v1/actions", REST).json()
    undo = {"credentials": {"CANARY_TOKEN": CANARY}}
    undone = owner.post(f"/api/v1/actions/{action.get('id', 0)}/undo", undo).json()
    commands = redis_monitor.stop()
    places = {
        "redis commands (MONITOR)": "\n".join(commands),
        "redis keys and values": b"\n".join(_redis_contents(redis_url)).decode("latin-1"),
        "worker logs": celery_worker.read_text(errors="replace"),
        "the API's answers": repr((action, undone)),
    }
    return undone, [place for place, text in places.items() if CANARY in text]


def test_the_canary_is_absent_from_redis_and_celery_messages_for_an_action_and_its_undo(
    owner, production_mode, celery_worker, redis_monitor, redis_url
):
    undone, leaks = swept(owner, celery_worker, redis_monitor, redis_url)
    assert undone.get("status") == "reversed", (undone, leaks)
    assert (
        "the token is ****" in undone["stdout"]
        and "the token is ****" in undone["reverse"]["stdout"]
    )
    assert "queries.execute_run" in celery_worker.read_text(errors="replace")
    assert leaks == []


def test_sabotage_a_credential_handed_off_in_the_clear_is_caught(
    owner, production_mode, celery_worker, redis_monitor, redis_url, monkeypatch
):
    class Clear:
        def encrypt(self, data: bytes) -> bytes:
            return data

    monkeypatch.setattr(handoff, "_fernet", Clear)
    _, leaks = swept(owner, celery_worker, redis_monitor, redis_url)
    assert "redis commands (MONITOR)" in leaks


WRITES_IT = "import os\nopen('/workspace/t.txt', 'w').write(os.environ['CANARY_TOKEN'])\n"
REMOVES_IT = "import os\nos.remove('/workspace/t.txt')\n"


def test_the_canary_is_absent_from_redis_and_celery_for_the_query_pages_rehearsal(
    owner, production_mode, celery_worker, redis_monitor, redis_url
):
    """The page's rehearsal runs as a Celery task on the worker, which reads the credential from
    the handoff: the verdict comes back, and no message or value in Redis holds the canary."""
    query = QueryFactory(
        owner=owner.user,
        kind="fs",
        forward_code=WRITES_IT,
        reverse_code=REMOVES_IT,
        credential_names=["CANARY_TOKEN"],
    )
    owner.client.force_login(owner.user)
    body = {"credentials": {"CANARY_TOKEN": CANARY}}
    url = reverse("actions:rehearse", args=[query.pk])
    answer = owner.client.post(url, body, content_type="application/json")
    assert answer.status_code == 202, answer.content
    state, pause = answer.json(), threading.Event()
    for _ in range(1200):  # a bounded wait for the worker's verdict, not a timing
        if state["state"] != "rehearsing":
            break
        pause.wait(0.1)
        state = owner.client.get(reverse("actions:rehearsal", args=[query.pk])).json()
    commands = redis_monitor.stop()
    assert state["state"] == "done", (state, celery_worker.read_text(errors="replace"))
    assert state["verdict"]["restored"] is True, state
    assert "actions.rehearse_query" in celery_worker.read_text(errors="replace")
    places = {
        "redis commands (MONITOR)": "\n".join(commands),
        "redis keys and values": b"\n".join(_redis_contents(redis_url)).decode("latin-1"),
        "worker logs": celery_worker.read_text(errors="replace"),
        "the page's answers": repr((answer.json(), state)),
    }
    assert [place for place, text in places.items() if CANARY in text] == []
