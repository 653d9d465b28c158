"""What the services record: actions, runs, Keep, Discard, Undo, the pending timeout, shares and
tokens, each once, with who and what; exec calls per token and minute; never a credential."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from webapp.agents.tokens import token_revoke
from webapp.audit.export import entry_json
from webapp.audit.models import AuditEntry, AuditTally
from webapp.audit.services import sha256_text
from webapp.audit.tally import tallies_seal, tally_flush
from webapp.audit.verify import audit_verify
from webapp.queries.models import Query
from webapp.shares.services import share_create, share_fork, share_revoke
from webapp.workspaces.reaper import fs_pending_expire

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fakes"))
from slack_server import FakeSlackServer  # noqa: E402

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")


def create(persona, body):
    response = persona.post("/api/v1/actions", body)
    assert response.status_code == 201, response.text
    return response.json()


def events(**where) -> list[str]:
    return list(AuditEntry.objects.filter(**where).order_by("seq").values_list("event", flat=True))


def test_tokens_created_and_revoked_are_recorded_without_their_secret(owner):
    token = owner.user.api_tokens.get()
    token_revoke(owner=owner.user, token_id=token.pk)
    token_revoke(owner=owner.user, token_id=token.pk)  # twice: recorded once
    entries = list(AuditEntry.objects.filter(user_id=owner.user.pk).order_by("seq"))
    assert [e.event for e in entries] == ["token_create", "token_revoke"]
    assert {e.token_id for e in entries} == {token.pk}
    assert entries[0].token_prefix == token.prefix
    dumped = json.dumps([entry_json(e) for e in entries], default=str)
    assert owner.token not in dumped and token.hashed not in dumped


def test_fs_actions_record_keep_discard_and_the_pending_timeout(owner, settings):
    kept = create(owner, {"kind": "fs", "forward_code": "open('a.txt', 'w').write('a')"})
    owner.post(f"/api/v1/actions/{kept['id']}/keep", {})
    thrown = create(owner, {"kind": "fs", "forward_code": "open('b.txt', 'w').write('b')"})
    owner.post(f"/api/v1/actions/{thrown['id']}/discard", {})
    late = create(owner, {"kind": "fs", "forward_code": "open('c.txt', 'w').write('c')"})
    settings.UNDOABLE_FS_PENDING_TIMEOUT_S = 1
    assert len(fs_pending_expire(now=timezone.now() + timedelta(seconds=2))) == 1
    after_token = dict(seq__gt=1)
    assert events(**after_token) == [
        "action", "run", "run", "keep",
        "action", "run", "run", "discard",
        "action", "run", "run", "timeout",
    ]  # fmt: skip
    assert AuditEntry.objects.filter(event="run", outcome="succeeded").count() == 3
    keep = AuditEntry.objects.get(event="keep")
    query = Query.objects.get(pk=kept["id"])
    assert keep.kind == "fs" and keep.forward_sha256 == sha256_text(query.forward_code)
    assert keep.token_id == owner.user.api_tokens.get().pk
    assert "nobody chose Keep or Discard" in AuditEntry.objects.get(event="timeout").outcome
    assert late["id"] != kept["id"]
    assert audit_verify()[1] is None


def test_shares_made_forked_and_taken_down_are_recorded(owner, stranger):
    query = Query.objects.create(owner=owner.user, prompt="hello", forward_code="print(1)")
    share = share_create(owner=owner.user, query=query, include_output=False)
    fork = share_fork(user=stranger.user, share=share)
    share_revoke(share=share)
    entries = list(AuditEntry.objects.filter(event__startswith="share").order_by("seq"))
    assert [(e.event, e.outcome, e.username) for e in entries] == [
        ("share", "created", "owner"),
        ("share_fork", "created", stranger.user.username),
        ("share_revoke", "revoked", "owner"),
    ]
    assert entries[1].target == f"query {fork.pk} (fork of share {share.pk})"
    assert entries[1].forward_sha256 == sha256_text("print(1)")
    assert share.token not in json.dumps([entry_json(e) for e in entries], default=str)


def test_exec_calls_are_one_entry_per_token_and_minute(owner, stranger):
    for _ in range(3):
        assert owner.post("/api/v1/exec", {"code": "print(1)"}).status_code == 200
    assert owner.post("/api/v1/exec", {"code": "raise SystemExit(3)"}).status_code == 200
    assert stranger.post("/api/v1/exec", {"code": "print(2)"}).status_code == 200
    before = AuditEntry.objects.count()
    assert tally_flush() == 2
    assert owner.post("/api/v1/exec", {"code": "print(1)"}).status_code == 200
    tally_flush()  # a second flush (as another process's would) adds to the same minute
    assert AuditTally.objects.count() == 2
    assert tallies_seal() == []  # the minute has not ended
    sealed = tallies_seal(now=timezone.now() + timedelta(minutes=3))
    assert len(sealed) == 2 and AuditEntry.objects.count() == before + 2
    assert not AuditTally.objects.exists()
    mine = AuditEntry.objects.get(event="exec_summary", user_id=owner.user.pk)
    assert (mine.digests["calls"], mine.digests["failed"]) == (5, 1)
    assert mine.token_id == owner.user.api_tokens.get().pk
    assert tallies_seal(now=timezone.now() + timedelta(minutes=3)) == []
    assert audit_verify()[1] is None


POST = """
import os, requests
r = requests.post(os.environ["SLACK_URL"] + "/chat.postMessage",
                  headers={"Authorization": "Bearer " + os.environ["SLACK_TOKEN"]},
                  json={"channel": "C1", "text": "a joke"})
