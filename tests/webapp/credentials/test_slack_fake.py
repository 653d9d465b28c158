"""The Slack-like fake that browser and undo tests call from inside the sandbox."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

from tests.fakes.slack_server import FakeSlackServer

TOKEN = "xoxb-fake-slack-token"


@pytest.fixture
def slack() -> Iterator[FakeSlackServer]:
    with FakeSlackServer(token=TOKEN) as server:
        yield server


_http = httpx.Client(timeout=10)  # one client: building an SSL context per call is slow


def call(slack: FakeSlackServer, method: str, path: str, token: str = TOKEN, **kwargs):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return _http.request(method, f"{slack.base_url}/{path}", headers=headers, **kwargs).json()


def test_it_posts_lists_and_deletes_a_message(slack: FakeSlackServer) -> None:
    posted = call(slack, "POST", "chat.postMessage", json={"channel": "C1", "text": "hi Ana"})
    history = call(slack, "GET", "conversations.history", params={"channel": "C1"})
    assert posted["ok"] is True
    assert [m["text"] for m in history["messages"]] == ["hi Ana"]
    deleted = call(slack, "POST", "chat.delete", data={"channel": "C1", "ts": posted["ts"]})
    assert deleted == {"ok": True, "channel": "C1", "ts": posted["ts"]}
    assert slack.messages() == []
    assert [m["text"] for m in slack.deleted()] == ["hi Ana"]


def test_it_rejects_a_wrong_or_missing_token(slack: FakeSlackServer) -> None:
    wrong = call(slack, "POST", "chat.postMessage", token="xoxb-wrong", json={"channel": "C1"})
    missing = call(slack, "POST", "chat.postMessage", token="", json={"channel": "C1"})
    assert wrong == {"ok": False, "error": "invalid_auth"}
    assert missing == {"ok": False, "error": "not_authed"}
    assert slack.messages() == []
    assert [authorized for *_, authorized in slack.calls()] == [False, False]


def test_deleting_an_unknown_message_fails(slack: FakeSlackServer) -> None:
    answer = call(slack, "POST", "chat.delete", json={"channel": "C1", "ts": "1.000001"})
    assert answer == {"ok": False, "error": "message_not_found"}


def test_concurrent_posts_get_distinct_timestamps(slack: FakeSlackServer) -> None:
    def post(i: int) -> None:
        call(slack, "POST", "chat.postMessage", json={"channel": "C1", "text": f"m{i}"})

    threads = [threading.Thread(target=post, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len({m["ts"] for m in slack.messages("C1")}) == 16


def test_waiting_for_a_message_returns_when_it_arrives(slack: FakeSlackServer) -> None:
    poster = threading.Thread(
        target=call,
        args=(slack, "POST", "chat.postMessage"),
        kwargs={"json": {"channel": "C2", "text": "later"}},
    )
    poster.start()
    message = slack.wait_for_message(lambda m: m["text"] == "later", timeout_s=10)
    poster.join(timeout=10)
    assert message["channel"] == "C2"
    with pytest.raises(TimeoutError):
        slack.wait_for_deleted(message["ts"], timeout_s=0.05)
