"""Keep answers at once (issue 16, finding 2): the change list arrives by the run's websocket
without a reload, Keep shows "Keeping…" on the click and "Kept" within a second, measured in
the page with performance.now(). Real server, sandbox and chromium; only the LLM is faked."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.fakes.llm_server import tool_call

pytestmark = pytest.mark.browser

PROPOSAL = {
    "forward_code": "open('note.txt', 'w').write('kept at once\\n')",
    "reverse_code": "import os; os.remove('note.txt')",
    "explanation": "Writes a note into the workspace.",
    "credentials": [],
    "hosts": [],
    "reversible": True,
}

# Record when the Keep click happened and when the status first read each text, from a
# capturing click listener and a MutationObserver: the page's own clock, no polling.
RECORD_KEEP_TIMES = """() => {
  const panel = document.querySelector('[data-testid="workspace-panel"]');
  const seen = (window.keepTimes = {});
  document.addEventListener("click", (event) => {
    if (event.target.closest('[data-testid="keep"]')) seen.click = performance.now();
  }, true);
  new MutationObserver(() => {
    const status = panel.querySelector('[data-testid="change-status"]');
    const text = status ? status.textContent.trim() : "";
    if (text && !(text in seen)) seen[text] = performance.now();
  }).observe(panel, { childList: true, subtree: true, characterData: true });
  window.notReloaded = true;
}"""


def test_keep_feedback_under_1_s(signed_in_page: Page, fake_llm_server) -> None:
    page = signed_in_page
    fake_llm_server.script(tool_call(PROPOSAL))
    page.goto("/")
    page.get_by_placeholder("What should happen?").fill("write a note into note.txt")
    page.locator("select[name=kind]").select_option("fs")
    page.get_by_test_id("generate").click()
    expect(page.get_by_test_id("forward-editor")).to_contain_text("note.txt")
    panel = page.get_by_test_id("workspace-panel")
    page.evaluate(RECORD_KEEP_TIMES)

    page.get_by_test_id("run-forward").click()
    expect(panel.get_by_test_id("change-list")).to_contain_text("added note.txt", timeout=30_000)
    assert 'data-testid="change-list"' in page.request.get(page.url).text()

    panel.get_by_test_id("keep").click()
    expect(panel.get_by_test_id("change-status")).to_have_text("Kept", timeout=5_000)
    expect(panel.get_by_test_id("workspace-files")).to_contain_text("note.txt")
    times = page.evaluate("window.keepTimes")
    assert page.evaluate("window.notReloaded === true")
    pending_ms = times["Keeping…"] - times["click"]
    kept_ms = times["Kept"] - times["click"]
    print(f"Keep feedback: pending after {pending_ms:.0f} ms, Kept after {kept_ms:.0f} ms")
    assert pending_ms < 100
    assert kept_ms < 1000
