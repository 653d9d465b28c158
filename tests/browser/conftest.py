"""A real server (webapp.server.serve subprocess, embedded mode, real bwrap sandbox), the fake LLM,
and Debian's chromium driven by Playwright's sync API. Run as its own pytest invocation:
`pytest -m browser`."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.fakes.llm_server import FakeLLMServer
from tests.local_servers import free_port, signed_in_session_script
from tests.prerequisites import CHROMIUM
from tests.quota_mounts import remove_var_dir

REPO = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SESSION_SCRIPT = signed_in_session_script("browser-owner", "not-used-here-41")


@dataclass
class AppServer:
    url: str
    session_key: str
    env: dict[str, str] = field(default_factory=dict)

    def manage(self, *args: str) -> str:
        """`manage.py` against this server's database (e.g. a token's limits); its output."""
        done = subprocess.run(
            [sys.executable, str(REPO / "manage.py"), *args],
            env=self.env,
            check=True,
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        return done.stdout


def _wait_healthy(url: str, process: subprocess.Popen, timeout: float = 60.0) -> None:
    """Poll /healthz until it answers 200 (the server has no readiness signal of its own)."""
    done = threading.Event()
    deadline = threading.Timer(timeout, done.set)
    deadline.start()
    try:
        while not done.is_set():
            if process.poll() is not None:
                raise RuntimeError(f"server exited with {process.returncode}")
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            done.wait(0.1)
        raise RuntimeError("server did not become healthy in time")
    finally:
        deadline.cancel()


@pytest.fixture(scope="session")
def fake_llm_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture(scope="session")
def app_server(fake_llm_server: FakeLLMServer) -> Iterator[AppServer]:
    var_dir = Path(tempfile.mkdtemp(prefix="undoable-browser-"))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "UNDOABLE_VAR_DIR": str(var_dir),
        "EXECUTOR_ROOTFS": str(REPO / "var" / "sandbox-rootfs"),
        "EXECUTOR_WARM_POOL_SIZE": "1",
        "UNDOABLE_RUNNER": "threads",
        "LLM_BASE_URL": fake_llm_server.base_url,
        "LLM_API_KEY": "browser-test-key",
        "LLM_MODEL": "fake-model",
        "LLM_TIMEOUT_S": "10",
    }
    for name in ("REDIS_URL", "DATABASE_URL"):
        env.pop(name, None)
    manage = [sys.executable, str(REPO / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], env=env, check=True, cwd=REPO)
    session_key = (
        subprocess.run(
            [*manage, "shell", "-c", SESSION_SCRIPT],
            env=env,
            check=True,
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    port = free_port()
    log = open(var_dir / "server.log", "wb")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        [sys.executable, "-m", "webapp.server.serve", "-b", "127.0.0.1", "-p", str(port)],
        env=env,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process)
        yield AppServer(url=url, session_key=session_key, env=env)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        remove_var_dir(var_dir)


@pytest.fixture(scope="session")
def chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        yield browser
        browser.close()


@pytest.fixture
def signed_in_page(chromium: Browser, app_server: AppServer) -> Iterator[Page]:
    context = chromium.new_context(base_url=app_server.url)
    context.add_cookies(
        [{"name": "sessionid", "value": app_server.session_key, "url": app_server.url}]
    )
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()
