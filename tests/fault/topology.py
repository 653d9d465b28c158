"""The production topology as real local processes: PostgreSQL (Debian's initdb + pg_ctl),
redis-server, N web processes and N `celery -A webapp worker` processes, each on a free
loopback port, all sharing one environment (DATABASE_URL, REDIS_URL, ...).

Used by the fault tests (tests/fault/conftest.py) and the load test (tests/bench/loadtest.py).
Processes can be killed and restarted one by one; `stop()` ends everything it started.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import redis

from tests.local_servers import celery_worker_argv, free_port, wait_until
from tests.quota_mounts import unmount_under

REPO = Path(__file__).resolve().parents[2]
PG_BIN = Path("/usr/lib/postgresql/15/bin")
VENV_BIN = REPO / ".venv" / "bin"


def process_tree(root_pid: int) -> set[tuple[int, str]]:
    """(pid, start time) of `root_pid` and all its descendants, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat:
                children.setdefault(int(stat[1]), []).append(int(entry.name))
    found, todo = set(), [root_pid]
    while todo:
        pid = todo.pop()
        stat = _stat(pid)
        if stat:
            found.add((pid, stat[19]))
            todo.extend(children.get(pid, []))
    return found


def still_running(processes: set[tuple[int, str]]) -> set[tuple[int, str]]:
    """Those of `processes` that exist and are not zombies (same pid AND same start time)."""
    alive = set()
    for pid, started in processes:
        stat = _stat(pid)
        if stat and stat[19] == started and stat[0] != "Z":
            alive.add((pid, started))
    return alive


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields from state (index 0) on


