"""The ledger's pages: a person sees only their own entries, staff see everyone's; filters and
the JSON-lines export select the same entries."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from webapp.audit import views
from webapp.audit.selectors import audit_list_all
from webapp.audit.services import audit_append


@pytest.fixture
def people(db):
    users = get_user_model().objects
    owner = users.create_user(username="owner")
    stranger = users.create_user(username="stranger")
    staff = users.create_user(username="staff", is_staff=True)
    audit_append(event="run", user=owner, kind="python", target="run 1", intent="owner's run")
    audit_append(event="keep", user=owner, kind="fs", target="change 2", intent="owner's keep")
    audit_append(event="run", user=stranger, kind="python", target="run 3", intent="stranger's")
    return owner, stranger, staff


def page(user, url: str = "/audit/") -> str:
    client = Client()
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200, response.status_code
    if url.endswith("format=jsonl") or "format=jsonl&" in url:
        return b"".join(response.streaming_content).decode()
    return response.content.decode()


def test_deny_a_person_sees_only_their_own_entries(people):
    owner, stranger, _ = people
    html = page(owner)
    assert "owner&#x27;s run" in html and "owner&#x27;s keep" in html
    assert "stranger&#x27;s" not in html
    export = [json.loads(line) for line in page(owner, "/audit/?format=jsonl").splitlines()]
    assert {entry["username"] for entry in export} == {"owner"}


def test_sabotage_an_unscoped_page_shows_another_persons_entries(people, monkeypatch):
    owner, _, _ = people
    monkeypatch.setattr(views, "audit_list_for_user", lambda user, filters: audit_list_all(filters))
    assert "stranger&#x27;s" in page(owner)


def test_filters_select_by_event_and_kind_on_the_page_and_in_the_export(people):
    owner, _, _ = people
    html = page(owner, "/audit/?event=keep")
    assert "owner&#x27;s keep" in html and "owner&#x27;s run" not in html
    export = page(owner, "/audit/?kind=python&format=jsonl").splitlines()
    assert [json.loads(line)["target"] for line in export] == ["run 1"]
    assert "owner&#x27;s run" in page(owner, "/audit/?event=not-an-event")  # dropped, not guessed


def test_staff_see_everyone_and_others_are_turned_away(people):
    owner, _, staff = people
    html = page(staff, "/audit/all/?user=stranger")
    assert "stranger&#x27;s" in html and "owner&#x27;s" not in html
    assert "owner&#x27;s run" in page(staff, "/audit/all/")
    client = Client()
    client.force_login(owner)
    response = client.get("/audit/all/")
    assert response.status_code == 302 and "stranger" not in response.content.decode()
    assert Client().get("/audit/").status_code == 302
