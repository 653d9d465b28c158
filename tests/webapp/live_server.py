"""The web server as the product starts it (`python -m webapp.server.serve`, embedded mode, real
bwrap sandboxes), on a copy of a migrated var dir with a user and an API token: for the tests that
drive the real server."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.local_servers import free_port, wait_until
from tests.quota_mounts import remove_var_dir

REPO = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = """
from django.contrib.auth import get_user_model
from django.core.management import call_command
from webapp.agents.tokens import token_create
call_command("migrate", "--noinput", verbosity=0)
user = get_user_model().objects.create_user("idle-owner", password="not-used-here-77")
print(token_create(owner=user).secret)
"""


@dataclass(frozen=True)
class Template:
    var_dir: Path
    token: str


@pytest.fixture(scope="module", name="template")
def template_fixture(tmp_path_factory: pytest.TempPathFactory) -> Template:
    """A migrated var dir with a user and an API token; each server starts on a copy of it."""
    var_dir = tmp_path_factory.mktemp("serve-template")
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", SETUP_SCRIPT],
        env=server_env(var_dir),
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    return Template(var_dir=var_dir, token=done.stdout.strip().splitlines()[-1])


def server_env(var_dir: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "UNDOABLE_VAR_DIR": str(var_dir),
        "EXECUTOR_ROOTFS": str(REPO / "var" / "sandbox-rootfs"),
        "EXECUTOR_WARM_POOL_SIZE": "1",
        "UNDOABLE_RUNNER": "threads",
    }
    for name in ("REDIS_URL", "DATABASE_URL"):
        env.pop(name, None)
    return env


@dataclass(frozen=True)
class LiveServer:
    url: str
    pid: int


@contextmanager
def serving(
    template: Template,
    tmp_path: Path,
    *options: str,
    open_files: tuple[int, int],
    module: str = "webapp.server.serve",
    env: dict[str, str] | None = None,
) -> Iterator[str]:
    """`python -m webapp.server.serve` (or `module`, which runs it with a protection switched off)
    on a free port, started with the open-files limit `open_files` (soft, hard) as a host would give
    it and `env` added to its environment; yields its URL."""
    with server_process(
        template, tmp_path, *options, open_files=open_files, module=module, env=env
    ) as server:
        yield server.url


@contextmanager
def server_process(
    template: Template,
    tmp_path: Path,
    *options: str,
    open_files: tuple[int, int],
    module: str = "webapp.server.serve",
    env: dict[str, str] | None = None,
) -> Iterator[LiveServer]:
    """As serving(); yields the server's URL and process id."""
    # The session sandboxes' uid must traverse every parent of the var dir.
    var_dir = Path(tempfile.mkdtemp(prefix="undoable-serve-")) / "var"
    os.chmod(var_dir.parent, 0o711)
    shutil.copytree(template.var_dir, var_dir)
    port = free_port()
    log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        [sys.executable, "-m", module, "-b", "127.0.0.1", "-p", str(port), *options],
        env={**server_env(var_dir), **(env or {})},
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, open_files),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: healthy(url), timeout_s=60, what=f"{url}/healthz")
        yield LiveServer(url=url, pid=process.pid)
    finally:
        process.kill()
        process.wait()
        log.close()
        remove_var_dir(var_dir.parent)


def healthy(url: str) -> bool:
    # The server closes the connection after answering, so it no longer counts against the cap.
    response = httpx.get(f"{url}/healthz", headers={"Connection": "close"}, timeout=2)
    return response.status_code == 200
