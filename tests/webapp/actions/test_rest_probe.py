"""A rest action's probe: after Undo's reverse program, a declared program checks in the sandbox,
behind the same egress proxy with the same hosts and credentials, that the effect is gone."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from executor import Executor
from tests.fakes.llm_server import tool_call
from webapp.audit.models import AuditEntry

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fakes"))
from slack_server import FakeSlackServer  # noqa: E402

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")

TOKEN = "xoxb-probe-test"
POST = """
import os, requests
r = requests.post(os.environ["SLACK_URL"] + "/chat.postMessage",
                  headers={"Authorization": "Bearer " + os.environ["SLACK_TOKEN"]},
                  json={"channel": "C1", "text": "a joke"})
print(r.text)
"""
DELETE = """
import json, os, requests
sent = json.loads(os.environ["FORWARD_OUTPUT"].splitlines()[0])
requests.post(os.environ["SLACK_URL"] + "/chat.delete",
              headers={"Authorization": "Bearer " + os.environ["SLACK_TOKEN"]},
              json={"channel": sent["channel"], "ts": sent["ts"]})
"""
GONE = """
import os, requests, sys
r = requests.get(os.environ["SLACK_URL"] + "/conversations.history?channel=C1",
                 headers={"Authorization": "Bearer " + os.environ["SLACK_TOKEN"]})
sys.exit(1 if any(m["text"] == "a joke" for m in r.json()["messages"]) else 0)
"""


def undone(owner, slack, *, reverse_code: str, probe: str, hosts: list[str] | None = None):
    creds = {"SLACK_URL": slack.base_url, "SLACK_TOKEN": TOKEN}
    action = owner.post(
        "/api/v1/actions",
        {
            "kind": "rest",
            "forward_code": POST,
            "reverse_code": reverse_code,
            "probe": probe,
            "hosts": hosts or [f"127.0.0.1:{slack.port}"],
            "credentials": creds,
        },
    ).json()
    assert action["status"] == "pending", action
    answer = owner.post(f"/api/v1/actions/{action['id']}/undo", {"credentials": creds}).json()
    assert answer["status"] == "reversed", answer
    owner.client.force_login(owner.user)
    page = owner.client.get(f"/queries/{action['id']}/").content.decode()
    probe = answer["reverse"]["probe"]
    if probe is not None:  # shown with the undo on the query page
        shown = "effect gone" if probe["passed"] else "the effect is not gone"
        assert shown in page, page
    return probe


def test_a_probe_after_a_reverse_that_worked_says_the_effect_is_gone(owner):
    with FakeSlackServer(token=TOKEN) as slack:
        probe = undone(owner, slack, reverse_code=DELETE, probe=GONE)
    assert (probe["passed"], probe["exit_code"]) == (True, 0)
    assert TOKEN not in str(probe)
    undo = AuditEntry.objects.filter(event="undo").order_by("seq").last()
    assert undo is not None and undo.digests["probe_passed"] is True  # in the ledger too


def test_deny_a_reverse_that_left_the_effect_fails_its_probe(owner):
    with FakeSlackServer(token=TOKEN) as slack:
        probe = undone(owner, slack, reverse_code="print('done, honest')", probe=GONE)
    assert (probe["passed"], probe["exit_code"]) == (False, 1)


def test_deny_a_probe_reaches_only_the_actions_hosts(owner):
    with FakeSlackServer(token=TOKEN) as slack, FakeSlackServer(token=TOKEN) as other:
        elsewhere = GONE.replace('os.environ["SLACK_URL"]', repr(other.base_url))
        probe = undone(owner, slack, reverse_code=DELETE, probe=elsewhere)
        assert other.calls() == []  # the host never called it either
    assert probe["passed"] is False
    assert probe["refused_hosts"], probe


def test_an_action_without_a_probe_records_none(owner):
    with FakeSlackServer(token=TOKEN) as slack:
        assert undone(owner, slack, reverse_code=DELETE, probe="") is None


def test_a_probe_is_refused_for_other_kinds(owner):
    answer = owner.post(
        "/api/v1/actions", {"kind": "fs", "forward_code": "print(1)", "probe": "print(2)"}
    )
    assert answer.status_code == 400 and "probe" in answer.json()["error"]


@pytest.mark.django_db(transaction=True)
def test_the_llms_proposal_may_declare_a_probe(owner, fake_llm):
    proposal = {"forward_code": POST, "reverse_code": DELETE, "explanation": "joke",
                "hosts": ["slack.com"], "probe": GONE}  # fmt: skip
    fake_llm.script(tool_call(proposal))
    answer = owner.post("/api/v1/proposals", {"prompt": "post a joke", "kind": "rest"}).json()
    assert answer["probe"] == GONE.strip()
    offered = fake_llm.requests[0]["tools"][0]["function"]["parameters"]["properties"]
    assert offered["probe"]["type"] == "string"  # the tool's schema offers it


def test_sabotage_a_probe_given_more_hosts_than_the_action_reaches_them(owner, monkeypatch):
    with FakeSlackServer(token=TOKEN) as slack, FakeSlackServer(token=TOKEN) as other:
        widened = f"127.0.0.1:{other.port}"
        egress_prepared = Executor.egress_prepared

        def more_hosts(self, spec, **options):  # the reverse run's too: it calls only slack
            hosts = (*spec.allowed_hosts, widened)
            return egress_prepared(self, dataclasses.replace(spec, allowed_hosts=hosts), **options)

        monkeypatch.setattr(Executor, "egress_prepared", more_hosts)
        elsewhere = GONE.replace('os.environ["SLACK_URL"]', repr(other.base_url))
        undone(owner, slack, reverse_code=DELETE, probe=elsewhere)
        assert other.calls()  # the policy switched off: the probe reached the other host
