"""The query page's undo check in the browser: Rehearse answers at once with "rehearsing", the
background job's verdict replaces it, and typing in an editor marks it stale. Real server, real
sandbox, real chromium; only the LLM is faked."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.fakes.llm_server import tool_call

pytestmark = pytest.mark.browser

PROPOSAL = {
    "forward_code": "open('note.txt', 'w').write('rehearsed\\n')",
    "reverse_code": "import os; os.remove('note.txt')",
    "explanation": "Writes a note into the workspace.",
    "credentials": [],
    "hosts": [],
    "reversible": True,
}


def test_rehearse_shows_rehearsing_then_the_verdict_then_stale_after_an_edit(
    signed_in_page: Page, fake_llm_server
) -> None:
    page = signed_in_page
    fake_llm_server.script(tool_call(PROPOSAL))
    page.goto("/")
    page.get_by_placeholder("What should happen?").fill("write a note into note.txt")
    page.locator("select[name=kind]").select_option("fs")
    page.get_by_test_id("generate").click()
    expect(page.get_by_test_id("forward-editor")).to_contain_text("note.txt")
    panel = page.get_by_test_id("rehearsal-panel")
    verdict = panel.get_by_test_id("rehearsal-verdict")
    expect(verdict).to_contain_text("Not rehearsed yet.")

    panel.get_by_test_id("rehearse").click()
    expect(verdict).to_contain_text(
        "the reverse program restores the state exactly", timeout=60_000
    )
    expect(panel.get_by_test_id("rehearse")).to_be_enabled()
    expect(verdict.get_by_test_id("rehearsal-stale")).to_have_count(0)

    page.get_by_test_id("forward-editor").locator(".cm-content").click()
    page.keyboard.type("# edited\n")
    expect(verdict.get_by_test_id("rehearsal-stale")).to_contain_text("stale")


def test_a_rehearsal_refused_says_why_in_the_panel(signed_in_page: Page, fake_llm_server) -> None:
    page = signed_in_page
    fake_llm_server.script(tool_call({**PROPOSAL, "reverse_code": ""}))
    page.goto("/")
    page.get_by_placeholder("What should happen?").fill("write a note, no way back")
    page.locator("select[name=kind]").select_option("fs")
    page.get_by_test_id("generate").click()
    expect(page.get_by_test_id("forward-editor")).to_contain_text("note.txt")
    panel = page.get_by_test_id("rehearsal-panel")
    panel.get_by_test_id("rehearse").click()
    expect(panel.get_by_test_id("rehearsal-failed")).to_contain_text(
        "there is no reverse program to rehearse"
    )
    expect(panel.get_by_test_id("rehearse")).to_be_enabled()
