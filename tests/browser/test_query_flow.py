"""A person's whole path: prompt -> proposed code -> edit -> run with live output -> reload
mid-run -> stop a long run. Real server, real sandbox, real chromium; only the LLM is faked."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.fakes.llm_server import tool_call

pytestmark = pytest.mark.browser

PROPOSAL = {
    "forward_code": "print('generated forward')",
    "reverse_code": "print('generated reverse')",
    "explanation": "Prints a line; the undo prints another.",
    "credentials": [],
    "hosts": [],
    "reversible": True,
}
TWO_LINES = (
    "import time; print('first line', flush=True); time.sleep(4); print('second line', flush=True)"
)
LONG_RUN = "import time; print('long run started', flush=True); time.sleep(120)"


def replace_code(page: Page, editor: str, code: str) -> None:
    content = page.locator(f"[data-testid={editor}] .cm-content")
    content.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(code)
    expect(content).to_contain_text(code[:30])


def test_prompt_edit_run_reload_and_stop(signed_in_page: Page, fake_llm_server) -> None:
    page = signed_in_page
    badge = page.get_by_test_id("run-status")
    console = page.get_by_test_id("console")
    fake_llm_server.script(tool_call(PROPOSAL))

    page.goto("/")
    page.get_by_placeholder("What should happen?").fill("print a line, wait, print another")
    page.get_by_test_id("generate").click()
    expect(page.get_by_test_id("query-prompt")).to_have_text("print a line, wait, print another")
    expect(page.get_by_test_id("forward-editor")).to_contain_text("generated forward")
    expect(page.get_by_test_id("reverse-editor")).to_contain_text("generated reverse")

    replace_code(page, "forward-editor", TWO_LINES)
    expect(page.locator('[data-changed="forward"]')).to_be_visible()
    page.keyboard.press("Control+Enter")

    # The first line is on screen while the run is still going.
    expect(console).to_contain_text("first line")
    expect(badge).to_have_attribute("data-status", "running")
    expect(console).not_to_contain_text("second line")

    page.reload()
    expect(badge).to_have_attribute("data-status", "succeeded", timeout=30_000)
    expect(console).to_have_text(re.compile(r"^first line\nsecond line\n"))
    assert console.inner_text().count("first line") == 1
    expect(badge).to_contain_text("exit 0")
    # The edit survived the reload: it was saved on the server.
    expect(page.get_by_test_id("forward-editor")).to_contain_text("second line")

    replace_code(page, "forward-editor", LONG_RUN)
    page.get_by_test_id("run-forward").click()
    expect(console).to_contain_text("long run started")
    expect(badge).to_have_attribute("data-status", "running")
    page.get_by_test_id("stop").click()
    expect(badge).to_have_attribute("data-status", "cancelled")
    expect(page.get_by_test_id("run-list")).to_contain_text("Cancelled")


def test_an_irreversible_action_runs_only_after_the_typed_phrase(
    signed_in_page: Page, fake_llm_server
) -> None:
    page = signed_in_page
    badge = page.get_by_test_id("run-status")
    answers = ["yes please", "run anyway"]
    prompts: list[str] = []

    def answer(dialog) -> None:
        prompts.append(dialog.message)
        dialog.accept(answers.pop(0))

    page.on("dialog", answer)
    fake_llm_server.script(
        tool_call({**PROPOSAL, "forward_code": "print('sent for good')", "reversible": False})
    )
    page.goto("/")
    page.get_by_placeholder("What should happen?").fill("send something for good")
    page.get_by_test_id("generate").click()
    expect(page.get_by_test_id("not-reversible")).to_contain_text("run anyway")
    expect(page.get_by_test_id("forward-editor")).to_contain_text("sent for good")

    # A wrong phrase goes to the server, which refuses it; the page says why and nothing runs.
    page.get_by_test_id("run-forward").click()
    expect(page.locator("[data-save-state]")).to_contain_text('Type "run anyway"')
    expect(badge).to_have_text("no run yet")

    page.get_by_test_id("run-forward").click()
    expect(badge).to_have_attribute("data-status", "succeeded", timeout=30_000)
    expect(page.get_by_test_id("console")).to_contain_text("sent for good")
    assert len(prompts) == 2 and "run anyway" in prompts[0]


def test_a_fix_shows_its_diff_and_the_diff_survives_a_reload(
    signed_in_page: Page, fake_llm_server
) -> None:
    page = signed_in_page
    diff = page.locator('[data-diff="forward"]')
    fake_llm_server.script(
        tool_call({**PROPOSAL, "forward_code": "raise ValueError('broken on purpose')"})
    )
    page.goto("/")
    page.get_by_placeholder("What should happen?").fill("fail, then get fixed")
    page.get_by_test_id("generate").click()
    expect(page.get_by_test_id("forward-editor")).to_contain_text("broken on purpose")
    page.get_by_test_id("run-forward").click()
    expect(page.get_by_test_id("run-status")).to_have_attribute(
        "data-status", "failed", timeout=30_000
    )

    fake_llm_server.script(tool_call({"code": "print('fixed on purpose')", "explanation": "ok"}))
    page.get_by_test_id("fix").click()
    expect(page.get_by_test_id("forward-editor")).to_contain_text("fixed on purpose")
    expect(diff).to_contain_text("broken on purpose")

    page.reload()
    expect(page.get_by_test_id("forward-fixed")).to_be_visible()
    expect(diff).to_be_visible()
    expect(diff).to_contain_text("broken on purpose")
    expect(diff).to_contain_text("fixed on purpose")
