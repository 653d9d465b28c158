"""What the page-wide browser tests share: a browser context, and a site with something on it.

`pending_fs_site` drives the real flow once (prompt, propose, run an fs query to a pending change,
share it, make an API token that an agent acts with) and returns the paths of every main page,
for tests that visit them all (layout at phone widths, accessibility).
"""

from __future__ import annotations

import itertools
import json
import urllib.error
import urllib.request
from typing import Any, Literal

from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.browser.conftest import AppServer
from tests.fakes.llm_server import FakeLLMServer, tool_call

Scheme = Literal["light", "dark"]
AGENT_ACTION = {
    "kind": "python",
    "intent": "count the open invoices of the month",
    "forward_code": "print('12 open invoices, 3 of them overdue')",
}


def new_context(
    chromium: Browser,
    app_server: AppServer,
    *,
    signed_in: bool,
    width: int = 1280,
    color_scheme: Scheme = "light",
) -> BrowserContext:
    context = chromium.new_context(
        base_url=app_server.url,
        viewport={"width": width, "height": 844 if width < 800 else 800},
        device_scale_factor=1,
        color_scheme=color_scheme,
    )
    if signed_in:
        context.add_cookies(
            [{"name": "sessionid", "value": app_server.session_key, "url": app_server.url}]
        )
    return context


_people = itertools.count(1)


def new_person(
    chromium: Browser, app_server: AppServer, *, width: int = 1280, height: int = 800
) -> Page:
    """A page signed in as a person who just signed up: no query, run or change of anyone else's
    (the session's shared user collects what every other test left waiting)."""
    context = chromium.new_context(
        base_url=app_server.url, viewport={"width": width, "height": height}
    )
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto("/accounts/signup/")
    page.get_by_label("Username").fill(f"person-{next(_people)}-{id(context)}")
    page.get_by_label("Password", exact=True).fill("a long and unusual passphrase 9")
    page.get_by_label("Password confirmation").fill("a long and unusual passphrase 9")
    page.get_by_role("button", name="Create account").click()
    expect(page.get_by_placeholder("What should happen?")).to_be_visible()
    return page


def agent_api(app_server: AppServer, token: str, method: str, path: str, body: Any = None) -> Any:
    """The agent's side: the HTTP API with its bearer token; (status, decoded body)."""
    request = urllib.request.Request(
        app_server.url + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def pending_fs_site(
    chromium: Browser,
    app_server: AppServer,
    fake_llm_server: FakeLLMServer,
    *,
    prompt: str,
    proposal: dict[str, object],
    token_name: str,
    share_output: bool = False,
) -> dict[str, str]:
    """Paths of the main pages, with an fs query left pending, a share of it and a token."""
    context = new_context(chromium, app_server, signed_in=True)
    page = context.new_page()
    page.set_default_timeout(20_000)
    fake_llm_server.script(tool_call(proposal))
    page.goto("/")
    page.get_by_placeholder("What should happen?").fill(prompt)
    page.locator("select[name=kind]").select_option("fs")
    page.get_by_test_id("generate").click()
    expect(page.get_by_test_id("forward-editor")).to_contain_text("open(")
    query_path = page.url.removeprefix(app_server.url)
    page.get_by_test_id("run-forward").click()
    expect(page.get_by_test_id("keep")).to_be_visible(timeout=30_000)
    if share_output:
        page.get_by_test_id("share-include-output").check()
    page.get_by_test_id("share-button").click()
    expect(page.get_by_test_id("share")).to_be_visible()
    share_path = page.url.removeprefix(app_server.url)
    page.goto("/accounts/")
    page.locator("#token-name").fill(token_name)
    page.get_by_role("button", name="Create token").click()
    expect(page.locator(".token-list")).to_contain_text(token_name)
    # An agent acts with the token: the Review page has an action of its own to show.
    token = page.locator("#new-api-token").inner_text().strip()
    limits_path = page.get_by_role("link", name=f"Limits of token {token[:10]}").get_attribute(
        "href"
    )
    status, action = agent_api(app_server, token, "POST", "/api/v1/actions", AGENT_ACTION)
    assert status == 201 and action["status"] == "succeeded", action
    context.close()
    return {
        "landing": "/",
        "login": "/accounts/login/",
        "signup": "/accounts/signup/",
        "home": "/",
        "query": query_path,
        "history": "/history/",
        "review": "/review/",
        "tokens": "/accounts/#api-tokens",
        "limits": str(limits_path),
        "shares": "/s/",
        "share": share_path,
        "404": "/no-such-page/",
    }
