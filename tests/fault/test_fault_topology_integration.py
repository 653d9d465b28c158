"""Integration checks pointed at the production topology, on each web process: the same things a
person and an agent do, through real HTTP and websockets, executed by the Celery workers."""

from __future__ import annotations

import pytest

from tests.fault.client import WebClient, exec_code
from tests.fault.conftest import Account
from tests.fault.topology import Topology

pytestmark = pytest.mark.fault


@pytest.mark.parametrize("web", [0, 1])
def test_a_run_streams_its_output_through_either_web_process(
    topology: Topology, account: Account, web: int
) -> None:
    browser = WebClient(topology.web_url(web)).login(account.username, account.password)
    query_id = browser.query_by_hand()

    run_id = browser.run(query_id, "for i in range(3):\n    print('row', i)\n")
    chunks, status = browser.watch(run_id, timeout_s=60)

    assert status["status"] == "succeeded"
    assert "".join(c["text"] for c in chunks) == "row 0\nrow 1\nrow 2\n"
    assert browser.run_status(run_id)["exit_code"] == 0


@pytest.mark.parametrize("web", [0, 1])
def test_the_agent_exec_api_answers_on_either_web_process(
    topology: Topology, account: Account, web: int
) -> None:
    result = exec_code(topology.web_url(web), account.token, "import sys\nprint(sum(range(10)))")

    assert result["stdout"] == "45\n"
    assert result["exit_code"] == 0


def test_a_stranger_cannot_follow_someone_elses_run(
    topology: Topology, account: Account, browser: WebClient
) -> None:
    topology.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; "
        "get_user_model().objects.create_user('stranger', password='stranger-pass-123')",
    )
    stranger = WebClient(topology.web_url(1)).login("stranger", "stranger-pass-123")
    run_id = browser.run(browser.query_by_hand(), "print('private')")

    assert stranger.http.get(f"/runs/{run_id}/").status_code == 404
