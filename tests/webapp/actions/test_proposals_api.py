"""POST /api/v1/proposals: the server's LLM (the fake, scripted) proposes forward and reverse
code in the design's proposal format; only credential names ever reach the model."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from tests.fakes.llm_server import content, error, tool_call
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db(transaction=True)
PROPOSAL = {
    "forward_code": "open('joke.txt', 'w').write('knock knock')",
    "reverse_code": "import os\nos.remove('joke.txt')",
    "explanation": "writes a joke",
    "credentials": ["SLACK_TOKEN"],
    "hosts": ["slack.com"],
    "reversible": True,
}


def test_it_answers_the_llms_proposal_and_sends_names_and_hosts_only(owner, fake_llm):
    fake_llm.script(tool_call(PROPOSAL))
    body = {"prompt": "tell a joke", "kind": "fs", "hosts": ["slack.com"],
            "credentials": ["SLACK_TOKEN"]}  # fmt: skip
    answer = owner.post("/api/v1/proposals", body)
    assert answer.status_code == 200, answer.content
    assert answer.json() == {
        **PROPOSAL,
        "forward_code": PROPOSAL["forward_code"] + "\n",
        "reverse_code": PROPOSAL["reverse_code"] + "\n",
    }
    asked = json.dumps(fake_llm.requests[0])
    assert "tell a joke" in asked and "SLACK_TOKEN" in asked and "slack.com" in asked
    assert Run.objects.count() == 0  # nothing ran


def test_fenced_code_without_a_tool_call_is_a_proposal_too(owner, fake_llm):
    fake_llm.script(content("```python\nprint(1)\n```\n```python\nprint(2)\n```"))
    answer = owner.post("/api/v1/proposals", {"prompt": "print", "kind": "python"})
    assert (answer.json()["forward_code"], answer.json()["reverse_code"]) == (
        "print(1)\n",
        "print(2)\n",
    )


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": "", "kind": "fs"},
        {"prompt": "   ", "kind": "fs"},
        {"prompt": "x", "kind": "cobol"},
        {"prompt": "x", "credentials": ["not a name"]},
        {"prompt": "x", "hosts": ["a b"]},
        {"prompt": "x", "credentials": {"SLACK_TOKEN": "a value"}},
    ],
)
def test_bad_input_is_a_400_and_asks_no_llm(owner, fake_llm, body):
    answer = owner.post("/api/v1/proposals", body)
    assert answer.status_code == 400 and answer.json()["error"]
    assert fake_llm.requests == []


def test_a_failing_llm_is_a_502_and_none_configured_a_503(owner, fake_llm):
    fake_llm.script(error(500))
    assert owner.post("/api/v1/proposals", {"prompt": "x"}).status_code == 502
    with override_settings(LLM_BASE_URL="", LLM_MODEL=""):
        refused = owner.post("/api/v1/proposals", {"prompt": "x"})
    assert refused.status_code == 503 and "No LLM is configured" in refused.json()["error"]


def test_it_needs_a_token(fake_llm):
    from tests.webapp.agents.conftest import asgi_request

    answer = asgi_request("POST", "/api/v1/proposals", content=b'{"prompt": "x"}',
                          headers={"Content-Type": "application/json"})  # fmt: skip
    assert answer.status_code == 401
