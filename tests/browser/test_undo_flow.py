"""Keep/Discard in the browser: an fs run lists its changes with a diff; Discard throws them
away, Keep applies them. Real server, real sandbox, real chromium; only the LLM is faked."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.fakes.llm_server import tool_call

pytestmark = pytest.mark.browser

PROPOSAL = {
    "forward_code": "open('joke.txt', 'w').write('Why did the sandbox cross the road?\\n')",
    "reverse_code": "import os; os.remove('joke.txt')",
    "explanation": "Writes a joke into the workspace.",
    "credentials": [],
    "hosts": [],
    "reversible": True,
}


def test_an_fs_change_is_listed_then_discarded_then_kept(
    signed_in_page: Page, fake_llm_server
) -> None:
    page = signed_in_page
    fake_llm_server.script(tool_call(PROPOSAL))
    page.goto("/")
    page.get_by_placeholder("What should happen?").fill("write a joke into joke.txt")
    page.locator("select[name=kind]").select_option("fs")
    page.get_by_test_id("generate").click()
    expect(page.get_by_test_id("forward-editor")).to_contain_text("joke.txt")
    panel = page.get_by_test_id("workspace-panel")

    page.get_by_test_id("run-forward").click()
    change_list = panel.get_by_test_id("change-list")
    expect(change_list).to_contain_text("added joke.txt", timeout=30_000)
    expect(change_list).to_contain_text("+Why did the sandbox cross the road?")
    panel.get_by_test_id("discard").click()
    expect(panel.get_by_test_id("change-status")).to_have_text("Discarded", timeout=15_000)
    expect(panel.get_by_test_id("workspace-files")).not_to_contain_text("joke.txt")

    page.get_by_test_id("run-forward").click()
    expect(panel.get_by_test_id("keep")).to_be_visible(timeout=30_000)
    panel.get_by_test_id("keep").click()
    expect(panel.get_by_test_id("change-status")).to_have_text("Kept", timeout=15_000)
    expect(panel.get_by_test_id("workspace-files")).to_contain_text("joke.txt")
