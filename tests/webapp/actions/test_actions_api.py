"""POST /api/v1/actions and its Keep / Discard / Undo through the deployed ASGI application,
real sandboxes and the embedded runner."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from webapp.actions.models import Action
from webapp.queries.models import Query
from webapp.runs.models import Run
from webapp.workspaces.models import Workspace

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")

JOKE = "open('joke.txt', 'w').write('knock knock\\n')\nprint('wrote it')\n"


def create(persona, body, **headers):
    return persona.post("/api/v1/actions", body, **headers)


def workspace_root(action: dict):
    return Workspace.objects.get(pk=action["workspace"]).root


def test_an_fs_action_runs_waits_pending_with_its_change_and_is_kept(owner):
    response = create(owner, {"kind": "fs", "forward_code": JOKE, "intent": "tell a joke"})
    assert response.status_code == 201, response.text
    action = response.json()
    assert (action["status"], action["kind"], action["intent"]) == ("pending", "fs", "tell a joke")
    assert action["stdout"] == "wrote it\n"
    [entry] = action["change"]["entries"]
    assert (entry["path"], entry["action"]) == ("joke.txt", "added")
    root = workspace_root(action)
    assert not (root / "joke.txt").exists()
    kept = owner.post(f"/api/v1/actions/{action['id']}/keep", {})
    assert kept.json()["status"] == "kept"
    assert (root / "joke.txt").read_text() == "knock knock\n"
    assert owner.get(f"/api/v1/actions/{action['id']}").json()["status"] == "kept"


def test_an_fs_action_discarded_leaves_the_workspace_as_it_was(owner):
    action = create(owner, {"kind": "fs", "forward_code": JOKE}).json()
    discarded = owner.post(f"/api/v1/actions/{action['id']}/discard", {}).json()
    assert discarded["status"] == "discarded"
    assert list(workspace_root(action).iterdir()) == []
    again = owner.post(f"/api/v1/actions/{action['id']}/keep", {})
    assert again.status_code == 409
    assert "only a pending action can keep; this one is discarded" in again.json()["error"]


def test_a_python_action_succeeds_and_failures_say_why(owner):
    ok = create(owner, {"kind": "python", "forward_code": "print(6 * 7)"}).json()
    assert (ok["status"], ok["stdout"], ok["exit_code"]) == ("succeeded", "42\n", 0)
    bad = create(owner, {"kind": "python", "forward_code": "raise SystemExit(3)"}).json()
    assert (bad["status"], bad["exit_code"]) == ("failed", 3)
    assert "exited with code 3" in bad["error"]


def test_the_output_streams_as_ndjson_and_ends_with_the_action(owner):
    code = "for i in range(3):\n    print(i, flush=True)\n"
    response = create(
        owner, {"kind": "python", "forward_code": code}, accept="application/x-ndjson"
    )
    assert response.status_code == 201
    assert response["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in response.text.splitlines()]
    output = "".join(line["text"] for line in lines if line["type"] == "output")
    seqs = [line["seq"] for line in lines if line["type"] == "output"]
    assert output == "0\n1\n2\n" and seqs == sorted(set(seqs))
    assert lines[-1]["type"] == "action" and lines[-1]["action"]["status"] == "succeeded"


def test_a_retry_with_the_same_idempotency_key_runs_once(owner):
    body = {"kind": "python", "forward_code": "print('once')"}
    first = owner.post("/api/v1/actions", body, headers={"Idempotency-Key": "k-1"})
    second = owner.post("/api/v1/actions", body, headers={"Idempotency-Key": "k-1"})
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"]
    assert Run.objects.filter(query_id=first.json()["id"]).count() == 1
    assert Query.objects.count() == 1


def test_the_same_idempotency_key_with_another_body_is_refused_and_runs_nothing(owner):
    owner.post(
        "/api/v1/actions", {"kind": "python", "forward_code": "1"}, headers={"Idempotency-Key": "k"}
    )
    other = owner.post(
        "/api/v1/actions", {"kind": "python", "forward_code": "2"}, headers={"Idempotency-Key": "k"}
    )
    assert other.status_code == 409
    assert "Idempotency-Key was used for a different request" in other.json()["error"]
    assert Run.objects.count() == 1


def test_another_users_action_is_not_found(owner, stranger):
    action = create(owner, {"kind": "fs", "forward_code": JOKE}).json()
    for path in ("", "/keep", "/discard", "/undo"):
        call = stranger.get if not path else (lambda p: stranger.post(p, {}))
        response = call(f"/api/v1/actions/{action['id']}{path}")
        assert response.status_code == 404, path
        assert response.json() == {"error": "not found"}
    assert owner.get(f"/api/v1/actions/{action['id']}").json()["status"] == "pending"
    assert stranger.get("/api/v1/actions").json() == {"actions": []}


def test_another_users_workspace_is_not_found_and_nothing_runs(owner, stranger):
    action = create(owner, {"kind": "fs", "forward_code": JOKE}).json()
    response = create(
        stranger, {"kind": "fs", "forward_code": JOKE, "workspace": action["workspace"]}
    )
    assert response.status_code == 404
    assert Run.objects.count() == 1


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{", "body is not valid JSON"),
        (b"[1]", "object"),
        (b'{"kind": "shell", "forward_code": "x"}', "kind"),
        (b'{"kind": "python"}', "forward_code is required"),
        (b'{"kind": "python", "forward_code": 5}', "forward_code"),
        (
            b'{"kind": "python", "forward_code": "1", "credentials": {"A B": "x"}}',
            "credential names",
        ),
        (b'{"kind": "python", "forward_code": "1", "surprise": 1}', "surprise"),
        (b'{"kind": "db", "forward_code": "1", "db": {"sqlite": "a", "postgres": "B"}}', "one of"),
        (b'{"kind": "db", "forward_code": "1", "db": {"sqlite": "../up.db"}}', "db.sqlite"),
        (b'{"kind": "python", "forward_code": "1", "workspace": 1}', "no workspace"),
        (b"[" * 100_000 + b"]" * 100_000, ""),
    ],
)
def test_malformed_or_hostile_bodies_are_400s_with_a_clear_error_and_run_nothing(
    owner, raw, message
):
    response = owner.post("/api/v1/actions", None, raw=raw)
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]
    assert Run.objects.count() == 0 and Action.objects.count() == 0


def test_the_list_filters_by_status_and_kind(owner):
    create(owner, {"kind": "python", "forward_code": "print(1)"})
    pending = create(owner, {"kind": "fs", "forward_code": JOKE}).json()
    listed = owner.get("/api/v1/actions", status="pending").json()["actions"]
    assert [a["id"] for a in listed] == [pending["id"]]
    assert [a["kind"] for a in owner.get("/api/v1/actions", kind="python").json()["actions"]] == [
        "python"
    ]
    assert owner.get("/api/v1/actions", status="nonsense").status_code == 400


def test_the_actions_are_in_the_openapi_schema():
    from webapp.agents.api import api

    paths = api.get_openapi_schema()["paths"]
    for path in (
        "/api/v1/actions",
        "/api/v1/actions/{action_id}/keep",
        "/api/v1/actions/{action_id}/undo",
    ):
        assert path in paths


def test_timeout_s_stops_the_forward_run_and_says_which_limit(owner, settings):
    body = {"kind": "python", "forward_code": "import time\ntime.sleep(60)", "timeout_s": 1}
    action = create(owner, body).json()
    assert action["status"] == "failed"
    assert action["error"] == "Stopped: time limit (1 s) reached."
    over = create(owner, {**body, "timeout_s": settings.EXECUTOR_WALL_TIME_S + 1})
    assert over.status_code == 400 and "timeout_s must be > 0 and <=" in over.json()["error"]


def test_the_list_filters_by_the_token_that_made_the_action(owner):
    from webapp.agents.models import ApiToken
    from webapp.agents.tokens import token_create

    other = token_create(owner=owner.user, name="second").secret
    mine = create(owner, {"kind": "python", "forward_code": "print(1)"}).json()
    owner.token = other
    create(owner, {"kind": "python", "forward_code": "print(2)"})
    first_prefix = ApiToken.objects.get(name="test").prefix
    listed = owner.get("/api/v1/actions", token=first_prefix).json()["actions"]
    assert [a["id"] for a in listed] == [mine["id"]]


def test_a_body_past_the_cap_is_413_and_runs_nothing(owner, settings):
    settings.AGENTS_MAX_BODY_BYTES = 2048
    body = {"kind": "python", "forward_code": "#" * 4096}
    response = create(owner, body)
    assert response.status_code == 413 and response.json() == {"error": "request body is too large"}
    assert Run.objects.count() == 0


def test_retries_sent_at_the_same_moment_with_one_key_run_once(owner):
    body = {"kind": "python", "forward_code": "print('once')"}
    start = threading.Barrier(4)

    def send(_: int) -> tuple[int, int]:
        start.wait()
        response = owner.post("/api/v1/actions", body, headers={"Idempotency-Key": "same"})
        return response.status_code, response.json()["id"]

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(send, range(4)))
    assert sorted(code for code, _ in answers) == [200, 200, 200, 201]
    assert len({action_id for _, action_id in answers}) == 1
    assert Run.objects.count() == 1


def test_an_action_is_a_query_on_its_page_and_a_browser_query_is_an_action(owner):
    from django.urls import reverse

    from tests.factories import QueryFactory
    from webapp.runs import runner, services

    action = create(owner, {"kind": "fs", "forward_code": JOKE, "intent": "a joke"}).json()
    owner.client.force_login(owner.user)
    page = owner.client.get(reverse("queries:query-detail", args=[action["id"]]))
    assert page.status_code == 200
    assert b"joke.txt" in page.content
    query = QueryFactory(owner=owner.user, kind="python", forward_code="print('from the page')")
    run = services.query_run(query=query)
    assert runner.wait(run.pk, 60)
    seen = owner.get(f"/api/v1/actions/{query.pk}").json()
    assert (seen["status"], seen["stdout"]) == ("succeeded", "from the page\n")
