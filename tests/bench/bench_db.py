"""The db kind's statement round trip: a 1,000-row INSERT loop through the host's broker, next
to the same loop on a direct connection, and their ratio (target: within 2x).

    python tests/bench/bench_db.py [--rows 1000] [--repeat 5]

SQLite: the broker loop runs in a real bwrap sandbox against the host-held copy; the direct
loop runs `sqlite3` in the same kind of sandbox on a file of its own. PostgreSQL (a throwaway
server, as the tests start it): the broker loop as above; the direct loop on the host with
psycopg, the library the broker itself uses, one transaction, one statement per round trip.
MariaDB (likewise a throwaway server): the broker loop as above; the direct loop on the host
with mysql-connector-python's prepared cursor, the protocol the broker uses, one transaction.
Each figure is the median over --repeat runs of the loop alone (timed inside the program).
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a plain script from anywhere

import psycopg  # noqa: E402

from executor.backends.bwrap.backend import BwrapBackend  # noqa: E402
from executor.kinds import db  # noqa: E402
from executor.kinds.fs import FsWorkspace  # noqa: E402
from executor.kinds.sandbox import sandbox_host_uid  # noqa: E402
from executor.limits import Limits  # noqa: E402
from executor.spec import RunSpec  # noqa: E402
from tests.servers import PASSWORD, MariaDbServer, PostgresServer  # noqa: E402

LIMITS = Limits(wall_time_s=120, cpu_time_s=120)


def loop_code(rows: int, execute: str, setup: str) -> str:
    return (
        "import time\n"
        f"{setup}\n"
        "start = time.perf_counter()\n"
        f"for i in range({rows}):\n"
        f"    {execute}\n"
        "print('LOOP_S', time.perf_counter() - start)\n"
    )


def loop_seconds(stdout: str) -> float:
    line = next(line for line in stdout.splitlines() if line.startswith("LOOP_S "))
    return float(line.split()[1])


def through_broker(backend, place: Path, target: db.Target, code: str, run_id: str) -> float:
    with db.prepared(
        RunSpec(code=code),
        limits=LIMITS,
        target=target,
        control_base=place,
        run_id=run_id,
        allow_private=True,
        owner_uid=sandbox_host_uid(backend),
    ) as job:
        result = backend.run(job.spec, limits=job.limits, mounts=job.mounts)
        outcome = job.finish(result)
    if outcome.pending is None:
        raise SystemExit(f"the broker loop failed: {result.stderr[-2000:]}")
    outcome.pending.undo()
    return loop_seconds(result.stdout)


def sqlite_figures(backend, place: Path, rows: int, repeat: int) -> tuple[list[float], list[float]]:
    root = place / "files"
    root.mkdir()
    workspace = FsWorkspace(root, place / "state")
    target = db.SqliteTarget(workspace=workspace, path="bench.db")
    broker_code = loop_code(
        rows,
        "db.execute('INSERT INTO t VALUES (?)', [i])",
        "db.execute('CREATE TABLE t (x INTEGER)')",
    )
    direct_code = loop_code(
        rows,
        "conn.execute('INSERT INTO t VALUES (?)', [i])",
        "import sqlite3\nconn = sqlite3.connect('/tmp/bench.db', isolation_level=None)\n"
        "conn.execute('PRAGMA journal_mode=DELETE')\nconn.execute('BEGIN IMMEDIATE')\n"
        "conn.execute('CREATE TABLE t (x INTEGER)')",
    )
    brokered = [through_broker(backend, place, target, broker_code, f"s{n}") for n in range(repeat)]
    direct = []
    for _ in range(repeat):
        result = backend.run(RunSpec(code=direct_code), limits=LIMITS)
        direct.append(loop_seconds(result.stdout))
    return brokered, direct


def postgres_figures(
    backend, place: Path, rows: int, repeat: int
) -> tuple[list[float], list[float]]:
    server = PostgresServer()
    try:
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (x INTEGER)")
        target = db.PostgresTarget(url=server.url)
        code = loop_code(rows, "db.execute('INSERT INTO t VALUES (%s)', [i])", "")
        brokered = [through_broker(backend, place, target, code, f"p{n}") for n in range(repeat)]
        direct = []
        for _ in range(repeat):
            with psycopg.connect(server.url) as conn:
                start = time.perf_counter()
                for i in range(rows):
                    conn.execute("INSERT INTO t VALUES (%s)", [i])
                direct.append(time.perf_counter() - start)
                conn.rollback()
        return brokered, direct
    finally:
        server.stop()


def mariadb_figures(
    backend, place: Path, rows: int, repeat: int
) -> tuple[list[float], list[float]]:
    import mysql.connector

    server = MariaDbServer(place / "mariadb")
    try:
        with server.database() as database:
            options = {
                "host": "127.0.0.1",
                "port": server.port,
                "user": "root",
                "password": PASSWORD,
                "database": database.name,
                "use_pure": True,
            }
            conn = mysql.connector.connect(**options, autocommit=True)
            conn.cursor().execute("CREATE TABLE t (x INT) ENGINE=InnoDB")
            target = db.ServerTarget(url=database.url)
            code = loop_code(rows, "db.execute('INSERT INTO t VALUES (?)', [i])", "")
            brokered = [
                through_broker(backend, place, target, code, f"m{n}") for n in range(repeat)
            ]
            direct = []
            for _ in range(repeat):
                conn.start_transaction()
                cursor = conn.cursor(prepared=True)
                start = time.perf_counter()
                for i in range(rows):
                    cursor.execute("INSERT INTO t VALUES (?)", [i])
                direct.append(time.perf_counter() - start)
                conn.rollback()
            conn.close()
            return brokered, direct
    finally:
        server.stop()


def socket_floor(rounds: int = 5000) -> float:
    """One round trip between two processes over a unix socket: what any broker pays at least."""
    ours, theirs = socket.socketpair()
    echo = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _ECHO, str(theirs.fileno())], pass_fds=[theirs.fileno()]
    )
    theirs.close()
    start = time.perf_counter()
    for _ in range(rounds):
        ours.send(b"x" * 40)
        ours.recv(100)
    elapsed = (time.perf_counter() - start) / rounds
    ours.close()
    echo.wait()
    return elapsed


_ECHO = """
import socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
while data := s.recv(100):
    s.send(data)
"""


def report(name: str, rows: int, brokered: list[float], direct: list[float]) -> None:
    b, d = statistics.median(brokered), statistics.median(direct)
    print(
        f"{name:10} {rows} INSERTs: broker {b * 1000:8.1f} ms ({b / rows * 1e6:6.0f} us each)  "
        f"direct {d * 1000:8.1f} ms ({d / rows * 1e6:6.0f} us each)  ratio {b / d:5.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    base = REPO / "var" / "tmp"
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o711)
    place = Path(tempfile.mkdtemp(prefix="bench-db-", dir=base))
    place.chmod(0o711)
    backend = BwrapBackend(str(REPO / "var" / "sandbox-rootfs"), warm_pool_size=0)
    backend.self_check()
    try:
        print("db statement round trip (median of the loop alone, timed inside the program)")
        print(
            f"floor: a unix-socket round trip between two processes {socket_floor() * 1e6:.0f} us"
        )
        report("sqlite", args.rows, *sqlite_figures(backend, place, args.rows, args.repeat))
        report("postgres", args.rows, *postgres_figures(backend, place, args.rows, args.repeat))
        report("mariadb", args.rows, *mariadb_figures(backend, place, args.rows, args.repeat))
    finally:
        backend.close()
        shutil.rmtree(place, ignore_errors=True)


if __name__ == "__main__":
    main()
