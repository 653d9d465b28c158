"""Propose again asks before it replaces edited code, keeps that code, and Undo replace brings it
back. Real server and chromium; only the LLM is faked."""

from __future__ import annotations

import pytest
from playwright.sync_api import Dialog, Page, expect

from tests.fakes.llm_server import tool_call

pytestmark = pytest.mark.browser

FIRST = {
    "forward_code": "print('first proposal')",
    "reverse_code": "print('first undo')",
    "explanation": "The first try.",
    "credentials": [],
    "hosts": [],
    "reversible": True,
}
SECOND = {
    **FIRST,
    "forward_code": "print('second proposal')",
    "reverse_code": "print('second undo')",
    "explanation": "The second try.",
}
EDIT = "print('my careful edit')"


def replace_code(page: Page, editor: str, code: str) -> None:
    content = page.locator(f"[data-testid={editor}] .cm-content")
    content.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(code)
    expect(content).to_contain_text(code)


def test_propose_again_then_undo_replace_restores_the_edit(
    signed_in_page: Page, fake_llm_server
) -> None:
    page = signed_in_page
    forward = page.locator("[data-testid=forward-editor] .cm-content")
    reverse = page.locator("[data-testid=reverse-editor] .cm-content")
    fake_llm_server.script(tool_call(FIRST))
    page.goto("/")
    page.get_by_placeholder("What should happen?").fill("print which try this is")
    page.get_by_test_id("generate").click()
    expect(forward).to_contain_text("first proposal")
    expect(page.get_by_test_id("replaced-notice")).to_have_count(0)

    replace_code(page, "forward-editor", "print('a first edit')")
    asked: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    sent = len(fake_llm_server.requests)
    page.get_by_test_id("propose-again").click()
    expect(page.locator("[data-save-state]")).to_have_text(
        "Nothing replaced: your code is as it was."
    )
    assert "Undo replace brings them back" in asked[0]
    assert len(fake_llm_server.requests) == sent
    expect(forward).to_have_text("print('a first edit')")

    def accept(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.accept()

    fake_llm_server.script(tool_call(SECOND))
    # Straight after typing (before the autosave's delay): the page saves the edit first, so the
    # version the server keeps has it.
    replace_code(page, "forward-editor", EDIT)
    page.once("dialog", accept)
    page.get_by_test_id("propose-again").click()
    expect(forward).to_have_text("print('second proposal')")
    expect(reverse).to_have_text("print('second undo')")
    expect(page.get_by_test_id("explanation")).to_have_text("The second try.")
    expect(page.get_by_test_id("replaced-notice")).to_contain_text("Replaced by a new proposal.")
    assert len(asked) == 2

    # The editors hold the new proposal unchanged: Undo replace goes without asking (an
    # unexpected dialog would be dismissed by Playwright and nothing would be restored).
    page.get_by_test_id("undo-replace").click()
    expect(forward).to_have_text(EDIT)
    expect(reverse).to_have_text("print('first undo')")
    expect(page.get_by_test_id("explanation")).to_have_text("The first try.")
    expect(page.locator('[data-changed="forward"]')).to_be_visible()
    expect(page.get_by_test_id("replaced-notice")).to_have_count(0)
    assert len(asked) == 2

    # The restored edit is the saved code, not just what the page shows.
    page.reload()
    expect(forward).to_have_text(EDIT)
