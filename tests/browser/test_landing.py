"""A visitor who is not signed in: the landing page says what Undoable does in one screen and
signs them in; the sign-up form shows its errors next to their fields. Real server and chromium."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import AppServer

pytestmark = pytest.mark.browser

USERNAME, PASSWORD = "browser-owner", "not-used-here-41"  # made by conftest's session script


@pytest.fixture
def visitor(chromium: Browser, app_server: AppServer) -> Iterator[Page]:
    context = chromium.new_context(base_url=app_server.url, viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()


def test_the_landing_page_explains_forward_and_undo_in_one_screen(visitor: Page) -> None:
    visitor.goto("/")

    expect(visitor.get_by_role("heading", level=1)).to_contain_text("take it back")
    expect(visitor.get_by_test_id("landing")).to_contain_text("reverse")
    picture = visitor.get_by_role("img", name="Forward and reverse code, then Keep or Discard")
    sign_in = visitor.get_by_test_id("landing-login").get_by_role("button", name="Sign in")
    for element in (picture, sign_in):
        expect(element).to_be_in_viewport(ratio=1)


def test_a_visitor_signs_in_from_the_landing_page(visitor: Page) -> None:
    visitor.goto("/")
    form = visitor.get_by_test_id("landing-login")

    form.get_by_label("Username").fill(USERNAME)
    form.get_by_label("Password").fill(PASSWORD)
    form.get_by_role("button", name="Sign in").click()

    expect(visitor.get_by_placeholder("What should happen?")).to_be_visible()
    expect(visitor.locator(".who")).to_have_text(USERNAME)


def test_sign_up_shows_an_error_next_to_its_field_on_a_phone(visitor: Page) -> None:
    visitor.set_viewport_size({"width": 360, "height": 780})
    visitor.goto("/")
    visitor.get_by_test_id("landing-signup").click()

    visitor.get_by_label("Username").fill("new-person")
    visitor.get_by_label("Password", exact=True).fill("a long and unusual passphrase 9")
    visitor.get_by_label("Password confirmation").fill("a different passphrase 10")
    visitor.get_by_role("button", name="Create account").click()

    error = visitor.locator(".auth-field.has-errors").get_by_role("alert")
    expect(error).to_contain_text("didn’t match")
    expect(error).to_be_in_viewport()
    assert visitor.evaluate("document.documentElement.scrollWidth <= innerWidth")
