"""A token's damage limits refuse a request outside them, naming the limit, before anything is
saved or run; switched off (sabotage), the same requests run."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.urls import reverse

from webapp.actions import limits as limits_module
from webapp.actions import services
from webapp.actions.limits import Limits, token_limits_set
from webapp.actions.output import action_json
from webapp.agents.models import ApiToken
from webapp.agents.tokens import token_revoke, token_revoked
from webapp.queries.models import Query
from webapp.runs.models import Run
from webapp.workspaces.models import PendingChange, Workspace

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")

FS = {"kind": "fs", "forward_code": "open('a.txt', 'w').write('a')"}
PY = {"kind": "python", "forward_code": "print(1)"}


def limit(persona, **given) -> None:
    wanted = {
        "allowed_kinds": [],
        "allowed_hosts": [],
        "allowed_db_targets": [],
        "actions_per_hour": None,
        "pending_at_once": None,
        **given,
    }
    token_limits_set(token=ApiToken.objects.get(owner=persona.user), limits=Limits(**wanted))


def refused(response, status: int, name: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"].startswith(f"limit {name}: ")


def test_a_token_allowed_only_python_is_refused_an_fs_action_and_nothing_runs(owner):
    limit(owner, allowed_kinds=["python"])
    refused(owner.post("/api/v1/actions", FS), 403, "allowed_kinds")
    assert (Query.objects.count(), Run.objects.count()) == (0, 0)
    assert owner.post("/api/v1/actions", PY).json()["status"] == "succeeded"


def test_a_host_outside_the_tokens_patterns_is_refused(owner):
    limit(owner, allowed_hosts=["*.slack.com"])
    body = {"kind": "rest", "forward_code": "print(1)", "hosts": ["evil.example.com"]}
    refused(owner.post("/api/v1/actions", body), 403, "allowed_hosts")
    assert Run.objects.count() == 0
    allowed = {**body, "hosts": ["api.slack.com"]}
    assert owner.post("/api/v1/actions", allowed).status_code == 201


def test_a_db_target_outside_the_tokens_patterns_is_refused(owner):
    limit(owner, allowed_db_targets=["sqlite:scratch/*"])
    body = {"kind": "db", "forward_code": "db.execute('SELECT 1')", "db": {"sqlite": "prod.db"}}
    refused(owner.post("/api/v1/actions", body), 403, "allowed_db_targets")
    assert Run.objects.count() == 0


def test_the_hourly_cap_answers_429_with_retry_after(owner):
    limit(owner, actions_per_hour=2)
    for _ in range(2):
        assert owner.post("/api/v1/actions", PY).status_code == 201
    third = owner.post("/api/v1/actions", PY)
    refused(third, 429, "actions_per_hour")
    assert 1 <= int(third["Retry-After"]) <= 3601
    assert Run.objects.count() == 2


def test_the_pending_cap_refuses_until_one_is_kept(owner):
    limit(owner, pending_at_once=1)
    first = owner.post("/api/v1/actions", FS).json()
    assert first["status"] == "pending"
    refused(owner.post("/api/v1/actions", FS), 403, "pending_at_once")
    owner.post(f"/api/v1/actions/{first['id']}/keep", {})
    assert owner.post("/api/v1/actions", FS).json()["status"] == "pending"


def test_the_token_reads_its_own_limits_and_a_limit_of_another_token_does_not_apply(
    owner, stranger
):
    limit(owner, allowed_kinds=["python"])
    assert owner.get("/api/v1/actions/limits").json()["allowed_kinds"] == ["python"]
    assert stranger.get("/api/v1/actions/limits").json()["allowed_kinds"] == []
    assert stranger.post("/api/v1/actions", FS).status_code == 201


def test_the_owner_sets_limits_on_the_command_line(owner):
    token = ApiToken.objects.get(owner=owner.user)
    out = io.StringIO()
    call_command(
        "token_limits", token.prefix, "--kinds", "python,rest", "--pending", "3", stdout=out
    )
    assert '"allowed_kinds": [\n    "python",\n    "rest"\n  ]' in out.getvalue()
    refused(owner.post("/api/v1/actions", FS), 403, "allowed_kinds")


@pytest.mark.sabotage
def test_sabotage_without_the_check_the_refused_kind_runs(owner, monkeypatch):
    monkeypatch.setattr(limits_module, "token_limits", lambda token: limits_module.NO_LIMITS)
    limit(owner, allowed_kinds=["python"])
    assert owner.post("/api/v1/actions", FS).status_code == 201
    assert Run.objects.count() == 1


@pytest.mark.sabotage
def test_sabotage_without_counting_pending_changes_a_second_pending_action_runs(owner, monkeypatch):
    monkeypatch.setattr(limits_module, "_pending", lambda token: 0)
    limit(owner, pending_at_once=1)
    owner.post("/api/v1/actions", FS)
    assert owner.post("/api/v1/actions", FS).status_code == 201


def test_revoking_a_token_discards_its_pending_fs_and_db_actions_and_expires_rest_ones(owner):
    fs = owner.post("/api/v1/actions", FS).json()
    db = owner.post(
        "/api/v1/actions", {"kind": "db", "forward_code": "db.execute('CREATE TABLE t (x)')"}
    ).json()
    rest = owner.post("/api/v1/actions", {"kind": "rest", "forward_code": "print('sent')"}).json()
    done = owner.post("/api/v1/actions", FS).json()
    owner.post(f"/api/v1/actions/{done['id']}/keep", {})
    assert [a["status"] for a in (fs, db, rest)] == ["pending"] * 3
    token = ApiToken.objects.get(owner=owner.user)
    token_revoke(owner=owner.user, token_id=token.pk)
    states = {a["id"]: a for a in map(action_json, Query.objects.all())}
    assert states[fs["id"]]["status"] == states[db["id"]]["status"] == "discarded"
    assert "token that made it was revoked" in states[fs["id"]]["error"]
    assert "token that made it was revoked" in states[db["id"]]["error"]
    assert states[rest["id"]]["status"] == "expired"
    assert "the effect stands" in states[rest["id"]]["error"]
    assert states[done["id"]]["status"] == "kept"
    assert list(Workspace.objects.get(pk=fs["workspace"]).root.iterdir()) == []


@pytest.mark.sabotage
def test_sabotage_without_the_revocation_receiver_a_pending_action_outlives_its_token(
    owner, monkeypatch
):
    monkeypatch.setattr(token_revoked, "receivers", [])
    monkeypatch.setattr(token_revoked, "sender_receivers_cache", {})
    fs = owner.post("/api/v1/actions", FS).json()
    token_revoke(owner=owner.user, token_id=ApiToken.objects.get(owner=owner.user).pk)
    assert action_json(Query.objects.get(pk=fs["id"]))["status"] == "pending"


def test_a_review_required_tokens_keep_is_refused_and_the_owners_keep_on_the_page_applies_it(
    owner,
):
    limit(owner, review_required=True)
    action = owner.post("/api/v1/actions", FS).json()
    refused_keep = owner.post(f"/api/v1/actions/{action['id']}/keep", {})
    refused(refused_keep, 403, "review_required")
    assert f"/review/#action-{action['id']}" in refused_keep.json()["error"]
    assert owner.get(f"/api/v1/actions/{action['id']}").json()["status"] == "pending"
    change = PendingChange.objects.get(run__query_id=action["id"])
    owner.client.force_login(owner.user)
    page = owner.client.post(
        reverse("workspaces:change-keep", args=[change.pk]), HTTP_ACCEPT="application/json"
    )
    assert page.status_code == 200
    assert owner.get(f"/api/v1/actions/{action['id']}").json()["status"] == "kept"
    assert (Workspace.objects.get(pk=action["workspace"]).root / "a.txt").read_text() == "a"


def test_a_review_required_tokens_rest_action_is_not_kept_through_the_api_either(owner):
    limit(owner, review_required=True)
    body = {"kind": "rest", "forward_code": "print('posted')", "reverse_code": "print(1)"}
    action = owner.post("/api/v1/actions", body).json()
    refused(owner.post(f"/api/v1/actions/{action['id']}/keep", {}), 403, "review_required")
    assert owner.get(f"/api/v1/actions/{action['id']}").json()["status"] == "pending"


def test_a_review_required_tokens_actions_can_still_be_discarded_through_the_api(owner):
    limit(owner, review_required=True)
    action = owner.post("/api/v1/actions", FS).json()
    assert owner.post(f"/api/v1/actions/{action['id']}/discard", {}).json()["status"] == "discarded"


@pytest.mark.sabotage
def test_sabotage_without_the_review_check_the_api_keeps_it(owner, monkeypatch):
    monkeypatch.setattr(services, "review_check", lambda **_: None)
    limit(owner, review_required=True)
    action = owner.post("/api/v1/actions", FS).json()
    assert owner.post(f"/api/v1/actions/{action['id']}/keep", {}).json()["status"] == "kept"


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("api.slack.com", True),
        ("api.slack.com:443", True),
        ("API.Slack.com", True),
        ("slack.com.evil.io", False),
        ("evilslack.com", False),
        ("127.0.0.1:8080", True),
        ("127.0.0.1:9090", False),
        ("127.0.0.1", False),
    ],
)
def test_host_patterns_match_names_and_ports(host, allowed):
    assert limits_module._host_allowed(host, ["*.slack.com", "127.0.0.1:8080"]) is allowed
