"""The Python client retries 429 and 503 as the server's Retry-After says, within bounds."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.test import override_settings

from webapp.admission.backends import get_limiter
from webapp.agents.models import ApiToken

# The client is its own package (clients/python); the tests use it from the source tree.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "clients" / "python" / "src"))
from undoable_client import ApiError, Client  # noqa: E402
from undoable_client import client as client_module  # noqa: E402

OK = {
    "stdout": "2\n",
    "stderr": "",
    "exit_code": 0,
    "signal": None,
    "limit": None,
    "timed_out": False,
    "oom_killed": False,
    "truncated": False,
    "duration_ms": 3,
}
Reply = tuple[int, dict[str, str], dict]


class FakeServer:
    """A local HTTP server answering each request with the next scripted reply."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = replies
        self.requests: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                fake.requests.append(self.path)
                status, headers, body = fake.replies.pop(0)
                raw = json.dumps(body).encode()
                self.send_response(status)
                for name, value in {**headers, "Content-Type": "application/json"}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The client's waits, recorded instead of slept."""
    recorded: list[float] = []
    monkeypatch.setattr(client_module, "_sleep", recorded.append)
    yield recorded


def busy(status: int, retry_after: str | None = None) -> Reply:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return status, headers, {"error": "busy"}


def test_it_retries_429_and_503_after_the_servers_retry_after(waits):
    with FakeServer([busy(429, "1"), busy(503, "5"), (200, {}, OK)]) as server:
        result = Client(server.url, "udb_x").exec("1+1")
    assert result.stdout == "2\n"
    assert waits == [1.0, 5.0]
    assert server.requests == ["/api/v1/exec"] * 3


def test_without_retry_after_it_backs_off_doubling(waits):
    with FakeServer([busy(503), busy(503), (200, {}, OK)]) as server:
        Client(server.url, "udb_x").exec("1+1")
    assert waits == [0.5, 1.0]


def test_an_http_date_retry_after_is_honoured(waits):
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=3), usegmt=True)
    with FakeServer([busy(429, later), (200, {}, OK)]) as server:
        Client(server.url, "udb_x").exec("1+1")
    assert 1.0 < waits[0] <= 3.0


def test_it_gives_up_after_its_attempts(waits):
    with FakeServer([busy(429, "1")] * 3) as server, pytest.raises(ApiError) as refused:
        Client(server.url, "udb_x", retries=2).exec("1+1")
    assert refused.value.status == 429
    assert waits == [1.0, 1.0]


def test_it_raises_at_once_when_the_wait_would_pass_its_cap(waits):
    with FakeServer([busy(429, "60"), (200, {}, OK)]) as server, pytest.raises(ApiError) as refused:
        Client(server.url, "udb_x", max_retry_wait_s=30).exec("1+1")
    assert (refused.value.status, refused.value.retry_after_s) == (429, 60.0)
    assert waits == []
    assert len(server.requests) == 1


def test_other_errors_are_not_retried(waits):
    with (
        FakeServer([(400, {}, {"error": "bad"}), (200, {}, OK)]) as server,
        pytest.raises(ApiError),
    ):
        Client(server.url, "udb_x").exec("1+1")
    assert waits == []


@pytest.mark.django_db(transaction=True)
@override_settings(AGENTS_MAX_CONCURRENT_PER_TOKEN=1, AGENTS_SLOT_WAIT_S=0)
def test_against_the_server_a_refused_exec_is_retried_until_served(app_server, owner):
    slow = {"code": "import time; time.sleep(2)", "timeout_s": 10}
    holder = threading.Thread(target=lambda: owner.post("/api/v1/exec", slow))
    holder.start()
    assert get_limiter().wait_for_active(ApiToken.objects.get(owner=owner.user).pk, 1, 30)
    result = Client(app_server, owner.token).exec("print(6*7)")
    holder.join(30)
    assert result.stdout == "42\n"


def test_a_503_to_a_session_cell_is_not_retried_since_the_cell_may_have_run(waits):
    reply = (200, {}, {"id": "s1", "expires_at": "2026-01-01T00:00:00Z"})
    with FakeServer([reply, busy(503, "1"), (200, {}, OK)]) as server:
        session = Client(server.url, "udb_x").session()
        with pytest.raises(client_module.Unavailable):
            session.exec("x = 1")
    assert waits == []


def test_a_429_to_a_session_cell_is_retried_since_nothing_ran(waits):
    reply = (200, {}, {"id": "s1", "expires_at": "2026-01-01T00:00:00Z"})
    with FakeServer([reply, busy(429, "1"), (200, {}, OK)]) as server:
        assert Client(server.url, "udb_x").session().exec("x = 1").stdout == "2\n"
    assert waits == [1.0]