print(r.text)
print(os.environ["SLACK_TOKEN"])
"""
DELETE = """
import json, os, requests
sent = json.loads(os.environ["FORWARD_OUTPUT"].splitlines()[0])
r = requests.post(os.environ["SLACK_URL"] + "/chat.delete",
                  headers={"Authorization": "Bearer " + os.environ["SLACK_TOKEN"]},
                  json={"channel": sent["channel"], "ts": sent["ts"]})
print(r.json()["ok"])
"""
CANARY = "xoxb-audit-canary-51d0c3"


def ledger_after_a_rest_action_and_its_undo(owner) -> tuple[str, str]:
    """The ledger's rows and the owner's JSON-lines export after a rest action with a
    credential and its Undo."""
    with FakeSlackServer(token=CANARY) as slack:
        creds = {"SLACK_URL": slack.base_url, "SLACK_TOKEN": CANARY}
        action = create(
            owner,
            {
                "kind": "rest",
                "forward_code": POST,
                "reverse_code": DELETE,
                "hosts": [f"127.0.0.1:{slack.port}"],
                "credentials": creds,
                # An agent careless enough to put the value in its intent: masked out.
                "intent": f"post a joke with {CANARY}",
            },
        )
        assert action["status"] == "pending", action
        undone = owner.post(f"/api/v1/actions/{action['id']}/undo", {"credentials": creds})
        assert undone.json()["status"] == "reversed", undone.text
    assert events(seq__gt=1) == ["action", "run", "run", "undo", "undo"]
    owner.client.force_login(owner.user)
    export = owner.client.get("/audit/?format=jsonl")
    assert export["Content-Type"].startswith("application/x-ndjson")
    body = b"".join(export.streaming_content).decode()
    assert len(body.splitlines()) == 6
    return json.dumps(list(AuditEntry.objects.values()), default=str), body


def test_deny_the_credential_canary_is_in_no_entry_and_no_export(owner):
    rows, export = ledger_after_a_rest_action_and_its_undo(owner)
    assert CANARY not in rows and CANARY not in export
    assert "post a joke with ****" in export
    assert audit_verify()[1] is None


def test_sabotage_without_masking_the_canary_reaches_the_ledger_and_its_export(owner, monkeypatch):
    from webapp.audit import services

    monkeypatch.setattr(services, "mask_text", lambda text, values: text)
    rows, export = ledger_after_a_rest_action_and_its_undo(owner)
    assert CANARY in rows and CANARY in export


def test_session_cells_are_one_entry_per_token_and_minute(owner, sessions):
    session = owner.post("/api/v1/sessions", {}).json()["id"]
    for code in ("x = 1", "x + 1", "1 / 0"):
        assert owner.post(f"/api/v1/sessions/{session}/exec", {"code": code}).status_code == 200
    tally_flush()
    tallies_seal(now=timezone.now() + timedelta(minutes=3))
    cells = AuditEntry.objects.get(event="cell_summary")
    assert (cells.digests["calls"], cells.digests["failed"]) == (3, 1)
    assert cells.username == "owner" and cells.token_prefix
