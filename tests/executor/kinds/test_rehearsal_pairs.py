"""The undo benchmark (undo_pairs.toml): every forward/reverse pair rehearsed in real sandboxes,
each verdict the expected one, and no wrong pair passes."""

from __future__ import annotations

import os
import sqlite3
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from executor.kinds import rehearsal
from executor.kinds.db import PostgresTarget, SqliteTarget
from executor.kinds.fs import FsWorkspace
from executor.kinds.fs_tree import scan
from executor.kinds.job import Job
from executor.kinds.sandbox import sandbox_host_uid
from executor.result import RunResult
from executor.spec import RunSpec
from tests.servers import PostgresDatabase, PostgresServer

PAIRS: list[dict[str, Any]] = tomllib.loads(
    Path(__file__).with_name("undo_pairs.toml").read_text()
)["pair"]
# What a reverse program may call to read what its forward program printed as `SAVED <json>`.
REVERSE_PRELUDE = (
    "def saved(text):\n"
    "    import json\n"
    "    return next(json.loads(line[6:]) for line in text.splitlines()"
    " if line.startswith('SAVED '))\n"
)
FS_FILES: dict[str, tuple[str, int]] = {
    "notes.txt": ("hello\n", 0o644),
    "draft.txt": ("draft\n", 0o644),
    "report.txt": ("report v1\n", 0o644),
    "secret.txt": ("s3cret\n", 0o640),
    "run.sh": ("#!/bin/sh\necho hi\n", 0o755),
    "data/log.csv": ("1,2\n", 0o644),
}
SQLITE_SETUP = [
    "CREATE TABLE users (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, email TEXT,"
    " balance INTEGER)",
    "INSERT INTO users VALUES (1, 'ana', 'ana@x', 10), (2, 'bo', NULL, 20),"
    " (5, 'cy', 'cy@x', NULL)",
    "CREATE INDEX users_name ON users (name)",
    "CREATE TABLE tags (name TEXT, note TEXT)",
    "INSERT INTO tags VALUES ('a', NULL), ('a', NULL), ('b', 'x')",
    "CREATE TABLE settings (key TEXT PRIMARY KEY, value)",  # no type: values keep their own
    "INSERT INTO settings VALUES ('limit', 10), ('ratio', 0.5), ('name', 'x')",
    "CREATE TABLE events (what TEXT, at INTEGER)",
    "INSERT INTO events VALUES ('start', 1)",
    "CREATE TABLE audit (what TEXT)",
    "CREATE TRIGGER events_audit AFTER UPDATE ON events"
    " BEGIN INSERT INTO audit VALUES ('upd'); END",
]
POSTGRES_SETUP = [
    "DROP TABLE IF EXISTS users, tags",
    "CREATE TABLE users (id serial PRIMARY KEY, name text NOT NULL, email text, balance integer)",
    "INSERT INTO users (id, name, email, balance) VALUES (1, 'ana', 'ana@x', 10),"
    " (2, 'bo', NULL, 20), (5, 'cy', 'cy@x', NULL)",
    "SELECT setval('users_id_seq', 5)",
    "CREATE UNIQUE INDEX users_name ON users (name)",
    "CREATE TABLE tags (name text, note text)",
    "INSERT INTO tags VALUES ('a', NULL), ('a', NULL), ('b', 'x')",
]


def by_kind(kind: str) -> list[Any]:
    return [pytest.param(p, id=p["name"]) for p in PAIRS if p["kind"] == kind]


def test_the_benchmark_has_thirty_pairs_over_every_engine_right_and_wrong():
    assert len(PAIRS) >= 30
    assert len({p["name"] for p in PAIRS}) == len(PAIRS)
    for kind in ("fs", "sqlite", "postgres"):
        verdicts = {p["restored"] for p in PAIRS if p["kind"] == kind}
        assert verdicts == {True, False}, kind


