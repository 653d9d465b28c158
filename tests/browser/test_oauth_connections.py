"""Connect a service with OAuth in a popup, read-only first: the token lives only in this
browser's localStorage, the model hears the granted scope, a run with it can read but the
service refuses its write, and a query that declares the write scope fails before running.
Connect again with the write scope: the write works. Revoke: gone here and at the provider.

Real server (webapp.server.serve, embedded mode, bwrap sandbox, the rest kind's egress proxy), a
real local OAuth 2.0 provider with its scope-checking API on loopback, Debian's chromium. Only the
LLM is faked, so that the query names its credential, host and scopes.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import _wait_healthy
from tests.fakes.llm_server import FakeLLMServer, tool_call
from tests.fakes.oauth_provider import FakeOAuthProvider
from tests.local_servers import free_port
from tests.quota_mounts import remove_var_dir

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
CLIENT_SECRET = "browser-client-secret-" + secrets.token_hex(8)
PASSWORD = "a long and unusual passphrase 19"
FORWARD = """\
import os, requests
headers = {"Authorization": "Bearer " + os.environ["ITEMS_TOKEN"]}
print("read", requests.get(API, headers=headers, timeout=10).status_code)
answer = requests.post(API, headers=headers, json={"name": "tea"}, timeout=10)
print("write", answer.status_code, answer.json().get("error", "ok"))
"""


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def provider(port: int) -> Iterator[FakeOAuthProvider]:
    with FakeOAuthProvider(
        client_id="undoable-browser",
        client_secret=CLIENT_SECRET,
        redirect_uris=[f"http://127.0.0.1:{port}/connections/callback/"],
        scopes=["items.read", "items.write"],
    ) as server:
        yield server


@pytest.fixture(scope="module")
def server_url(llm: FakeLLMServer, provider: FakeOAuthProvider, port: int) -> Iterator[str]:
    var_dir = Path(tempfile.mkdtemp(prefix="undoable-browser-oauth-"))
    var_dir.chmod(0o755)  # the sandbox user must reach the rest kind's control folder in it
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(
        DJANGO_SETTINGS_MODULE="webapp.settings",
        UNDOABLE_VAR_DIR=str(var_dir),
        EXECUTOR_ROOTFS=str(REPO / "var" / "sandbox-rootfs"),
        EXECUTOR_WARM_POOL_SIZE="1",
        EXECUTOR_EGRESS_ALLOW_PRIVATE="1",
        UNDOABLE_RUNNER="threads",
        LLM_BASE_URL=llm.base_url,
        LLM_API_KEY="browser-test-key",
        LLM_MODEL="fake-model",
        OAUTH_GENERIC_CLIENT_ID="undoable-browser",
        OAUTH_GENERIC_CLIENT_SECRET=CLIENT_SECRET,
        OAUTH_GENERIC_NAME="Items",
        OAUTH_GENERIC_CREDENTIAL="ITEMS_TOKEN",
        OAUTH_GENERIC_AUTHORIZE_URL=provider.authorize_url,
        OAUTH_GENERIC_TOKEN_URL=provider.token_url,
        OAUTH_GENERIC_REVOKE_URL=provider.revoke_url,
        OAUTH_GENERIC_READ_SCOPES="items.read",
        OAUTH_GENERIC_WRITE_SCOPES="items.write",
    )
    manage = [sys.executable, str(REPO / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], env=env, check=True, cwd=REPO)
    with (var_dir / "server.log").open("wb") as log:
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
        yield url
    finally:
        process.terminate()
        process.wait(timeout=15)
    server_log = (var_dir / "server.log").read_text(errors="replace")
    remove_var_dir(var_dir)
    for token in provider.issued_tokens():
        assert token not in server_log


def _page(chromium: Browser, url: str) -> Page:
    page = chromium.new_context(base_url=url).new_page()
    page.set_default_timeout(20_000)
    page.goto("/accounts/signup/")
    page.locator("#id_username").fill("oauth-" + secrets.token_hex(3))
    page.locator("#id_password1").fill(PASSWORD)
    page.locator("#id_password2").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()
    expect(page.locator(".who")).to_be_visible()
    return page


def _connect(page: Page, *, write: bool) -> None:
    page.goto("/accounts/")
    item = page.get_by_test_id("connection-generic")
    expect(item.get_by_label("items.read")).to_be_checked()  # the narrowest, by default
    expect(item.get_by_label("items.write")).not_to_be_checked()
    if write:
        item.get_by_label("items.write").check()
    with page.expect_popup() as popup:
        item.get_by_role("button", name="Connect Items").click()
    popup.value.wait_for_event("close")
    granted = "items.read, items.write" if write else "items.read"
    expect(item.locator("[data-connection-state]")).to_have_text(
        f"Connected as ITEMS_TOKEN, granted: {granted}"
    )


def _stored(page: Page) -> dict[str, str]:
    return page.evaluate("() => JSON.parse(localStorage.getItem('undoable.credentials.v1'))")


def _propose(page: Page, llm: FakeLLMServer, provider: FakeOAuthProvider, scopes: list) -> None:
    llm.script(
        tool_call(
            {
                "forward_code": f"API = {provider.api_url!r}\n" + FORWARD,
                "reverse_code": "",
                "explanation": "Adds an item called tea.",
                "credentials": ["ITEMS_TOKEN"],
                "hosts": [provider.host_port],
                "scopes": scopes,
                "reversible": True,
            }
        )
    )
    page.goto("/")
    page.get_by_placeholder("What should happen?").fill("add an item called tea")
    page.get_by_label("Kind").select_option("rest")
    page.get_by_test_id("generate").click()
    expect(page.get_by_test_id("forward-editor")).to_contain_text("requests.post")


def _run_forward(page: Page) -> None:
    page.get_by_test_id("run-forward").click()


def test_connect_read_only_then_write_then_revoke(
    chromium: Browser, server_url: str, provider: FakeOAuthProvider, llm: FakeLLMServer
) -> None:
    page = _page(chromium, server_url)
    _connect(page, write=False)
    token = _stored(page)["ITEMS_TOKEN"]
    assert provider.live_tokens()[token] == ["items.read"]
    assert token not in page.content()

    # The model hears what was granted, never the token; this proposal forgot to name its scope.
    _propose(page, llm, provider, scopes=[])
    prompt = llm.requests[-1]["messages"][1]["content"]
    assert "ITEMS_TOKEN: Items, granted items.read" in prompt
    assert "NOT granted: items.write" in prompt
    assert token not in str(llm.requests)
    _run_forward(page)
    console = page.get_by_test_id("console")
    expect(console).to_contain_text("write 403 insufficient_scope", timeout=60_000)
    expect(console).to_contain_text("read 200")
    assert provider.items == []

    # A proposal that names the write scope stops before running.
    _propose(page, llm, provider, scopes=[{"credential": "ITEMS_TOKEN", "scope": "items.write"}])
    query_path = page.url.removeprefix(server_url)
    _run_forward(page)
    expect(page.get_by_test_id("run-reason")).to_contain_text(
        "Missing scope: Items (ITEMS_TOKEN) was not granted items.write. Nothing was run."
    )
    expect(page.get_by_test_id("run-reason")).to_contain_text("in the Connections panel")
    expect(page.get_by_test_id("go-credentials")).to_be_visible()
    expect(page.get_by_test_id("fix")).to_be_hidden()  # the model cannot fix a missing grant

    # Connected again with the write scope, the same query's write works.
    _connect(page, write=True)
    write_token = _stored(page)["ITEMS_TOKEN"]
    assert provider.live_tokens()[write_token] == ["items.read", "items.write"]
    page.goto(query_path)
    _run_forward(page)
    expect(console).to_contain_text("write 201 ok", timeout=60_000)
    assert provider.items == ["tea"]

    # Refresh: a new token with the same scopes replaces the old one in this browser.
    page.goto("/accounts/")
    item = page.get_by_test_id("connection-generic")
    item.get_by_role("button", name="Refresh token").click()
    expect(item.locator("[data-connection-message]")).to_have_text("Token refreshed.")
    write_token = _stored(page)["ITEMS_TOKEN"]
    assert provider.live_tokens()[write_token] == ["items.read", "items.write"]

    # Revoke: gone from this browser and dead at the provider.
    item.get_by_role("button", name="Revoke").click()
    expect(item.locator("[data-connection-message]")).to_have_text(
        "Revoked at Items and removed from this browser."
    )
    expect(item.locator("[data-connection-state]")).to_have_text("Not connected.")
    assert "ITEMS_TOKEN" not in _stored(page)
    stored = page.evaluate("() => localStorage.getItem('undoable.connections.v1')")
    assert "generic" not in stored
    assert write_token not in provider.live_tokens()


def test_a_provider_refusal_is_shown_and_nothing_is_stored(
    chromium: Browser, server_url: str, provider: FakeOAuthProvider
) -> None:
    page = _page(chromium, server_url)
    page.goto("/accounts/")
    provider.next_error = "access_denied"
    item = page.get_by_test_id("connection-generic")
    with page.expect_popup() as popup:
        item.get_by_role("button", name="Connect Items").click()
    popup.value.wait_for_event("close")
    expect(item.locator("[data-connection-message]")).to_have_text(
        "Items answered: access_denied (the provider said access_denied). Nothing was stored."
    )
    assert page.evaluate("() => localStorage.length") == 0


def test_an_unregistered_redirect_uri_says_what_to_do_when_the_person_comes_back(
    chromium: Browser, server_url: str, provider: FakeOAuthProvider
) -> None:
    page = _page(chromium, server_url)
    page.goto("/accounts/")
    registered, provider.redirect_uris = provider.redirect_uris, []
    try:
        item = page.get_by_test_id("connection-generic")
        with page.expect_popup() as popup:
            item.get_by_role("button", name="Connect Items").click()
        expect(popup.value.locator("body")).to_contain_text("redirect_uri not registered")
        popup.value.close()
        page.bring_to_front()
        page.evaluate("() => window.dispatchEvent(new Event('focus'))")
        expect(item.locator("[data-connection-message]")).to_contain_text(
            "No answer from Items. If its window showed an error or was closed, nothing was stored"
        )
    finally:
        provider.redirect_uris = registered
    assert page.evaluate("() => localStorage.length") == 0
