"""A change waiting for Keep or Discard is never out of sight (issue 42, finding 1): after an fs
run the Keep control is inside the viewport without scrolling (the bar at the bottom of the
viewport), the run's badge says "awaiting your decision", the header of every page counts the
changes waiting and links to them, and screen readers hear of it. Real server, real sandbox,
real chromium; only the LLM is faked."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.browser.conftest import AppServer
from tests.browser.site import new_person
from tests.fakes.llm_server import FakeLLMServer, tool_call

pytestmark = pytest.mark.browser

PROPOSAL = {
    "forward_code": "open('joke.txt', 'w').write('Why did the sandbox cross the road?\\n')",
    "reverse_code": "import os; os.remove('joke.txt')",
    "explanation": "Writes a joke into the workspace.",
    "credentials": [],
    "hosts": [],
    "reversible": True,
}


def in_viewport(page: Page, locator: Locator) -> bool:
    box = locator.bounding_box()
    size = page.viewport_size
    assert box is not None and size is not None
    return (
        box["y"] >= 0
        and box["y"] + box["height"] <= size["height"]
        and box["x"] >= 0
        and box["x"] + box["width"] <= size["width"]
    )


def run_to_a_pending_change(page: Page, fake_llm_server: FakeLLMServer) -> None:
    fake_llm_server.script(tool_call(PROPOSAL))
    page.goto("/")
    page.get_by_placeholder("What should happen?").fill("write a joke into joke.txt")
    page.locator("select[name=kind]").select_option("fs")
    page.get_by_test_id("generate").click()
    expect(page.get_by_test_id("forward-editor")).to_contain_text("joke.txt")
    page.get_by_test_id("run-forward").click()
    expect(page.get_by_test_id("workspace-panel").get_by_test_id("keep")).to_be_attached(
        timeout=30_000
    )


@pytest.mark.parametrize(("width", "height"), [(1280, 900), (360, 780)])
def test_after_an_fs_run_keep_and_discard_are_in_view_without_scrolling(
    chromium: Browser,
    app_server: AppServer,
    fake_llm_server: FakeLLMServer,
    width: int,
    height: int,
) -> None:
    page = new_person(chromium, app_server, width=width, height=height)
    try:
        run_to_a_pending_change(page, fake_llm_server)
        page.evaluate("window.scrollTo(0, 0)")
        bar = page.get_by_test_id("decision-bar")
        expect(bar).to_be_visible()
        # The panel's own Keep is below the first screen: without the bar, nothing in view
        # would say that a change waits.
        assert not in_viewport(page, page.get_by_test_id("workspace-panel").get_by_test_id("keep"))
        for control in ("bar-keep", "bar-discard"):
            assert in_viewport(page, bar.get_by_test_id(control)), control
        expect(bar).to_contain_text("1 change waiting")
        expect(bar).to_contain_text("It waits for good.")
        expect(page.get_by_test_id("run-status")).to_have_text("awaiting your decision")
        header_count = page.get_by_test_id("changes-waiting")
        expect(header_count).to_be_visible()
        assert in_viewport(page, header_count)
        # Screen readers hear it once: a polite live region, filled when the change appeared.
        announcer = page.get_by_test_id("decision-announce")
        expect(announcer).to_have_attribute("aria-live", "polite")
        expect(announcer).to_have_text("1 change waiting for Keep or Discard.")

        # Where the panel's own Keep is in view, the bar steps aside; away from it, it is back.
        page.get_by_test_id("workspace-panel").get_by_test_id("keep").scroll_into_view_if_needed()
        expect(bar).to_be_hidden()
        page.evaluate("window.scrollTo(0, 0)")
        expect(bar).to_be_visible()

        bar.get_by_test_id("bar-keep").click()
        panel = page.get_by_test_id("workspace-panel")
        expect(panel.get_by_test_id("change-status")).to_have_text("Kept", timeout=15_000)
        expect(bar).to_be_hidden()
        expect(page.get_by_test_id("run-status")).not_to_have_text("awaiting your decision")
        expect(panel.get_by_test_id("workspace-files")).to_contain_text("joke.txt")
    finally:
        page.context.close()


def test_the_header_of_every_page_counts_the_changes_waiting_and_links_to_them(
    chromium: Browser, app_server: AppServer, fake_llm_server: FakeLLMServer
) -> None:
    page = new_person(chromium, app_server)
    expect(page.get_by_test_id("changes-waiting")).to_be_hidden()
    run_to_a_pending_change(page, fake_llm_server)
    query_url = page.url.split("#")[0]
    for path in ("/", "/history/", "/accounts/"):
        page.goto(path)
        expect(page.get_by_test_id("changes-waiting")).to_have_text("1 change waiting")
    page.get_by_test_id("changes-waiting").click()
    expect(page).to_have_url(f"{query_url}#pending-change")
    change = page.get_by_test_id("workspace-panel").get_by_test_id("change")
    expect(change).to_have_attribute("data-change-status", "pending")
    # The link lands on the change itself: its own buttons are in view (the bar steps aside).
    expect(change.get_by_test_id("discard")).to_be_in_viewport()
    expect(page.get_by_test_id("decision-bar")).to_be_hidden()
    change.get_by_test_id("discard").click()
    expect(change.get_by_test_id("change-status")).to_have_text("Discarded", timeout=15_000)
    expect(page.get_by_test_id("changes-waiting")).to_be_hidden()
    page.goto("/history/")
    expect(page.get_by_test_id("changes-waiting")).to_be_hidden()

    # Two queries left waiting (as in two tabs): the count links to the list of both.
    run_to_a_pending_change(page, fake_llm_server)
    run_to_a_pending_change(page, fake_llm_server)
    expect(page.get_by_test_id("changes-waiting")).to_have_text("2 changes waiting")
    page.goto("/")
    page.get_by_test_id("changes-waiting").click()
    expect(page.get_by_test_id("waiting-filter")).to_be_visible()
    expect(page.get_by_test_id("change-label")).to_have_text(
        ["Waiting for Keep or Discard", "Waiting for Keep or Discard"]
    )
    page.context.close()


OLD_WORDS = (
    "Undone",
    "Awaiting Keep or Undo",
    "Discard changes",
    "Keep or Undo",
    "Rolled back after",
)


def visible_labels(page: Page) -> str:
    return page.locator("body").inner_text()


def test_a_pending_kept_and_discarded_change_use_the_same_words_on_every_page(
    chromium: Browser, app_server: AppServer, fake_llm_server: FakeLLMServer
) -> None:
    page = new_person(chromium, app_server)
    panel = page.get_by_test_id("workspace-panel")
    seen: dict[str, str] = {}

    run_to_a_pending_change(page, fake_llm_server)
    query_url = page.url
    expect(panel.get_by_test_id("change-status")).to_have_text("Waiting for Keep or Discard")
    seen["query, pending"] = visible_labels(page)
    page.goto("/history/")
    expect(page.get_by_test_id("change-label")).to_have_text("Waiting for Keep or Discard")
    seen["history, pending"] = visible_labels(page)

    page.goto(query_url)
    panel.get_by_test_id("keep").click()
    expect(panel.get_by_test_id("change-status")).to_have_text("Kept", timeout=15_000)
    seen["query, kept"] = visible_labels(page)
    page.goto("/history/")
    expect(page.get_by_test_id("change-label")).to_have_text("Kept")
    seen["history, kept"] = visible_labels(page)

    # Undo after the Keep: the reverse program runs, and its change (joke.txt deleted) waits.
    page.goto(query_url)
    page.get_by_test_id("run-reverse").click()
    expect(panel.get_by_test_id("discard")).to_be_visible(timeout=30_000)
    expect(panel.get_by_test_id("discard")).to_have_text("Discard")
    panel.get_by_test_id("discard").click()
    expect(panel.get_by_test_id("change-status")).to_have_text("Discarded", timeout=15_000)
    # The Runs list names each run's change in the same words (newest first).
    expect(page.get_by_test_id("run-change")).to_have_text(["Discarded", "Kept"])
    seen["query, discarded"] = visible_labels(page)
    page.goto("/history/")
    expect(page.get_by_test_id("change-label")).to_have_text("Discarded")
    seen["history, discarded"] = visible_labels(page)
    page.context.close()

    visitor = chromium.new_page(base_url=app_server.url)
    visitor.goto("/")
    seen["landing"] = visible_labels(visitor)
    seen["landing figure"] = visitor.locator(".landing-svg").text_content() or ""
    assert "Keep or Discard" in seen["landing"]
    visitor.close()

    spoken_otherwise = {
        where: [word for word in OLD_WORDS if word.lower() in text.lower()]
        for where, text in seen.items()
    }
    assert spoken_otherwise == {where: [] for where in seen}