def reverse_for(code: str):
    def build(forward: RunResult) -> RunSpec:
        # In the environment only: a file would land in the fs kind's workspace.
        return RunSpec(code=REVERSE_PRELUDE + code, env={"FORWARD_OUTPUT": forward.stdout})

    return build


def runner(backend):
    def run(job: Job) -> RunResult:
        return backend.run(job.spec, limits=job.limits, mounts=job.mounts)

    return run


def fs_workspace(place: Path) -> FsWorkspace:
    root = place / "files"
    root.mkdir()
    for rel, (text, mode) in FS_FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)
    os.symlink("notes.txt", root / "latest")
    return FsWorkspace(root, place / "state")


def check(verdict: rehearsal.Rehearsal, pair: dict[str, Any]) -> None:
    assert verdict.forward is not None and verdict.forward.ok, verdict.forward
    assert verdict.reverse is not None and verdict.reverse.ok, verdict.reverse
    assert verdict.restored is pair["restored"], (verdict.message, verdict.diff)
    assert bool(verdict.diff) is not pair["restored"]
    assert (verdict.before == verdict.after) is pair["restored"]
    assert bool(verdict.counters) is pair.get("counters", False), verdict.counters


@pytest.mark.parametrize("pair", by_kind("fs"))
def test_fs_pair(backend, limits, place, pair):
    workspace = fs_workspace(place)
    before = rehearsal.fs_state_digest(scan(workspace.root))
    verdict = rehearsal.rehearse_fs(
        RunSpec(code=pair["forward"]),
        reverse_for(pair["reverse"]),
        limits=limits,
        workspace=workspace,
        scratch=place,
        uid=sandbox_host_uid(backend),
        run=runner(backend),
    )
    check(verdict, pair)
    # The real workspace was only read, and nothing of the rehearsal is left behind.
    assert rehearsal.fs_state_digest(scan(workspace.root)) == before
    assert verdict.before == before
    assert workspace.pending() is None


@pytest.mark.parametrize("pair", by_kind("sqlite"))
def test_sqlite_pair(backend, limits, place, pair):
    workspace = FsWorkspace(place / "files", place / "state")
    workspace.root.mkdir()
    database = workspace.root / "app.db"
    with sqlite3.connect(database) as conn:
        for statement in SQLITE_SETUP:
            conn.execute(statement)
    conn.close()
    original = database.read_bytes()
    verdict = rehearsal.rehearse_db(
        RunSpec(code=pair["forward"]),
        reverse_for(pair["reverse"]),
        limits=limits,
        target=SqliteTarget(workspace=workspace, path="app.db"),
        control_base=place,
        run_id="rehearsal",
        run=runner(backend),
        owner_uid=sandbox_host_uid(backend),
    )
    check(verdict, pair)
    assert database.read_bytes() == original  # a copy was rehearsed on; the file is untouched
    assert workspace.pending() is None


@pytest.fixture(scope="module")
def pg_database(postgres_server: PostgresServer) -> Iterator[PostgresDatabase]:
    with postgres_server.database() as database:
        yield database


@pytest.mark.postgres
@pytest.mark.parametrize("pair", by_kind("postgres"))
def test_postgres_pair(backend, limits, place, pg_database, pair):
    with psycopg.connect(pg_database.url, autocommit=True) as conn:
        for statement in POSTGRES_SETUP:
            conn.execute(statement)
    verdict = rehearsal.rehearse_db(
        RunSpec(code=pair["forward"]),
        reverse_for(pair["reverse"]),
        limits=limits,
        target=PostgresTarget(url=pg_database.url),
        control_base=place,
        run_id="rehearsal",
        run=runner(backend),
        owner_uid=sandbox_host_uid(backend),
        allow_private=True,
    )
    check(verdict, pair)
    with psycopg.connect(pg_database.url) as conn:  # always rolled back
        assert conn.execute("SELECT count(*) FROM users").fetchone() == (3,)
        assert conn.execute("SELECT count(*) FROM tags").fetchone() == (3,)
