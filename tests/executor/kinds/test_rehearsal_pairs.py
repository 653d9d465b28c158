"""The undo benchmark (undo_pairs.toml): every forward/reverse pair rehearsed in real sandboxes,
each verdict the expected one, and no wrong pair passes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from executor.kinds import rehearsal
from executor.kinds.db import PostgresTarget, SqliteTarget
from executor.kinds.fs_tree import scan, state_digest
from executor.kinds.sandbox import sandbox_host_uid
from executor.spec import RunSpec
from tests.executor.kinds.undo_pairs import (
    PAIRS,
    fs_workspace,
    postgres_reset,
    reverse_for,
    runner,
    sqlite_workspace,
)
from tests.servers import PostgresDatabase, PostgresServer


def by_kind(kind: str) -> list[Any]:
    return [pytest.param(p, id=p["name"]) for p in PAIRS if p["kind"] == kind]


def test_the_benchmark_has_thirty_pairs_over_every_engine_right_and_wrong():
    assert len(PAIRS) >= 30
    assert len({p["name"] for p in PAIRS}) == len(PAIRS)
    for kind in ("fs", "sqlite", "postgres"):
        verdicts = {p["restored"] for p in PAIRS if p["kind"] == kind}
        assert verdicts == {True, False}, kind


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
    before = state_digest(scan(workspace.root))
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
    assert state_digest(scan(workspace.root)) == before
    assert verdict.before == before
    assert workspace.pending() is None


@pytest.mark.parametrize("pair", by_kind("sqlite"))
def test_sqlite_pair(backend, limits, place, pair):
    workspace = sqlite_workspace(place)
    database = workspace.root / "app.db"
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
    postgres_reset(pg_database.url)
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
