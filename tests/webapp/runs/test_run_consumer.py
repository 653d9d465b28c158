"""The run websocket on the real ASGI app (origin check, auth, replay, live, exactly once)."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from tests.factories import QueryFactory, RunChunkFactory, RunFactory, UserFactory
from webapp.asgi import application
from webapp.runs import services
from webapp.runs.models import RunStatus

pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = b"http://127.0.0.1:8000"
TIMEOUT = 30


@database_sync_to_async
def session_cookie(user: Any) -> bytes:
    client = Client()
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}".encode()


async def connect(run_id: int, user: Any = None, *, after: int = 0, origin: bytes = ORIGIN):
    headers = [(b"origin", origin), (b"host", b"127.0.0.1:8000")]
    if user is not None:
        headers.append((b"cookie", await session_cookie(user)))
    communicator = WebsocketCommunicator(application, f"/ws/runs/{run_id}/?after={after}", headers)
    connected, _ = await communicator.connect(timeout=TIMEOUT)
    return communicator, connected


async def receive_until_final(communicator: WebsocketCommunicator) -> list[dict]:
    """Every message up to and including the final status."""
    messages = []
    while True:
        message = await communicator.receive_json_from(timeout=TIMEOUT)
        messages.append(message)
        if message["type"] == "status" and message["status"] in (
            "succeeded",
            "failed",
            "timed_out",
            "cancelled",
        ):
            return messages


def texts(messages: list[dict]) -> list[str]:
    return [m["text"] for m in messages if m["type"] == "chunk"]


async def test_it_rejects_an_anonymous_client() -> None:
    run = await database_sync_to_async(RunFactory)()
    _, connected = await connect(run.pk)
    assert not connected


async def test_it_rejects_a_stranger() -> None:
    run = await database_sync_to_async(RunFactory)()
    stranger = await database_sync_to_async(UserFactory)()
    _, connected = await connect(run.pk, stranger)
    assert not connected


async def test_it_rejects_a_foreign_origin() -> None:
    run = await database_sync_to_async(RunFactory)()
    communicator, connected = await connect(run.pk, run.query.owner, origin=b"http://evil.test")
    assert not connected


async def test_it_replays_stored_chunks_after_the_given_seq_then_the_status() -> None:
    run = await database_sync_to_async(RunFactory)(status=RunStatus.SUCCEEDED, exit_code=0)
    for seq in range(1, 6):
        await database_sync_to_async(RunChunkFactory)(run=run, seq=seq, text=f"line {seq}\n")
    communicator, connected = await connect(run.pk, run.query.owner, after=2)
    assert connected
    messages = await receive_until_final(communicator)
    assert [m.get("seq") for m in messages] == [3, 4, 5, None]
    assert messages[-1]["exit_code"] == 0
    await communicator.disconnect()


@pytest.mark.usefixtures("threads_runner")
async def test_it_streams_a_real_run_live_exactly_once_in_order() -> None:
    query = await database_sync_to_async(QueryFactory)(
        forward_code=(
            "import time\nfor i in range(6):\n    print('line', i, flush=True)\n"
            "    time.sleep(0.05)\n"
        )
    )
    run = await database_sync_to_async(services.query_run)(query=query)
    communicator, connected = await connect(run.pk, query.owner)
    assert connected
    messages = await receive_until_final(communicator)
    chunks = [m for m in messages if m["type"] == "chunk"]
    assert [c["seq"] for c in chunks] == list(range(1, len(chunks) + 1))
    assert "".join(texts(messages)) == "".join(f"line {i}\n" for i in range(6))
    assert messages[-1]["status"] == "succeeded"
    await communicator.disconnect()


@pytest.mark.usefixtures("threads_runner")
async def test_a_reconnect_mid_run_sees_every_line_once_and_continues_live() -> None:
    query = await database_sync_to_async(QueryFactory)(
        forward_code=(
            "import time\nfor i in range(20):\n    print('line', i, flush=True)\n"
            "    time.sleep(0.05)\n"
        )
    )
    run = await database_sync_to_async(services.query_run)(query=query)
    first, _ = await connect(run.pk, query.owner)
    seen: list[dict] = []
    while len([m for m in seen if m["type"] == "chunk"]) < 3:
        seen.append(await first.receive_json_from(timeout=TIMEOUT))
    await first.disconnect()
    last = max(m["seq"] for m in seen if m["type"] == "chunk")
    second, connected = await connect(run.pk, query.owner, after=last)
    assert connected
    rest = await receive_until_final(second)
    all_chunks = [m for m in seen + rest if m["type"] == "chunk"]
    assert [c["seq"] for c in all_chunks] == list(range(1, len(all_chunks) + 1))
    assert "".join(c["text"] for c in all_chunks) == "".join(f"line {i}\n" for i in range(20))
    await second.disconnect()


@pytest.fixture
async def running_run_socket(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A socket on a running run that has had its status; the consumer re-checks every 0.2 s."""
    monkeypatch.setattr("webapp.runs.consumers.RECHECK_S", 0.2)
    run = await database_sync_to_async(RunFactory)(status=RunStatus.RUNNING)
    communicator, connected = await connect(run.pk, run.query.owner)
    assert connected
    assert (await communicator.receive_json_from(timeout=TIMEOUT))["status"] == "running"
    yield run, communicator
    await communicator.disconnect()


async def test_a_final_status_the_channel_layer_dropped_still_reaches_a_quiet_socket(
    running_run_socket: Any,
) -> None:
    run, communicator = running_run_socket
    # The run ends, but none of its events is published (as if the layer dropped them).
    await database_sync_to_async(RunChunkFactory)(run=run, seq=1, text="last words\n")
    run.status, run.exit_code = RunStatus.SUCCEEDED, 0
    await database_sync_to_async(run.save)(update_fields=["status", "exit_code"])

    messages = await receive_until_final(communicator)
    assert texts(messages) == ["last words\n"]
    assert [m["type"] for m in messages] == ["chunk", "status"]
    assert messages[-1]["exit_code"] == 0


async def test_a_socket_closes_when_its_run_is_deleted_mid_run(running_run_socket: Any) -> None:
    run, communicator = running_run_socket
    await database_sync_to_async(run.query.delete)()

    closed = await communicator.receive_output(timeout=TIMEOUT)
    assert closed == {"type": "websocket.close", "code": 4403}


async def test_a_socket_closes_when_its_person_signs_out(running_run_socket: Any) -> None:
    run, communicator = running_run_socket
    await database_sync_to_async(_sign_out_everywhere)(run.query.owner)

    closed = await communicator.receive_output(timeout=TIMEOUT)
    assert closed == {"type": "websocket.close", "code": 4403}


def _sign_out_everywhere(user: Any) -> None:
    from django.contrib.sessions.models import Session

    for session in Session.objects.all():
        if session.get_decoded().get("_auth_user_id") == str(user.pk):
            session.delete()
