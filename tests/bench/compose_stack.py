"""docker-compose.yml's topology, brought up from local images only, for benchmarks and the load
test: the Topology interface of tests/fault/topology.py that tests/bench/loadtest.py uses
(`start`, `stop`, `web_url`, `web_ports`, `manage`, `sql`, `worker_names`, `_terminate`,
`log`, `sandboxes`), on containers instead of host processes.

Images come from tests/fault/compose_images.sh (the sandbox root filesystem as the base, no
registry), as in `make compose-smoke`. Clients reach each web container at its own address on
the compose network, as a load balancer in front of them would, not through Docker's userland
port proxy (`published=True` measures through the published port instead). `stop()` is
`down -v`: nothing of the stack is left.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.local_servers import free_port, wait_until

REPO = Path(__file__).resolve().parents[2]


def compose_argv() -> list[str]:
    """`docker compose` (v2) where the CLI has it, else `docker-compose` (v1.29)."""
    v2 = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    if v2.returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose") is None:
        raise SystemExit("neither `docker compose` nor `docker-compose` is installed")
    return ["docker-compose"]


@dataclass
class ComposeStack:
    webs: int = 1
    workers: int = 1
    worker_concurrency: int = 4
    extra_env: dict[str, str] = field(default_factory=dict)
    published: bool = False
    project: str = field(default_factory=lambda: f"undoable-bench-{os.getpid()}")
    env: dict[str, str] = field(init=False)
    web_ports: list[int] = field(init=False, default_factory=list)
    web_hosts: list[str] = field(init=False, default_factory=list)
    worker_names: list[str] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        first = free_port()
        self.env = {
            **os.environ,
            "BASE_IMAGE": os.environ.get("BASE_IMAGE", "undoable-base:local"),
            "UNDOABLE_BIND": "127.0.0.1",
            # One host port per web replica: Compose hands each replica one of the range.
            "UNDOABLE_PORT": f"{first}-{first + self.webs - 1}" if self.webs > 1 else str(first),
            "DJANGO_ALLOWED_HOSTS": "*",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(32),
            "POSTGRES_PASSWORD": secrets.token_hex(12),
            "WORKER_CONCURRENCY": str(self.worker_concurrency),
            **self.extra_env,
        }

    def compose(self, *args: str, timeout_s: float = 600, check: bool = True) -> str:
        done = subprocess.run(
            [*compose_argv(), "-p", self.project, *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"compose {' '.join(args)} failed:\n{done.stderr[-3000:]}")
        return done.stdout

    def start(self) -> ComposeStack:
        subprocess.run(
            ["bash", "tests/fault/compose_images.sh", self.project],
            cwd=REPO,
            env=self.env,
            check=True,
            timeout=1800,
        )
        try:
            self.compose(
                "up", "-d", "--scale", f"web={self.webs}", "--scale", f"worker={self.workers}"
            )
            for index, container in enumerate(self.containers("web")):
                self.web_hosts.append(self.address(container))
                port = self._docker("port", container, "8000").split(":")[-1].strip()
                self.web_ports.append(int(port))
                url = self.web_url(index) + "/healthz"
                wait_until(
                    lambda url=url: _answers(url), timeout_s=180, what=f"{self.project} {url}"
                )
            # Celery names each node after its container (docker-compose.yml).
            self.worker_names = [
                f"{prefix}@{self._docker('inspect', '-f', '{{.Config.Hostname}}', c).strip()}"
                for service, prefix in (("worker", "worker"), ("worker-kinds", "kinds"))
                for c in self.containers(service)
            ]
            wait_until(self._workers_alive, timeout_s=120, what="Celery workers")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self.compose("down", "-v", "--remove-orphans", check=False, timeout_s=180)

    def web_url(self, index: int = 0) -> str:
        if self.published:
            return f"http://127.0.0.1:{self.web_ports[index]}"
        return f"http://{self.web_hosts[index]}:8000"

    def manage(self, *args: str, timeout_s: float = 120, check: bool = True) -> str:
        return self.compose(
            "exec",
            "-T",
            "-u",
            "undoable",
            "web",
            "python3",
            "manage.py",
            *args,
            timeout_s=timeout_s,
            check=check,
        )

    def sql(self, query: str, *params: object) -> list[tuple[object, ...]]:
        """Rows of `query` through psql in the postgres container (no parameters); cells that
        are integers come back as int."""
        if params:
            raise ValueError("ComposeStack.sql takes no parameters")
        out = self.compose(
            "exec",
            "-T",
            "postgres",
            "psql",
            "-U",
            "undoable",
            "-d",
            "undoable",
            "-AtF",
            "\t",
            "-c",
            query.replace("%%", "%"),
        )
        return [
            tuple(int(cell) if cell.lstrip("-").isdigit() else cell for cell in line.split("\t"))
            for line in out.splitlines()
        ]

    def _terminate(self, name: str) -> None:
        """Stop one web (`web0`, `web1`) or worker (by its Celery node name) container."""
        if name.startswith("web") and name[3:].isdigit():
            container = self.containers("web")[int(name[3:])]
        else:
            host = name.split("@", 1)[1]
            container = next(
                c
                for service in ("worker", "worker-kinds")
                for c in self.containers(service)
                if self._docker("inspect", "-f", "{{.Config.Hostname}}", c).strip() == host
            )
        self._docker("stop", "-t", "60", container)

    def log(self, name: str) -> str:
        service = "web" if name.startswith("web") else "worker"
        return self.compose("logs", "--no-color", service, check=False)

    def sandboxes(self) -> list[int]:
        """Host pids of bwrap processes still running in this stack's containers."""
        found: list[int] = []
        for service in ("web", "worker", "worker-kinds"):
            for container in self.containers(service):
                running = self._docker("inspect", "-f", "{{.State.Running}}", container).strip()
                if running != "true":
                    continue
                top = self._docker("top", container, "-eo", "pid,comm")
                found += [int(line.split()[0]) for line in top.splitlines()[1:] if "bwrap" in line]
        return found

    def containers(self, service: str) -> list[str]:
        """Full ids of a service's containers."""
        ids = self.compose("ps", "-q", service).split()
        # Replica order: by container name (..._web_1, ..._web_2).
        names = {c: self._docker("inspect", "-f", "{{.Name}}", c).strip() for c in ids}
        return sorted(ids, key=lambda c: (len(names[c]), names[c]))

    def address(self, container: str) -> str:
        fmt = "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}"
        return self._docker("inspect", "-f", fmt, container).split()[0]

    def _docker(self, *args: str) -> str:
        return subprocess.run(
            ["docker", *args], capture_output=True, text=True, check=True, timeout=120
        ).stdout

    def _workers_alive(self) -> bool:
        out = self.manage("workers_ping", "--count", check=False)
        digits = "".join(ch for ch in out if ch.isdigit())
        return digits == str(len(self.worker_names))


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        time.sleep(0.5)
        return False
