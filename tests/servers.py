"""Private servers for a test session, in the manner of pytest-redis / pytest-postgresql but with
the Debian binaries: redis-server, a PostgreSQL cluster (initdb + pg_ctl) and a MariaDB server
(mariadb-install-db + mariadbd), each on a free loopback port, every file (data, sockets, logs,
pid files) in one temporary folder.

tests/conftest.py starts them on first use and stops them at session end. A watchdog process
holds a pipe from pytest: if pytest dies without its finalizers (SIGKILL, a hard timeout), the
pipe closes and the watchdog stops the servers and removes the folder.
bench_db.py uses `PostgresServer` on its own, with a folder of its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PASSWORD = "kinds-test-pw"
ROOT_PREFIX = "undoable-servers-"
APT = "sudo apt-get install -y"


def free_port() -> int:
    from tests.local_servers import free_port as pick

    return pick()


# --- where the binaries are ----------------------------------------------------------------


def redis_binary() -> str | None:
    return shutil.which("redis-server") or next(
        (p for p in ("/usr/bin/redis-server",) if os.access(p, os.X_OK)), None
    )


def postgres_bin() -> Path | None:
    """UNDOABLE_PG_BIN, else the newest /usr/lib/postgresql/<major>/bin with initdb."""
    if os.environ.get("UNDOABLE_PG_BIN"):
        return Path(os.environ["UNDOABLE_PG_BIN"])
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    return found[-1].parent if found else None


def redis_problem() -> str | None:
    if redis_binary() is None:
        return f"redis-server is missing: run `{APT} redis-server`"
    return None


def postgres_problem() -> str | None:
    found = postgres_bin()
    if found is None or not (found / "initdb").exists():
        return f"the PostgreSQL server binaries are missing: run `{APT} postgresql`"
    if os.geteuid() == 0 and not _user_exists("postgres"):
        return f"running as root but there is no `postgres` user: run `{APT} postgresql`"
    return None


MARIADBD = Path("/usr/sbin/mariadbd")
MARIADB_INSTALL_DB = Path("/usr/bin/mariadb-install-db")


def mariadb_problem() -> str | None:
    if not (MARIADBD.exists() and MARIADB_INSTALL_DB.exists()):
        return (
            "the MariaDB server binaries are missing: "
            f"run `{APT} --no-install-recommends mariadb-server`"
        )
    return None


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


# --- the session folder and its watchdog ---------------------------------------------------


class ServerRoot:
    """One temporary folder for a session's servers, watched by a process that outlives us."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{os.getpid()}-"))
        self.path.chmod(0o755)  # the postgres user must reach its data directory
        self.pids: set[int] = set()  # every server process started in here
        # Own session: Ctrl-C in the terminal must not reach the watchdog.
        self._watchdog = subprocess.Popen(
            [sys.executable, "-m", "tests.servers", "--watch", str(self.path)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._stack = contextlib.ExitStack()

    def add(self, server: contextlib.AbstractContextManager[object]) -> None:
        self._stack.enter_context(server)

    def close(self) -> None:
        try:
            self._stack.close()
        finally:
            assert self._watchdog.stdin is not None
            self._watchdog.stdin.close()  # nothing left for it to stop: it just exits
            self._watchdog.wait(timeout=30)
            shutil.rmtree(self.path, ignore_errors=True)


def survivors(root: Path, pids: set[int]) -> list[str]:
    """Processes of this folder's servers still alive: a pid we recorded (or its child) or
    anything whose command line names the folder."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if state == "Z":
            continue
        if int(entry.name) in pids or int(ppid) in pids or str(root) in argv:
            alive.append(f"{entry.name}: {argv.strip()}")
    return alive


def _watch(root: Path) -> None:
    """The watchdog: wait for pytest's end of the pipe to close, then stop what is left."""
    sys.stdin.buffer.read()
    for pidfile, sig in (
        (root / "redis" / "redis.pid", signal.SIGTERM),
        (root / "pg" / "data" / "postmaster.pid", signal.SIGQUIT),
        (root / "mariadb" / "mariadbd.pid", signal.SIGKILL),
    ):
        with contextlib.suppress(OSError, ValueError, IndexError):
            os.kill(int(pidfile.read_text().split()[0]), sig)
    shutil.rmtree(root, ignore_errors=True)


# --- Redis ---------------------------------------------------------------------------------


class RedisServer:
    """redis-server with no persistence, its files in `folder`; `url(db)` names a database."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def __enter__(self) -> RedisServer:
        return self.start()

    def start(self) -> RedisServer:
        # A free port can be taken by someone else before redis binds it: try another.
        for _ in range(3):
            self.port = free_port()
            if self._start():
                return self
        raise RuntimeError(f"redis-server did not start; see {self.folder / 'redis.log'}")

    def _start(self) -> bool:
        import redis

        from tests.local_servers import wait_until

        log = (self.folder / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [
                str(redis_binary()),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
                "--dir",
                str(self.folder),
                "--pidfile",
                str(self.folder / "redis.pid"),
                # Its process title then names our folder (see `survivors`).
                "--unixsocket",
                str(self.folder / "redis.sock"),
                "--proc-title-template",
                "{title} {listen-addr} {unixsocket}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        process = self.process

        def up() -> bool:
            if process.poll() is not None:
                raise ChildProcessError("redis-server exited")
            return bool(client.ping())

        try:
            wait_until(up, timeout_s=20, what="redis-server")
        except (TimeoutError, ChildProcessError):
            self.stop()
            return False
        finally:
            client.close()
        return True

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None


# --- PostgreSQL ----------------------------------------------------------------------------


def _as_postgres(*argv: str) -> None:
    """Run a PostgreSQL tool as the `postgres` user (the server refuses to run as root)."""
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    # No pipes: the server pg_ctl starts would hold them open and block us forever.
    subprocess.run(
        [*prefix, *argv],
        check=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@dataclass(frozen=True)
class PostgresDatabase:
    name: str
    url: str


class PostgresServer:
    """A throwaway PostgreSQL cluster: initdb + pg_ctl in `folder` (a fresh temporary one if
    not given), listening on 127.0.0.1:<free port> and a unix socket in the folder."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or Path(tempfile.mkdtemp(prefix="undoable-pg-"))
        self._own_folder = folder is None
        self.folder.mkdir(parents=True, exist_ok=True)
        self.bin = postgres_bin() or Path("/usr/lib/postgresql/15/bin")
        self.port = 0
        self.pid = 0
        self.url = ""
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        pwfile = self.folder / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if os.geteuid() == 0:
            shutil.chown(pwfile, "postgres", "postgres")
        _as_postgres(
            str(self.bin / "initdb"),
            "-D",
            str(self.folder / "data"),
            "-U",
            "postgres",
            "--auth=scram-sha-256",
            f"--pwfile={pwfile}",
            "-E",
            "UTF8",
            "--no-locale",
        )
        for attempt in range(3):  # the free port may be taken before the server binds it
            self.port = free_port()
            try:
                self._pg_ctl("start", "-w", "-o", self._options())
                break
            except subprocess.CalledProcessError:
                if attempt == 2:
                    raise
        self.pid = int((self.folder / "data" / "postmaster.pid").read_text().split()[0])
        self.url = self.database_url("postgres")

    def _options(self) -> str:
        return (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off"
        )

    def _pg_ctl(self, *args: str) -> None:
        log = str(self.folder / "server.log")
        _as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), "-l", log, *args)

    def database_url(self, name: str) -> str:
        return f"postgresql://postgres:{PASSWORD}@127.0.0.1:{self.port}/{name}"

    @contextlib.contextmanager
    def database(
        self, *, name: str | None = None, copy_of: str | None = None
    ) -> Iterator[PostgresDatabase]:
        """A database of its own (`name`, else a fresh one), dropped afterwards: empty, or a copy
        of the database `copy_of` (PostgreSQL copies its files; no one may be connected to it)."""
        import psycopg

        name = name or f"test_{uuid.uuid4().hex[:12]}"
        template = f' TEMPLATE "{copy_of}"' if copy_of else ""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"{template}')
        try:
            yield PostgresDatabase(name=name, url=self.database_url(name))
        finally:
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._pg_ctl("stop", "-m", "fast")
        if self._own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)


