"""Sign in, keep a credential in the browser, call a Slack-like API with it from the sandbox, undo
the call, share the run, open the link logged out, and fork it as a second person.

Real server (webapp.server.serve, embedded mode, bwrap sandbox and the rest kind's egress proxy), a
real Slack-like HTTP server on loopback (allowed through EXECUTOR_EGRESS_ALLOW_PRIVATE), real
chromium. Only the LLM is faked, so that the query names its credential and host.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import _wait_healthy
from tests.fakes.llm_server import FakeLLMServer, tool_call
from tests.fakes.slack_server import FakeSlackServer
from tests.local_servers import free_port
from tests.quota_mounts import remove_var_dir

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
SLACK_TOKEN = "xoxb-browser-" + os.urandom(8).hex()
PASSWORD = "a long and unusual passphrase 9"
FORWARD = """\
import json, os, requests
token = os.environ["SLACK_TOKEN"]
print("using token", token)
answer = requests.post(os.environ["SLACK_API"] + "/chat.postMessage",
    headers={"Authorization": "Bearer " + token},
    json={"channel": "C0ANA", "text": "Why do programmers prefer dark mode? Light attracts bugs."},
    timeout=10).json()
print(json.dumps({"ok": answer["ok"], "channel": answer.get("channel"), "ts": answer.get("ts")}))
"""
REVERSE = """\
import json, os, requests
sent = json.loads(os.environ["FORWARD_OUTPUT"].strip().splitlines()[-1])
answer = requests.post(os.environ["SLACK_API"] + "/chat.delete",
    headers={"Authorization": "Bearer " + os.environ["SLACK_TOKEN"]},
    json={"channel": sent["channel"], "ts": sent["ts"]}, timeout=10).json()
print("deleted" if answer["ok"] else answer)
"""


@pytest.fixture(scope="module")
def slack() -> Iterator[FakeSlackServer]:
    with FakeSlackServer(token=SLACK_TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def server_url(llm: FakeLLMServer) -> Iterator[str]:
    """The app, allowed to reach loopback services from rest runs (the fake Slack lives there)."""
    var_dir = Path(tempfile.mkdtemp(prefix="undoable-browser-share-"))
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
    )
    manage = [sys.executable, str(REPO / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], env=env, check=True, cwd=REPO)
    port = free_port()
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
        remove_var_dir(var_dir)


def new_page(chromium: Browser, url: str) -> Page:
    page = chromium.new_context(base_url=url).new_page()
    page.set_default_timeout(20_000)
    return page


def sign_up(page: Page, username: str) -> None:
    page.goto("/accounts/signup/")
    page.locator("#id_username").fill(username)
    page.locator("#id_password1").fill(PASSWORD)
    page.locator("#id_password2").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()
    expect(page.locator(".who")).to_have_text(username)


def test_credential_run_undo_share_and_fork(
    chromium: Browser, server_url: str, slack: FakeSlackServer, llm: FakeLLMServer
) -> None:
    page = new_page(chromium, server_url)
    # A local account: sign up, sign out, sign in with the password.
    sign_up(page, "ana")
    page.get_by_role("button", name="Log out").click()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("ana")
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator(".who")).to_have_text("ana")

    # The credential lives in this browser only and is shown masked once entered.
    page.goto("/accounts/")
    panel = page.locator("[data-credentials-panel]")
    panel.get_by_label("Name").fill("SLACK_TOKEN")
    panel.get_by_label("Value").fill(SLACK_TOKEN)
    panel.get_by_role("button", name="Add credential").click()
    expect(panel.locator("[data-credential-name=SLACK_TOKEN]")).to_contain_text("••••")
    assert SLACK_TOKEN not in page.content()
    stored = page.evaluate("() => localStorage.getItem('undoable.credentials.v1')")
    assert SLACK_TOKEN in stored

    # The LLM proposes code that needs SLACK_TOKEN and may call only the fake Slack.
    llm.script(
        tool_call(
            {
                "forward_code": FORWARD.replace('os.environ["SLACK_API"]', repr(slack.base_url)),
                "reverse_code": REVERSE.replace('os.environ["SLACK_API"]', repr(slack.base_url)),
                "explanation": "Posts a joke to Ana; the undo deletes it.",
                "credentials": ["SLACK_TOKEN"],
                "hosts": [f"{slack.host}:{slack.port}"],
                "reversible": True,
            }
        )
    )
    page.goto("/")
    page.get_by_placeholder("What should happen?").fill("send a joke to Ana on Slack")
    page.get_by_label("Kind").select_option("rest")
    page.get_by_test_id("generate").click()
    expect(page.get_by_test_id("forward-editor")).to_contain_text("chat.postMessage")
    expect(page.locator("[data-credential-needed]")).to_contain_text("SLACK_TOKEN ✓")

    page.get_by_test_id("run-forward").click()
    message = slack.wait_for_message(lambda m: "Light attracts bugs" in m["text"], timeout_s=60)
    badge = page.get_by_test_id("run-status")
    expect(badge).to_have_attribute("data-status", "succeeded", timeout=60_000)
    console = page.get_by_test_id("console")
    expect(console).to_contain_text("using token ****")
    assert SLACK_TOKEN not in console.inner_text()

    page.get_by_test_id("run-reverse").click()
    slack.wait_for_deleted(message["ts"], timeout_s=60)
    expect(console).to_contain_text("deleted", timeout=60_000)
    assert slack.messages("C0ANA") == []

    # Share the query with the forward run's output... the last run is the undo: share that.
    page.goto("/history/")
    row = page.locator("tr", has_text="send a joke to Ana on Slack")
    row.get_by_test_id("share-include-output").check()
    row.get_by_test_id("share-button").click()
    expect(page.get_by_test_id("share-reverse")).to_contain_text("chat.delete")
    share_url = page.url

    # Anyone with the link, logged out, reads it; no token anywhere.
    visitor = new_page(chromium, server_url)
    visitor.goto(share_url)
    expect(visitor.get_by_test_id("share-forward")).to_contain_text("chat.postMessage")
    expect(visitor.get_by_test_id("share-output")).to_contain_text("deleted")
    assert SLACK_TOKEN not in visitor.content()
    expect(visitor.get_by_role("button", name="Fork into my history")).to_have_count(0)

    # A second person forks it: code only, no runs, and their browser has no SLACK_TOKEN.
    sign_up(visitor, "ben")
    visitor.goto(share_url)
    visitor.get_by_role("button", name="Fork into my history").click()
    expect(visitor.get_by_test_id("forward-editor")).to_contain_text("chat.postMessage")
    expect(visitor.locator("[data-credential-needed]")).to_contain_text("SLACK_TOKEN (missing)")
    expect(visitor.get_by_test_id("run-list")).not_to_contain_text("Succeeded")

    # The owner revokes the link; it is gone for everyone.
    page.goto(share_url)
    page.get_by_role("button", name="Revoke this link").click()
    assert visitor.goto(share_url).status == 404
