"""Verified undo: Discard (fs) and rollback (SQLite) prove the state is as before the run, and
a state that is not raises the alarm (an error in the log with both digests)."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from db_runs import run_db

from executor.kinds import fs as fs_kind
from executor.kinds.db import SqliteTarget
from executor.kinds.fs import FsWorkspace, prepared
from executor.kinds.sandbox import sandbox_host_uid
from executor.spec import RunSpec

WRITE = "open('/workspace/new.txt', 'w').write('x')"


def pending_fs(backend, limits, place: Path):
    workspace = FsWorkspace(place / "files", place / "state")
    workspace.root.mkdir()
    (workspace.root / "a.txt").write_text("a\n")
    uid = sandbox_host_uid(backend)
    with prepared(
        RunSpec(code=WRITE), limits=limits, workspace=workspace, run_id="r", uid=uid
    ) as job:
        outcome = job.finish(backend.run(job.spec, limits=job.limits, mounts=job.mounts))
    assert outcome.pending is not None, outcome.message
    return workspace, outcome.pending


def test_a_discard_proves_the_workspace_is_as_before(backend, limits, place, caplog):
    _, pending = pending_fs(backend, limits, place)
    check = pending.undo()
    assert check.matched and check.before == check.after
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_deny_a_workspace_changed_behind_a_discard_raises_the_alarm(backend, limits, place, caplog):
    workspace, pending = pending_fs(backend, limits, place)
    (workspace.root / "a.txt").chmod(0o600)  # what a broken discard (or anyone) left behind
    check = pending.undo()
    assert not check.matched
    [alarm] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "discard left a state other than before the run" in alarm.getMessage()
    assert (alarm.before, alarm.after) == (check.before, check.after)  # type: ignore[attr-defined]


def test_sabotage_without_the_workspace_digest_the_changed_workspace_passes(
    backend, limits, place, monkeypatch
):
    monkeypatch.setattr(fs_kind, "state_digest", lambda entries: "same")
    workspace, pending = pending_fs(backend, limits, place)
    (workspace.root / "a.txt").chmod(0o600)
    assert pending.undo().matched  # the verification switched off misses it


def test_a_sqlite_rollback_proves_the_file_is_as_before(backend, limits, place):
    workspace = FsWorkspace(place / "files", place / "state")
    workspace.root.mkdir()
    with sqlite3.connect(workspace.root / "app.db") as conn:
        conn.execute("CREATE TABLE t (n INTEGER)")
    conn.close()
    target = SqliteTarget(workspace=workspace, path="app.db")
    result, outcome = run_db(
        backend, limits, place, target, "db.execute('INSERT INTO t VALUES (1)')"
    )
    assert outcome.pending is not None, result.stderr
    check = outcome.pending.undo()
    assert check is not None and check.matched and check.before
