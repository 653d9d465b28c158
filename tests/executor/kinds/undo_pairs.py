"""The undo benchmark's data (undo_pairs.toml) and starting states, for its test
(test_rehearsal_pairs.py) and its timing (tests/bench/bench_rehearsal.py)."""

from __future__ import annotations

import os
import sqlite3
import tomllib
from pathlib import Path
from typing import Any

import psycopg

from executor.kinds.fs import FsWorkspace
from executor.kinds.job import Job
from executor.result import RunResult
from executor.spec import RunSpec

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


def reverse_for(code: str) -> Any:
    """The reverse program's spec, given the forward run's result."""

    def build(forward: RunResult) -> RunSpec:
        # In the environment only: a file would land in the fs kind's workspace.
        return RunSpec(code=REVERSE_PRELUDE + code, env={"FORWARD_OUTPUT": forward.stdout})

    return build


def runner(backend: Any) -> Any:
    """Run a prepared job in `backend`'s sandbox, as the web app's worker does."""

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


def sqlite_workspace(place: Path) -> FsWorkspace:
    """A workspace holding app.db, made by SQLITE_SETUP."""
    workspace = FsWorkspace(place / "files", place / "state")
    workspace.root.mkdir()
    with sqlite3.connect(workspace.root / "app.db") as conn:
        for statement in SQLITE_SETUP:
            conn.execute(statement)
    conn.close()
    return workspace


def postgres_reset(url: str) -> None:
    """The database at `url` as POSTGRES_SETUP makes it."""
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in POSTGRES_SETUP:
            conn.execute(statement)
