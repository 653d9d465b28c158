"""Rehearsal time: every pair of the undo benchmark (tests/executor/kinds/undo_pairs.toml), then
a 1,000-file workspace and a 10,000-row table, each next to the forward run's own time (the run
as the web app does it: copy, sandbox, change list, Keep) and their ratio (target: within 3x).

    python tests/bench/bench_rehearsal.py [--repeat 3] [--files 1000] [--rows 10000]

Real bwrap sandboxes; PostgreSQL is a throwaway server, as the tests start it. Figures are
medians over --repeat runs, wall time on the host.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a plain script from anywhere

from executor.backends.bwrap.backend import BwrapBackend  # noqa: E402
from executor.kinds import db, fs, rehearsal  # noqa: E402
from executor.kinds.sandbox import sandbox_host_uid  # noqa: E402
from executor.limits import Limits  # noqa: E402
from executor.spec import RunSpec  # noqa: E402
from tests.executor.kinds.undo_pairs import (  # noqa: E402
    PAIRS,
    fs_workspace,
    postgres_reset,
    reverse_for,
    runner,
    sqlite_workspace,
)
from tests.servers import PostgresServer  # noqa: E402

LIMITS = Limits(wall_time_s=120, cpu_time_s=120)


def median_s(repeat: int, once: Callable[[], float]) -> float:
    return statistics.median(once() for _ in range(repeat))


def fresh_place(base: Path) -> Path:
    place = Path(tempfile.mkdtemp(prefix="rehearse-", dir=base))
    place.chmod(0o711)
    return place


def pair_seconds(backend, base: Path, pair: dict, pg_url: str) -> float:
    place = fresh_place(base)
    try:
        forward, reverse = RunSpec(code=pair["forward"]), reverse_for(pair["reverse"])
        uid, run = sandbox_host_uid(backend), runner(backend)
        if pair["kind"] == "fs":
            verdict = rehearsal.rehearse_fs(
                forward,
                reverse,
                limits=LIMITS,
                workspace=fs_workspace(place),
                scratch=place,
                uid=uid,
                run=run,
            )
        else:
            if pair["kind"] == "sqlite":
                target: db.Target = db.SqliteTarget(sqlite_workspace(place), "app.db")
            else:
                postgres_reset(pg_url)
                target = db.PostgresTarget(url=pg_url)
            verdict = rehearsal.rehearse_db(
                forward,
                reverse,
                limits=LIMITS,
                target=target,
                control_base=place,
                run_id="bench",
                run=run,
                owner_uid=uid,
                allow_private=True,
            )
        if verdict.restored is not pair["restored"]:
            raise SystemExit(f"{pair['name']}: wrong verdict ({verdict.message})")
        return verdict.seconds
    finally:
        shutil.rmtree(place, ignore_errors=True)


def big_fs(backend, base: Path, files: int, repeat: int) -> tuple[float, float]:
    """(forward run alone, rehearsal) on a workspace of `files` files of 4 KiB."""
    forward = RunSpec(code="open('/workspace/d3/f7.txt', 'a').write('more\\n')")
    reverse_code = "import os\np = '/workspace/d3/f7.txt'\nos.truncate(p, os.path.getsize(p) - 5)\n"

    def workspace(place: Path) -> fs.FsWorkspace:
        root = place / "files"
        for i in range(files):
            folder = root / f"d{i % 10}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"f{i // 10}.txt").write_bytes(bytes([i % 256]) * 4096)
        return fs.FsWorkspace(root, place / "state")

    def forward_once() -> float:
        place = fresh_place(base)
        try:
            ws = workspace(place)
            start = time.perf_counter()
            with fs.prepared(
                forward, limits=LIMITS, workspace=ws, run_id="f", uid=sandbox_host_uid(backend)
            ) as job:
                outcome = job.finish(backend.run(job.spec, limits=job.limits, mounts=job.mounts))
            assert outcome.pending is not None, outcome.message
            outcome.pending.keep()
            return time.perf_counter() - start
        finally:
            shutil.rmtree(place, ignore_errors=True)

    def rehearsal_once() -> float:
        place = fresh_place(base)
        try:
            verdict = rehearsal.rehearse_fs(
                forward,
                reverse_for(reverse_code),
                limits=LIMITS,
                workspace=workspace(place),
                scratch=place,
                uid=sandbox_host_uid(backend),
                run=runner(backend),
            )
            assert verdict.restored, verdict.message
            return verdict.seconds
        finally:
            shutil.rmtree(place, ignore_errors=True)

    return median_s(repeat, forward_once), median_s(repeat, rehearsal_once)


def big_sqlite(backend, base: Path, rows: int, repeat: int) -> tuple[float, float]:
    """(forward run alone, rehearsal) on a table of `rows` rows, every row updated."""
    forward = RunSpec(code="db.execute('UPDATE t SET n = n + 1')")
    reverse_code = "db.execute('UPDATE t SET n = n - 1')"

    def workspace(place: Path) -> fs.FsWorkspace:
        root = place / "files"
        root.mkdir()
        with sqlite3.connect(root / "app.db") as conn:
            conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER, label TEXT)")
            conn.executemany(
                "INSERT INTO t (n, label) VALUES (?, ?)", ((i, f"row {i}") for i in range(rows))
            )
        conn.close()
        return fs.FsWorkspace(root, place / "state")

    def options(place: Path) -> dict:
        return {"control_base": place, "run_id": "b", "owner_uid": sandbox_host_uid(backend)}

    def forward_once() -> float:
        place = fresh_place(base)
        try:
            target = db.SqliteTarget(workspace(place), "app.db")
            start = time.perf_counter()
            with db.prepared(forward, limits=LIMITS, target=target, **options(place)) as job:
                outcome = job.finish(backend.run(job.spec, limits=job.limits, mounts=job.mounts))
            assert outcome.pending is not None, outcome.message
            outcome.pending.keep()
            return time.perf_counter() - start
        finally:
            shutil.rmtree(place, ignore_errors=True)

    def rehearsal_once() -> float:
        place = fresh_place(base)
        try:
            verdict = rehearsal.rehearse_db(
                forward,
                reverse_for(reverse_code),
                limits=LIMITS,
                target=db.SqliteTarget(workspace(place), "app.db"),
                run=runner(backend),
                **options(place),
            )
            assert verdict.restored, verdict.message
            return verdict.seconds
        finally:
            shutil.rmtree(place, ignore_errors=True)

    return median_s(repeat, forward_once), median_s(repeat, rehearsal_once)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args()
    base = REPO / "var" / "tmp"
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o711)
    backend = BwrapBackend(str(REPO / "var" / "sandbox-rootfs"))
    backend.self_check()
    try:
        with PostgresServer() as server, server.database() as database:
            print(f"{'pair':<58} {'verdict':>9} {'rehearsal':>10}")
            for pair in PAIRS:
                seconds = pair_seconds(backend, base, pair, database.url)
                verdict = "restored" if pair["restored"] else "differs"
                print(f"{pair['name']:<58} {verdict:>9} {seconds * 1000:>8.0f}ms")
        print()
        for what, (alone, rehearsed) in (
            (f"fs, {args.files:,} files", big_fs(backend, base, args.files, args.repeat)),
            (f"SQLite, {args.rows:,} rows", big_sqlite(backend, base, args.rows, args.repeat)),
        ):
            print(
                f"{what}: forward run {alone * 1000:.0f} ms, rehearsal {rehearsed * 1000:.0f} ms, "
                f"{rehearsed / alone:.1f}x (target: within 3x)"
            )
    finally:
        backend.close()


if __name__ == "__main__":
    main()
