"""Keep racing Discard on one action, many rounds: exactly one wins each time, the other is
told (409), and the workspace holds what the winner decided."""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from webapp.workspaces.models import Workspace

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")

ROUNDS = 6


def race(persona, action_id: int) -> dict[str, int]:
    """Keep and Discard sent at once; {verb: status code}."""
    start = threading.Barrier(2)

    def send(verb: str) -> tuple[str, int]:
        start.wait()
        return verb, persona.post(f"/api/v1/actions/{action_id}/{verb}", {}).status_code

    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(send, ("keep", "discard")))


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
