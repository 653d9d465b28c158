"""A run that did not succeed says why and what next on the query page, live and after a
reload; the console hint stays until there is output (issue 16, findings 1 and 5). A run that
needs a credential this browser does not hold is not started at all, and Run says why beside it
(issue 42, finding 3).
Real server, real sandbox, real chromium; only the LLM is faked."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.fakes.llm_server import tool_call

pytestmark = pytest.mark.browser

SLACK_PROPOSAL = {
    "forward_code": "import os\nprint(os.environ['SLACK_TOKEN'][:0] + 'posted')",
    "reverse_code": "print('deleted')",
    "explanation": "Posts a message to Slack.",
    "credentials": ["SLACK_TOKEN"],
    "hosts": ["slack.com"],
    "reversible": True,
}
FAILING_PROPOSAL = {
    "forward_code": "import sys\nprint('about to fail')\nsys.exit(3)",
    "reverse_code": "print('nothing to undo')",
    "explanation": "Exits with code 3.",
    "credentials": [],
    "hosts": [],
    "reversible": True,
}


def generate(page: Page, prompt: str, kind: str) -> None:
    page.goto("/")
    page.get_by_placeholder("What should happen?").fill(prompt)
    page.locator("select[name=kind]").select_option(kind)
    page.get_by_test_id("generate").click()
    expect(page.get_by_test_id("query-prompt")).to_have_text(prompt)


def test_a_rest_query_missing_its_credential_cannot_start_and_says_why_beside_run(
    signed_in_page: Page, fake_llm_server
) -> None:
    page = signed_in_page
    page.goto("/")
    page.evaluate("localStorage.removeItem('undoable.credentials.v1')")
    fake_llm_server.script(tool_call(SLACK_PROPOSAL))
    generate(page, "send a joke to Ana on Slack", "rest")
    run = page.get_by_test_id("run-forward")
    needs = page.get_by_test_id("run-needs")

    # Run is off, and the reason stands beside it (in the same bar), in the first screen.
    expect(run).to_be_disabled()
    expect(needs).to_have_text("Needs SLACK_TOKEN to run: add it in the Credentials card.")
    expect(needs).to_be_in_viewport()
    assert run.get_attribute("aria-describedby") == needs.get_attribute("id")
    # Ctrl+Enter in the editor is refused the same way: no run, nothing in the console.
    page.get_by_test_id("forward-editor").locator(".cm-content").click()
    page.keyboard.press("Control+Enter")
    expect(page.get_by_test_id("run-status")).to_have_text("no run yet")
    expect(page.get_by_test_id("run-list")).not_to_contain_text("#")

    # The link is focusable and leads to the credential's value field.
    link = page.get_by_test_id("run-needs-link")
    link.focus()
    expect(link).to_be_focused()
    page.keyboard.press("Enter")
    card = page.get_by_test_id("credentials-card")
    expect(card.get_by_placeholder("SLACK_TOKEN")).to_have_value("SLACK_TOKEN")
    value = card.locator("[data-credential-input-value]")
    expect(value).to_be_focused()

    # Given the credential, Run comes on and the reason goes.
    value.fill("xoxb-browser")
    card.get_by_role("button", name="Add credential").click()
    expect(run).to_be_enabled()
    expect(needs).to_be_hidden()
    page.evaluate("localStorage.removeItem('undoable.credentials.v1')")


def test_a_failing_program_offers_the_model_and_the_hint_waits_for_output(
    signed_in_page: Page, fake_llm_server
) -> None:
    page = signed_in_page
    fake_llm_server.script(tool_call(FAILING_PROPOSAL))
    generate(page, "exit with code 3", "python")
    console = page.get_by_test_id("console")
    expect(page.get_by_test_id("forward-editor")).to_contain_text("sys.exit(3)")
    expect(console).to_have_text("Run the forward code to see its output here.")
    expect(page.get_by_test_id("no-credentials-needed")).to_have_text(
        "This query needs no credentials."
    )
    expect(page.get_by_text("This query needs:")).to_have_count(0)

    page.get_by_test_id("run-forward").click()
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "failed")
    expect(console).to_contain_text("about to fail")
    expect(console).not_to_contain_text("Run the forward code")
    expect(page.get_by_test_id("run-reason")).to_contain_text("The program exited with code 3.")
    expect(page.get_by_test_id("fix")).to_be_visible()
