"""POST /api/v1/actions answers when the run's events say it has settled, not on a timer: with
the safety re-read pushed past the wait's end, only an event can make the wait read the rows
again and see the action settled."""

from __future__ import annotations

import json

import pytest

from webapp.actions import output
from webapp.runs.listen import RunEvents

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")

# The program outlasts the first read of the rows, so that it is an event that ends the wait.
SLOW_JOKE = "import time\ntime.sleep(2)\nopen('joke.txt', 'w').write('knock knock\\n')\n"


@pytest.fixture
def reads(monkeypatch):
    """No safety re-read within the wait; the `settled` of each read the wait makes."""
    monkeypatch.setattr(output, "SAFETY_POLL_S", 3600.0)
    seen: list[bool] = []
    read = output._settled

    async def recorded(query_id):
        settled, run = await read(query_id)
        seen.append(settled)
        return settled, run

    monkeypatch.setattr(output, "_settled", recorded)
    return seen


def test_the_answer_follows_the_runs_end_event(owner, reads, monkeypatch):
    monkeypatch.setattr(output, "MAX_WAIT_S", 60.0)
    action = owner.post("/api/v1/actions", {"kind": "fs", "forward_code": SLOW_JOKE}).json()
    assert action["status"] == "pending", action
    assert reads[0] is False and reads[-1] is True


def test_the_ndjson_stream_follows_the_runs_events(owner, reads, monkeypatch):
    monkeypatch.setattr(output, "MAX_WAIT_S", 60.0)
    code = "import time\ntime.sleep(2)\nprint('hi')\n"
    response = owner.post(
        "/api/v1/actions",
        {"kind": "python", "forward_code": code},
        accept="application/x-ndjson",
    )
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert "".join(line["text"] for line in lines if line["type"] == "output") == "hi\n"
    assert lines[-1]["action"]["status"] == "succeeded", lines[-1]
    assert reads[0] is False and reads[-1] is True


def test_sabotage_without_the_events_the_wait_never_sees_the_action_settle(
    owner, reads, monkeypatch
):
    async def deaf(self, run_id):
        return False

    monkeypatch.setattr(RunEvents, "follow", deaf)
    monkeypatch.setattr(output, "MAX_WAIT_S", 5.0)
    owner.post("/api/v1/actions", {"kind": "fs", "forward_code": SLOW_JOKE})
    assert reads == [False]