@dataclass
class Topology:
    webs: int = 2
    workers: int = 2
    worker_concurrency: int = 2
    extra_env: dict[str, str] = field(default_factory=dict)
    root: Path = field(init=False)
    env: dict[str, str] = field(init=False)
    pg_port: int = field(init=False)
    redis_port: int = field(init=False)
    web_ports: list[int] = field(init=False)
    worker_names: list[str] = field(init=False)
    procs: dict[str, subprocess.Popen[bytes]] = field(init=False, default_factory=dict)

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> Topology:
        self.root = Path(tempfile.mkdtemp(prefix="undoable-topology-"))
        self.root.chmod(0o755)  # the postgres user must reach its data directory
        (self.root / "logs").mkdir()
        # A per-topology path to the rootfs makes this topology's sandboxes recognisable in
        # `ps` (bwrap's argv names it) among other test runs on the machine.
        (self.root / "rootfs").symlink_to(REPO / "var" / "sandbox-rootfs")
        self.pg_port, self.redis_port = free_port(), free_port()
        self.web_ports = [free_port() for _ in range(self.webs)]
        tag = self.root.name.rsplit("-", 1)[-1]
        self.worker_names = [f"w{i + 1}@{tag}" for i in range(self.workers)]
        self.env = self._environment()
        try:
            self._start_postgres()
            self.start_redis()
            self.manage("migrate", "--noinput")
            for index in range(self.webs):
                self.start_web(index)
            for name in self.worker_names:
                self.start_worker(name)
            for index in range(self.webs):
                self.wait_web(index)
            for name in self.worker_names:
                self.wait_worker(name)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in list(self.procs):
            self._terminate(name)
        if (self.root / "pg" / "PG_VERSION").exists():
            self._pg_ctl("stop", "-m", "immediate")
        unmount_under(self.root)  # session workspaces of the workers the tests killed
        shutil.rmtree(self.root, ignore_errors=True)

    def _environment(self) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DJANGO_", "UNDOABLE_", "EXECUTOR_", "DATABASE_", "REDIS_"))
            or key == "UNDOABLE_TOPOLOGY_PYTHONPATH"
        }
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "webapp.settings",
                "DJANGO_SECRET_KEY": "fault-topology-" + self.root.name,
                # One ledger key for every process (DATABASE_URL leaves them no embedded one).
                "UNDOABLE_AUDIT_KEY": "fault-topology-audit-" + self.root.name,
                "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
                "DATABASE_URL": f"postgres://undoable@127.0.0.1:{self.pg_port}/undoable",
                "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
                "UNDOABLE_VAR_DIR": str(self.root / "var"),
                "EXECUTOR_ROOTFS": str(self.root / "rootfs"),
                "EXECUTOR_BACKEND": "bwrap",
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [str(REPO), os.environ.get("UNDOABLE_TOPOLOGY_PYTHONPATH")])
                ),
                "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            }
        )
        env.update(self.extra_env)
        # For trying a topology against other settings or code by hand (JSON object of vars).
        env.update(json.loads(os.environ.get("UNDOABLE_TOPOLOGY_ENV", "{}")))
        return env

    def _spawn(
        self, name: str, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = (self.root / "logs" / f"{name}.log").open("ab")
        # Own session: a kill of the whole worker (main + pool children) is one killpg.
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env={**self.env, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def _terminate(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)

    def log(self, name: str) -> str:
        return (self.root / "logs" / f"{name}.log").read_text(errors="replace")

    # --- PostgreSQL ------------------------------------------------------------------------
    def _pg_ctl(self, *args: str) -> None:
        subprocess.run(
            [
                "runuser",
                "-u",
                "postgres",
                "--",
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(self.root / "pg"),
                "-l",
                str(self.root / "logs" / "postgres.log"),
                *args,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=60,
        )

    def _start_postgres(self) -> None:
        data = self.root / "pg"
        data.mkdir()
        shutil.chown(data, "postgres", "postgres")
        shutil.chown(self.root / "logs", "postgres")
        subprocess.run(
            [
                "runuser",
                "-u",
                "postgres",
                "--",
                str(PG_BIN / "initdb"),
                "-D",
                str(data),
                "-U",
                "undoable",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=60,
        )
        options = (
            f"-p {self.pg_port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        (data / "undoable.opts").write_text(options)
        self._pg_ctl("start", "-w", "-o", options)
        with psycopg.connect(self._dsn("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE undoable")

    def restart_postgres(self) -> None:
        """A fast restart: every open connection of web and workers is cut."""
        self._pg_ctl(
            "restart", "-w", "-m", "fast", "-o", (self.root / "pg" / "undoable.opts").read_text()
        )

    def _dsn(self, db: str = "undoable") -> str:
        return f"postgresql://undoable@127.0.0.1:{self.pg_port}/{db}"

    def sql(self, query: str, *params: object) -> list[tuple[object, ...]]:
        with psycopg.connect(self._dsn(), autocommit=True) as conn:
            return list(conn.execute(query, params).fetchall())

    # --- Redis -----------------------------------------------------------------------------
    def start_redis(self) -> None:
        self._spawn(
            "redis",
            [
                "redis-server",
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
            ],
        )
        wait_until(self.redis().ping, timeout_s=20, what="redis-server")

    def restart_redis(self) -> None:
        """Stop redis-server (its data is gone: no persistence) and start it on the same port."""
        self._terminate("redis")
        self.start_redis()

    def redis(self) -> redis.Redis:
        return redis.Redis(port=self.redis_port, socket_timeout=5)

    # --- web and workers -------------------------------------------------------------------
    def manage(self, *args: str, timeout_s: float = 120) -> str:
        done = subprocess.run(
            [str(VENV_BIN / "python"), "manage.py", *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stderr[-3000:]}")
        return done.stdout

    def web_url(self, index: int = 0) -> str:
        return f"http://127.0.0.1:{self.web_ports[index]}"

    def start_web(self, index: int) -> None:
        self._spawn(
            f"web{index}",
            [
                str(VENV_BIN / "python"),
                "-m",
                "webapp.server.serve",
                "-b",
                "127.0.0.1",
                "-p",
                str(self.web_ports[index]),
                os.environ.get("UNDOABLE_TOPOLOGY_ASGI", "webapp.asgi:application"),
            ],
            # Each web process tells its peers where to pass requests for its sessions.
            env={"UNDOABLE_PEER_URL": self.web_url(index)},
        )

    def wait_web(self, index: int) -> None:
        url = self.web_url(index) + "/healthz"
        wait_until(lambda: httpx.get(url, timeout=5).status_code == 200, timeout_s=60, what=url)

    def kill_web(self, index: int) -> None:
        proc = self.procs.pop(f"web{index}")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def start_worker(self, name: str) -> None:
        self._spawn(
            name,
            celery_worker_argv("-n", name, "-c", str(self.worker_concurrency), "-l", "INFO"),
        )

    def wait_worker(self, name: str) -> None:
        # The worker_ready hook registers the node in the live-process registry.
        wait_until(lambda: self.redis().exists(f"undoable:alive:{name}"), timeout_s=60, what=name)

    def kill_worker(self, name: str) -> set[tuple[int, str]]:
        """kill -9 the whole worker (main process and pool); returns the tree it had, sandboxes
        included, as (pid, start time) pairs."""
        proc = self.procs.pop(name)
        tree = process_tree(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        return tree

    def sandboxes(self) -> list[int]:
        """Pids of bwrap processes of this topology still alive (its rootfs path is in argv)."""
        marker = str(self.root / "rootfs").encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"bwrap") and marker in argv:
                found.append(int(entry.name))
        return found
