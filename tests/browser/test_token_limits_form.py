"""The token limits page (issue 43): on a phone-wide screen, from the keyboard, the owner opens a
new token's Limits from the account page, allows python actions only and saves; the agent's fs
action through the API is then refused with 403, naming the limit. Real server, real chromium."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.conftest import AppServer
from tests.browser.site import agent_api, new_person

pytestmark = pytest.mark.browser

FS_ACTION = {"kind": "fs", "forward_code": "open('a.txt', 'w').write('a')"}
SIDEWAYS = "document.documentElement.scrollWidth <= window.innerWidth"


def test_the_owner_allows_python_only_and_the_api_refuses_an_fs_action(
    chromium: Browser, app_server: AppServer
) -> None:
    page = new_person(chromium, app_server, width=360, height=780)
    page.goto("/accounts/")
    page.locator("#token-name").fill("python agent")
    page.get_by_role("button", name="Create token").click()
    token = page.locator("#new-api-token").inner_text().strip()

    limits = page.get_by_role("link", name=f"Limits of token {token[:10]}")
    limits.focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name=f"Limits of token {token[:10]}…")).to_be_visible()
    assert page.evaluate(SIDEWAYS)
    kinds = page.get_by_label("Allowed kinds")
    kinds.fill("python, shell")
    kinds.press("Enter")  # submits the form
    expect(page.get_by_role("alert")).to_contain_text("unknown kinds: shell")
    assert page.evaluate(SIDEWAYS)
    page.get_by_label("Allowed kinds").fill("python")
    page.get_by_label("Allowed kinds").press("Enter")
    expect(page.locator(".flash")).to_contain_text("saved")
    expect(page.get_by_label("Allowed kinds")).to_have_value("python")

    status, refused = agent_api(app_server, token, "POST", "/api/v1/actions", FS_ACTION)
    assert status == 403, refused
    assert refused["error"].startswith("limit allowed_kinds: ")
