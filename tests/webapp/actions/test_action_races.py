"""Keep racing Discard, Undo or the pending timeout on one action, many rounds: exactly one
wins each time, the other is told (409) or ends nothing, and the workspace holds what the
winner decided. The sabotage takes the condition out of the lifecycle's UPDATE (webapp.lifecycle)
and both a Keep and a Discard are then answered 200."""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from tests.webapp.lifecycle_writes import read_then_write
from webapp import lifecycle
from webapp.workspaces.models import PendingChange, Workspace
from webapp.workspaces.reaper import fs_pending_expire

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")

ROUNDS = 6


def race(persona, action_id: int, verbs=("keep", "discard")) -> dict[str, int]:
    """The two verbs sent at once; {verb: status code}."""
    start = threading.Barrier(2)

    def send(verb: str) -> tuple[str, int]:
        start.wait()
        return verb, persona.post(f"/api/v1/actions/{action_id}/{verb}", {}).status_code

    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(send, verbs))


def race_the_timeout(persona, action_id: int, verb: str) -> tuple[int, bool]:
    """`verb` sent while the reaper's pending timeout passes over the action; (the verb's
    status code, whether the timeout ended the action's change)."""
    start = threading.Barrier(2)
    change = PendingChange.objects.get(run__query_id=action_id)
    past_it = timezone.now() + timedelta(days=30)

    def send() -> int:
        start.wait()
        return persona.post(f"/api/v1/actions/{action_id}/{verb}", {}).status_code

    def expire() -> bool:
        start.wait()
        try:
            return change.pk in fs_pending_expire(now=past_it)
        finally:
            connection.close()  # this thread's own

    with ThreadPoolExecutor(2) as pool:
        sent, expired = pool.submit(send), pool.submit(expire)
        return sent.result(), expired.result()


def fs_action(persona, workspace: int, n: int) -> dict:
    code = f"open('f{n}.txt', 'w').write('{n}')"
    body = {"kind": "fs", "forward_code": code, "workspace": workspace}
    action = persona.post("/api/v1/actions", body).json()
    assert action["status"] == "pending", action
    return action


def status_of(persona, action: dict) -> str:
    return persona.get(f"/api/v1/actions/{action['id']}").json()["status"]


def test_keep_racing_discard_on_an_fs_action_has_one_winner(owner):
    workspace = owner.post("/api/v1/workspaces", {}).json()["id"]
    root = Workspace.objects.get(pk=workspace).root
    for n in range(ROUNDS):
        code = f"open('f{n}.txt', 'w').write('{n}')"
        body = {"kind": "fs", "forward_code": code, "workspace": workspace}
        action = owner.post("/api/v1/actions", body).json()
        assert action["status"] == "pending", action
        codes = race(owner, action["id"])
        assert sorted(codes.values()) == [200, 409], codes
        winner = "kept" if codes["keep"] == 200 else "discarded"
        assert owner.get(f"/api/v1/actions/{action['id']}").json()["status"] == winner
        assert (root / f"f{n}.txt").exists() == (winner == "kept")


def test_keep_racing_discard_on_a_db_action_has_one_winner(owner):
    workspace = owner.post("/api/v1/workspaces", {}).json()["id"]
    root = Workspace.objects.get(pk=workspace).root
    target = {"sqlite": "n.db"}
    setup = {
        "kind": "db",
        "forward_code": "db.execute('CREATE TABLE n (x)')",
        "workspace": workspace,
        "db": target,
    }
    made = owner.post("/api/v1/actions", setup).json()
    owner.post(f"/api/v1/actions/{made['id']}/keep", {})
    kept = 0
    for n in range(ROUNDS):
        body = {
            "kind": "db",
            "forward_code": f"db.execute('INSERT INTO n VALUES ({n})')",
            "workspace": workspace,
            "db": target,
        }
        action = owner.post("/api/v1/actions", body).json()
        assert action["status"] == "pending", action
        codes = race(owner, action["id"])
        assert sorted(codes.values()) == [200, 409], codes
        winner = "kept" if codes["keep"] == 200 else "discarded"
        assert owner.get(f"/api/v1/actions/{action['id']}").json()["status"] == winner
        kept += winner == "kept"
    with sqlite3.connect(root / "n.db") as db:
        assert db.execute("SELECT count(*) FROM n").fetchone() == (kept,)


def test_keep_racing_undo_on_an_fs_action_has_one_winner(owner):
    """Undo of a pending change discards it; once kept, an action with no reverse program has
    nothing to undo (409)."""
    workspace = owner.post("/api/v1/workspaces", {}).json()["id"]
    root = Workspace.objects.get(pk=workspace).root
    for n in range(ROUNDS):
        action = fs_action(owner, workspace, n)
        codes = race(owner, action["id"], ("keep", "undo"))
        assert sorted(codes.values()) == [200, 409], codes
        winner = "kept" if codes["keep"] == 200 else "discarded"
        assert status_of(owner, action) == winner
        assert (root / f"f{n}.txt").exists() == (winner == "kept")


@pytest.mark.parametrize("verb", ["keep", "undo"])
def test_keep_or_undo_racing_the_pending_timeout_has_one_winner(owner, verb):
    workspace = owner.post("/api/v1/workspaces", {}).json()["id"]
    root = Workspace.objects.get(pk=workspace).root
    for n in range(ROUNDS):
        action = fs_action(owner, workspace, n)
        code, expired = race_the_timeout(owner, action["id"], verb)
        assert (code == 200) != expired, (code, expired)
        assert code in (200, 409)
        state = owner.get(f"/api/v1/actions/{action['id']}").json()
        if expired:
            assert (state["status"], state["change"]["timed_out"]) == ("discarded", True)
        else:
            assert state["status"] == ("kept" if verb == "keep" else "discarded")
            assert not state["change"]["timed_out"]
        assert (root / f"f{n}.txt").exists() == (state["status"] == "kept")


@pytest.mark.sabotage
def test_sabotage_without_the_conditional_update_a_db_keep_and_discard_both_win(owner, monkeypatch):
    """Keep and Discard of a db change each read `pending` before either writes: without the
    condition in the UPDATE both are answered 200, two winners for one change."""
    workspace = owner.post("/api/v1/workspaces", {}).json()["id"]
    body = {
        "kind": "db",
        "forward_code": "db.execute('CREATE TABLE n (x)')",
        "workspace": workspace,
        "db": {"sqlite": "n.db"},
    }
    action = owner.post("/api/v1/actions", body).json()
    assert action["status"] == "pending", action
    choices = (lifecycle.CHANGE.model, ("keep_requested", "discard_requested"))
    monkeypatch.setattr(lifecycle, "move", read_then_write(threading.Barrier(2), only=choices))
    assert race(owner, action["id"]) == {"keep": 200, "discard": 200}
