"""`rehearse: true | "only"` on POST /api/v1/actions, and every action's class: through the
deployed ASGI application, real sandboxes and the embedded runner."""

from __future__ import annotations

import sqlite3

import pytest
from django.urls import reverse

from webapp.actions import limits, rehearsal_jobs, rehearsals, views
from webapp.actions.limits import Limits, token_limits_set
from webapp.agents.models import ApiToken
from webapp.queries.models import Query
from webapp.runs.models import Run
from webapp.workspaces.models import Workspace

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")

ADD = "open('/workspace/report.txt', 'w').write('v2\\n')\n"
REMOVE = "import os\nos.remove('/workspace/report.txt')\n"
LEAVE_EMPTY = "open('/workspace/report.txt', 'w').close()\n"


def create(persona, body):
    response = persona.post("/api/v1/actions", body)
    assert response.status_code == 201, response.text
    return response.json()


def root_of(action):
    return Workspace.objects.get(pk=action["workspace"]).root


def test_rehearse_only_says_restored_and_runs_nothing_for_real(owner):
    action = create(
        owner, {"kind": "fs", "forward_code": ADD, "reverse_code": REMOVE, "rehearse": "only"}
    )
    rehearsal = action["rehearsal"]
    assert rehearsal["restored"] is True
    assert rehearsal["message"] == "the reverse program restores the state exactly"
    assert (rehearsal["diff"], rehearsal["counters"], rehearsal["stale"]) == ([], {}, False)
    assert rehearsal["before"] == rehearsal["after"]
    assert action["status"] == "discarded"
    assert action["error"] == rehearsals.ONLY_REASON
    assert action["class"] == "reversible"
    assert not Run.objects.filter(query_id=action["id"]).exists()
    assert list(root_of(action).iterdir()) == []


def test_rehearse_true_runs_for_real_when_the_reverse_restores(owner):
    action = create(
        owner, {"kind": "fs", "forward_code": ADD, "reverse_code": REMOVE, "rehearse": True}
    )
    assert action["rehearsal"]["restored"] is True
    assert action["status"] == "pending"
    [entry] = action["change"]["entries"]
    assert entry["path"] == "report.txt"


def test_rehearse_true_refuses_to_run_a_reverse_that_does_not_restore(owner):
    action = create(
        owner, {"kind": "fs", "forward_code": ADD, "reverse_code": LEAVE_EMPTY, "rehearse": True}
    )
    rehearsal = action["rehearsal"]
    assert rehearsal["restored"] is False
    [difference] = rehearsal["diff"]
    assert (difference["path"], difference["change"]) == ("report.txt", "extra")
    assert action["status"] == "failed"
    assert "does not restore the state" in action["error"]
    assert not Run.objects.filter(query_id=action["id"]).exists()
    assert list(root_of(action).iterdir()) == []


def test_a_sqlite_rehearsal_names_the_rows_and_reports_counters_apart(owner):
    workspace = owner.post("/api/v1/workspaces", {}).json()["id"]
    root = Workspace.objects.get(pk=workspace).root
    with sqlite3.connect(root / "app.db") as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, note TEXT)")
        conn.execute("INSERT INTO t (note) VALUES (NULL), ('x')")
    conn.close()
    action = create(
        owner,
        {
            "kind": "db",
            "workspace": workspace,
            "db": {"sqlite": "app.db"},
            "forward_code": "db.execute(\"UPDATE t SET note = 'y'\")\n"
            "db.execute(\"INSERT INTO t (note) VALUES ('z')\")",
            # Loses the NULL: every note back to 'x'.
            "reverse_code": "db.execute(\"DELETE FROM t WHERE note = 'z'\")\n"
            "db.execute(\"UPDATE t SET note = 'x'\")",
            "rehearse": "only",
        },
    )
    rehearsal = action["rehearsal"]
    assert rehearsal["restored"] is False
    [rows] = rehearsal["diff"]
    assert (rows["table"], rows["missing"], rows["extra"]) == ("t", 1, 1)
    assert rows["missing_rows"] == ["(id, note) = (1, NULL)"]
    assert rehearsal["counters"] == {"sqlite_sequence.t": {"before": 2, "after": 3}}


def test_a_verdict_is_stale_once_the_code_changes(owner):
    action = create(
        owner, {"kind": "fs", "forward_code": ADD, "reverse_code": REMOVE, "rehearse": "only"}
    )
    Query.objects.filter(pk=action["id"]).update(reverse_code=LEAVE_EMPTY)
    again = owner.get(f"/api/v1/actions/{action['id']}").json()
    assert again["rehearsal"]["stale"] is True


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"kind": "rest", "forward_code": "1", "reverse_code": "1"}, "cannot be rehearsed"),
        ({"kind": "fs", "forward_code": "1"}, "no reverse program"),
    ],
)
def test_what_cannot_be_rehearsed_is_refused_and_nothing_is_made(owner, body, error):
    before = Query.objects.count()
    response = owner.post("/api/v1/actions", {**body, "rehearse": True})
    assert response.status_code == 400
    assert error in response.json()["error"]
    assert Query.objects.count() == before


