"""The protections of the actions API switched off, one at a time: each deny test's check then
fails, so those tests can fail."""

from __future__ import annotations

import json

import pytest
from django.http import Http404

from tests.webapp.actions.test_action_undo import database_dump
from webapp.actions import api, services
from webapp.actions.requests import ActionRequest
from webapp.queries.models import Query
from webapp.runs.models import Run
from webapp.workspaces.models import Workspace

pytestmark = [pytest.mark.sabotage, pytest.mark.usefixtures("threads_runner", "workspaces_root")]

BODY = {"kind": "python", "forward_code": "print('once')"}


def test_sabotage_without_the_key_lookup_a_retry_does_not_come_back_as_the_same_action(
    owner, monkeypatch
):
    monkeypatch.setattr(services, "_earlier", lambda owner, key, digest: None)
    first = owner.post("/api/v1/actions", BODY, headers={"Idempotency-Key": "k"})
    second = owner.post("/api/v1/actions", BODY, headers={"Idempotency-Key": "k"})
    assert first.status_code == 201
    assert second.status_code != 200


def test_sabotage_without_the_digest_check_another_body_reuses_the_key(owner, monkeypatch):
    monkeypatch.setattr(ActionRequest, "digest", lambda self: "same")
    owner.post("/api/v1/actions", BODY, headers={"Idempotency-Key": "k"})
    other = {"kind": "python", "forward_code": "print('twice')"}
    assert owner.post("/api/v1/actions", other, headers={"Idempotency-Key": "k"}).status_code == 200


def test_sabotage_without_the_owner_scope_a_stranger_reads_the_action(owner, stranger, monkeypatch):
    def any_owner(user, action_id):
        found = Query.objects.filter(pk=action_id).first()
        if found is None:
            raise Http404
        return found

    monkeypatch.setattr(api, "get_action_for_user", any_owner)
    action = owner.post("/api/v1/actions", BODY).json()
    assert stranger.get(f"/api/v1/actions/{action['id']}").status_code == 200


def test_sabotage_without_the_owner_scope_a_stranger_runs_in_anothers_workspace(
    owner, stranger, monkeypatch
):
    monkeypatch.setattr(
        services, "get_workspace_for_user", lambda user, pk: Workspace.objects.get(pk=pk)
    )
    monkeypatch.setattr(services.workspaces, "workspace_attach", lambda *, query, workspace: None)
    mine = owner.post("/api/v1/actions", {"kind": "fs", "forward_code": "print(1)"}).json()
    body = {"kind": "fs", "forward_code": "print(2)", "workspace": mine["workspace"]}
    assert stranger.post("/api/v1/actions", body).status_code == 201
    assert Run.objects.count() == 2


def test_sabotage_a_credential_kept_in_the_request_digest_is_found_in_the_database(
    owner, monkeypatch
):
    monkeypatch.setattr(ActionRequest, "digest", lambda self: json.dumps(self.credentials))
    body = {**BODY, "credentials": {"TOKEN": "canary-5b1d"}}
    owner.post("/api/v1/actions", body)
    assert b"canary-5b1d" in database_dump()
