"""The LLM client against a real local OpenAI-compatible server with scripted answers."""

from __future__ import annotations

import json
import socket

import pytest
from django.test import override_settings

from tests.fakes.llm_server import content, error, rejects_tools, slow, tool_call
from webapp import llm

PROPOSAL = {
    "forward_code": "import os\nprint(os.environ['SLACK_TOKEN'][:0] + 'sent')",
    "reverse_code": "print('deleted')",
    "explanation": "Posts a message, then deletes it.",
    "credentials": ["SLACK_TOKEN"],
    "hosts": ["slack.com"],
    "reversible": True,
}


def test_it_forces_the_propose_action_tool_and_returns_the_proposal(fake_llm) -> None:
    fake_llm.script(tool_call(PROPOSAL))
    proposal = llm.propose_action(prompt="send a joke to Ana", credential_names=["SLACK_TOKEN"])
    sent = fake_llm.requests[0]
    assert sent["model"] == "fake-model"
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "propose_action"}}
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["propose_action"]
    assert proposal.forward_code == PROPOSAL["forward_code"] + "\n"
    assert proposal.reverse_code == "print('deleted')\n"
    assert (proposal.credentials, proposal.hosts) == (["SLACK_TOKEN"], ["slack.com"])


def test_it_tells_the_model_which_credential_names_exist(fake_llm) -> None:
    fake_llm.script(tool_call(PROPOSAL))
    llm.propose_action(prompt="post to slack", credential_names=["SLACK_TOKEN"])
    user_message = fake_llm.requests[0]["messages"][-1]["content"]
    assert "SLACK_TOKEN" in user_message


def test_it_falls_back_to_fenced_code_when_the_endpoint_rejects_tools(fake_llm) -> None:
    fake_llm.script(
        rejects_tools(
            content(
                "Here you go.\n```python\nimport os\nprint(os.environ['API_KEY'])\n```\n"
                "```python\nprint('undo')\n```\n"
            )
        )
    )
    proposal = llm.propose_action(prompt="print my key")
    assert "tools" not in fake_llm.requests[1]
    assert proposal.forward_code == "import os\nprint(os.environ['API_KEY'])\n"
    assert proposal.reverse_code == "print('undo')\n"
    assert proposal.credentials == ["API_KEY"]
    assert proposal.explanation == "Here you go."


def test_it_reports_an_endpoint_error_clearly(fake_llm) -> None:
    fake_llm.script(error(500))
    with pytest.raises(llm.LLMUnavailable, match=r"HTTP 500"):
        llm.propose_action(prompt="anything")


def test_it_reports_a_slow_endpoint_as_a_timeout(fake_llm) -> None:
    with override_settings(LLM_TIMEOUT_S=1.0):
        fake_llm.script(slow(5.0, tool_call(PROPOSAL)))
        with pytest.raises(llm.LLMUnavailable, match=r"did not answer within 1 s"):
            llm.propose_action(prompt="anything")


def test_it_reports_a_down_endpoint_clearly() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with (
        override_settings(LLM_BASE_URL=f"http://127.0.0.1:{port}/v1", LLM_TIMEOUT_S=2.0),
        pytest.raises(llm.LLMUnavailable, match=r"Could not reach the LLM"),
    ):
        llm.propose_action(prompt="anything")


@pytest.mark.parametrize(
    "answer",
    [
        tool_call("{not json"),
        tool_call(["a", "list"]),
        tool_call({"explanation": "no code at all"}),
        content("I cannot help with that."),
    ],
    ids=["broken-json", "not-an-object", "no-forward-code", "no-code-blocks"],
)
def test_it_rejects_nonsense_answers(fake_llm, answer) -> None:
    fake_llm.script(answer)
    with pytest.raises(llm.LLMBadAnswer):
        llm.propose_action(prompt="anything")


def test_it_refuses_to_run_without_configuration(no_llm) -> None:
    with pytest.raises(llm.LLMNotConfigured, match="LLM_BASE_URL"):
        llm.propose_action(prompt="anything")


def test_it_asks_for_a_fix_with_the_code_and_its_error(fake_llm) -> None:
    fake_llm.script(tool_call({"code": "print(1 / 1)", "explanation": "No division by zero."}))
    fix = llm.propose_fix(code="print(1 / 0)", error_output="ZeroDivisionError: division by zero")
    sent = fake_llm.requests[0]
    assert sent["tool_choice"]["function"]["name"] == "propose_fix"
    assert "ZeroDivisionError" in json.dumps(sent["messages"])
    assert fix.code == "print(1 / 1)\n"