def test_every_action_carries_its_class(owner):
    fs = create(owner, {"kind": "fs", "forward_code": ADD})
    python = create(owner, {"kind": "python", "forward_code": "print(1)"})
    assert (fs["class"], python["class"]) == ("reversible", "irreversible")
    Query.objects.filter(pk=fs["id"]).update(reversible=False)
    listed = {a["id"]: a["class"] for a in owner.get("/api/v1/actions").json()["actions"]}
    assert listed[fs["id"]] == "irreversible"


def test_a_discard_records_the_digests_before_the_run_and_after_it(owner):
    action = create(owner, {"kind": "fs", "forward_code": ADD})
    discarded = owner.post(f"/api/v1/actions/{action['id']}/discard", {}).json()
    check = discarded["change"]["undo_check"]
    assert check["matched"] is True
    assert check["before"] == check["after"]


def test_the_query_page_rehearses_and_shows_the_verdict_and_the_class(owner):
    action = create(owner, {"kind": "fs", "forward_code": ADD, "reverse_code": LEAVE_EMPTY})
    owner.client.force_login(owner.user)
    url = reverse("actions:rehearse", args=[action["id"]])
    answer = owner.client.post(url, {"credentials": {}}, content_type="application/json")
    assert answer.status_code == 202
    assert rehearsal_jobs.rehearsals_wait(timeout=120)
    state = owner.client.get(reverse("actions:rehearsal", args=[action["id"]])).json()
    assert state["state"] == "done"
    assert state["verdict"]["restored"] is False
    page = owner.client.get(reverse("queries:query-detail", args=[action["id"]])).content.decode()
    assert url in page
    assert "1 path(s) differ after the reverse program" in page
    assert "report.txt: extra" in page
    assert 'no way back">reversible</span>' in page


def test_deny_another_user_cannot_rehearse_my_query(owner, stranger):
    action = create(owner, {"kind": "fs", "forward_code": ADD, "reverse_code": REMOVE})
    stranger.client.force_login(stranger.user)
    url = reverse("actions:rehearse", args=[action["id"]])
    answer = stranger.client.post(url, {}, content_type="application/json")
    assert answer.status_code == 404
    state = stranger.client.get(reverse("actions:rehearsal", args=[action["id"]]))
    assert state.status_code == 404
    assert rehearsal_jobs.rehearsals_wait(timeout=120)
    assert owner.get(f"/api/v1/actions/{action['id']}").json()["rehearsal"] is None


@pytest.mark.sabotage
def test_sabotage_without_the_owner_lookup_another_user_rehearses_my_query(
    owner, stranger, monkeypatch
):
    monkeypatch.setattr(views, "get_query_for_user", lambda user, pk: Query.objects.get(pk=pk))
    action = create(owner, {"kind": "fs", "forward_code": ADD, "reverse_code": REMOVE})
    stranger.client.force_login(stranger.user)
    url = reverse("actions:rehearse", args=[action["id"]])
    stranger.client.post(url, {}, content_type="application/json")
    assert rehearsal_jobs.rehearsals_wait(timeout=120)
    assert owner.get(f"/api/v1/actions/{action['id']}").json()["rehearsal"] is not None


def test_deny_a_token_that_requires_rehearsal_runs_no_unrehearsed_fs_action(owner):
    token = ApiToken.objects.get(owner=owner.user)
    token_limits_set(token=token, limits=Limits([], [], [], None, None, rehearsal_required=True))
    body = {"kind": "fs", "forward_code": ADD, "reverse_code": REMOVE}
    refused = owner.post("/api/v1/actions", body)
    assert refused.status_code == 403
    assert refused.json()["error"].startswith("limit rehearsal_required: ")
    assert not Query.objects.filter(owner=owner.user).exists()
    assert create(owner, {**body, "rehearse": True})["status"] == "pending"
    assert owner.get("/api/v1/actions/limits").json()["rehearsal_required"] is True


@pytest.mark.sabotage
def test_sabotage_without_the_rehearsal_limit_an_unrehearsed_action_runs(owner, monkeypatch):
    token = ApiToken.objects.get(owner=owner.user)
    token_limits_set(token=token, limits=Limits([], [], [], None, None, rehearsal_required=True))
    monkeypatch.setattr(
        limits, "token_limits", lambda token: Limits([], [], [], None, None, review_required=False)
    )
    body = {"kind": "fs", "forward_code": ADD, "reverse_code": REMOVE}
    assert create(owner, body)["status"] == "pending"


def test_the_review_inbox_shows_each_actions_class(owner):
    create(owner, {"kind": "fs", "forward_code": ADD})
    owner.client.force_login(owner.user)
    page = owner.client.get(reverse("actions:review")).content.decode()
    assert 'data-testid="review-class">reversible</span>' in page
