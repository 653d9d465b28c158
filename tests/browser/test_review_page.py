"""The Review page (issue 43): an agent, with a token whose owner requires review, leaves an fs
action pending through the API; the owner's open Review page shows it and the header's count
moves without a reload; the API's Keep is refused (403, with the review link); the owner's Keep
on the page, pressed from the keyboard, applies it (the file is in the workspace). Real server,
real sandbox, real chromium."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import AppServer
from tests.browser.site import agent_api, new_person

pytestmark = pytest.mark.browser

JOKE = "Why did the agent cross the road?\n"
ACTION = {
    "kind": "fs",
    "intent": "leave a joke in joke.txt for the team",
    "forward_code": f"open('joke.txt', 'w').write({JOKE!r})\nprint('joke written')",
    "reverse_code": "import os\nos.remove('joke.txt')",
}


def review_required_token(page: Page, app_server: AppServer) -> str:
    """A new API token of the page's person, made on the account page, that requires review."""
    page.goto("/accounts/")
    page.locator("#token-name").fill("joke agent")
    page.get_by_role("button", name="Create token").click()
    secret = page.locator("#new-api-token").inner_text().strip()
    app_server.manage("token_limits", secret[:10], "--review", "on")
    return secret


@pytest.fixture
def owner_page(chromium: Browser, app_server: AppServer) -> Page:
    return new_person(chromium, app_server)


def test_an_agents_pending_action_appears_live_and_only_the_owners_keep_applies_it(
    owner_page: Page, app_server: AppServer
) -> None:
    page = owner_page
    token = review_required_token(page, app_server)
    page.goto("/review/")
    header = page.get_by_test_id("changes-waiting")
    expect(page.get_by_test_id("review-empty")).to_be_visible()
    expect(header).to_be_hidden()
    # The socket has said the count once (so it listens): the agent acts after that.
    expect(page.locator("[data-changes-waiting][data-live]")).to_be_attached()

    status, action = agent_api(app_server, token, "POST", "/api/v1/actions", ACTION)
    assert (status, action["status"]) == (201, "pending"), action

    # No reload: the header's count and the list follow the websocket.
    expect(header).to_have_text("1 change waiting")
    item = page.locator(f"#action-{action['id']}")
    expect(item).to_contain_text("leave a joke in joke.txt for the team")
    expect(item.get_by_test_id("review-token")).to_contain_text("joke agent")
    expect(item.get_by_test_id("change-list")).to_contain_text("joke.txt")
    expect(item.get_by_test_id("review-output")).to_contain_text("joke written")
    expect(page.get_by_test_id("review-count")).to_contain_text("1 change waiting")

    status, refused = agent_api(
        app_server, token, "POST", f"/api/v1/actions/{action['id']}/keep", {}
    )
    assert status == 403, refused
    assert refused["error"].startswith("limit review_required: ")
    assert f"/review/#action-{action['id']}" in refused["error"]

    keep = item.get_by_test_id("keep")
    keep.focus()
    page.keyboard.press("Enter")
    expect(page.locator(f"#action-{action['id']}")).to_have_attribute("data-status", "kept")
    expect(page.locator(f"#action-{action['id']}")).to_be_focused()  # the keyboard stays there
    expect(header).to_be_hidden()
    status, kept = agent_api(app_server, token, "GET", f"/api/v1/actions/{action['id']}")
    assert kept["status"] == "kept"
    status, joke = agent_api(
        app_server, token, "GET", f"/api/v1/workspaces/{action['workspace']}/files/joke.txt"
    )
    assert (status, joke) == (200, JOKE)