# --- MariaDB -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MariaDbDatabase:
    name: str
    url: str

    def sql(self, sql: str) -> list[tuple]:
        """One statement as root over TCP, autocommitted: a test's set-up and its checks."""
        import mysql.connector  # only the MariaDB tests need the driver

        conn = mysql.connector.connect(
            host="127.0.0.1",
            port=int(self.url.rsplit(":", 1)[1].split("/")[0]),
            user="root",
            password=PASSWORD,
            database=self.name,
            use_pure=True,
            autocommit=True,
        )
        try:
            cur = conn.cursor()
            cur.execute(sql)
            return [tuple(row) for row in cur.fetchall()] if cur.with_rows else []
        finally:
            conn.close()


class MariaDbServer:
    """A throwaway MariaDB server: mariadb-install-db + mariadbd with every file in `folder`,
    listening on 127.0.0.1:<free port> and a unix socket in the folder. `root` has PASSWORD
    over TCP; `.database()` makes a fresh database."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._password_set = False
        # As root the server runs as root (--user=root): the folder is ours, not `mysql`'s.
        self._user = ["--user=root"] if os.geteuid() == 0 else []
        subprocess.run(
            [
                str(MARIADB_INSTALL_DB),
                "--no-defaults",
                *self._user,
                f"--datadir={self.folder / 'data'}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for attempt in range(3):  # the free port may be taken before the server binds it
            self.port = free_port()
            if self._start():
                break
            if attempt == 2:
                raise RuntimeError(f"mariadbd did not start; see {self.folder / 'server.log'}")
        self._admin(f"ALTER USER root@localhost IDENTIFIED BY '{PASSWORD}'")
        self._password_set = True
        self._admin(f"CREATE OR REPLACE USER root@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'")
        self._admin("GRANT ALL ON *.* TO root@'127.0.0.1' WITH GRANT OPTION")

    @property
    def pid(self) -> int:
        return self.process.pid if self.process else 0

    def _start(self) -> bool:
        from tests.local_servers import wait_until

        log = (self.folder / "server.log").open("ab")
        self.process = subprocess.Popen(
            [
                str(MARIADBD),
                "--no-defaults",
                *self._user,
                f"--datadir={self.folder / 'data'}",
                f"--socket={self.folder / 'mariadb.sock'}",
                f"--pid-file={self.folder / 'mariadbd.pid'}",
                "--skip-networking=0",
                "--bind-address=127.0.0.1",
                f"--port={self.port}",
                f"--secure-file-priv={self.folder}",
                "--innodb-buffer-pool-size=32M",
                "--innodb-log-file-size=16M",
                "--innodb-flush-log-at-trx-commit=0",
                "--skip-log-bin",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        process = self.process

        def up() -> bool:
            if process.poll() is not None:
                raise ChildProcessError("mariadbd exited")
            return (self.folder / "mariadb.sock").exists() and self._ping()

        try:
            wait_until(up, timeout_s=60, what="mariadbd")
        except (TimeoutError, ChildProcessError):
            self.stop()
            return False
        return True

    def _ping(self) -> bool:
        import socket

        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.settimeout(1)
            sock.connect(("127.0.0.1", self.port))
            return bool(sock.recv(1))
        return False

    def _admin(self, sql: str) -> None:
        """As root over the unix socket (before and after root's password is set)."""
        password = [f"-p{PASSWORD}"] if self._password_set else []
        subprocess.run(
            ["mariadb", "--no-defaults", f"--socket={self.folder / 'mariadb.sock'}", "-uroot"]
            + [*password, "-e", sql],
            check=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            capture_output=True,
        )

    def database_url(self, name: str) -> str:
        return f"mariadb://root:{PASSWORD}@127.0.0.1:{self.port}/{name}"

    @contextlib.contextmanager
    def database(self) -> Iterator[MariaDbDatabase]:
        """A fresh, empty database of its own, dropped afterwards."""
        name = f"test_{uuid.uuid4().hex[:12]}"
        self._admin(f"CREATE DATABASE `{name}`")
        try:
            yield MariaDbDatabase(name=name, url=self.database_url(name))
        finally:
            self._admin(f"DROP DATABASE IF EXISTS `{name}`")

    def __enter__(self) -> MariaDbServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None


if __name__ == "__main__" and sys.argv[1:2] == ["--watch"]:
    _watch(Path(sys.argv[2]))
