"""A credential given to an action (a rest action's forward run, and its Undo with the
credential given again) never travels through Redis or Celery in the clear: with the Celery
runner, the Redis channel layer and the Redis cache (the one-shot handoff), every command sent
to Redis (MONITOR), every key and value left in it (Celery bodies decoded) and the worker's log
are free of the canary. With the handoff's encryption switched off (sabotage) the same sweep
finds it."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

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
