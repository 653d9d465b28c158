"""The prompt box and the console do not lose or garble what people give them (issue 16, item 9):
a long paste is counted and refused with a reason (never cut), "Write code by hand" needs no
prompt, a terminal's title sequences do not show up as text, a run's output moves its badge on
from "queued". Real server, real sandbox, real chromium; only the LLM is faked."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.fakes.llm_server import tool_call

pytestmark = pytest.mark.browser

TITLED_PROPOSAL = {
    "forward_code": (
        "import sys\n"
        "sys.stdout.write('\\x1b]0;a window title\\x07before ')\n"
        "link = '\\x1b]8;;https://example.com\\x1b\\\\a link\\x1b]8;;\\x1b\\\\'\n"
        "sys.stdout.write(link + ' after\\n')\n"
        "sys.stdout.flush()\n"
    ),
    "reverse_code": "print('nothing to undo')",
    "explanation": "Sets the terminal title and prints a hyperlink.",
    "credentials": [],
    "hosts": [],
    "reversible": True,
}


def test_write_by_hand_needs_no_prompt(signed_in_page: Page) -> None:
    page = signed_in_page
    page.goto("/")
    page.get_by_test_id("by-hand").click()
    expect(page).to_have_url(re.compile(r"/queries/\d+/"))
    expect(page.get_by_test_id("forward-editor")).to_be_visible()


def test_a_long_paste_is_counted_and_refused_whole_never_cut(signed_in_page: Page) -> None:
    page = signed_in_page
    page.goto("/")
    box = page.get_by_placeholder("What should happen?")
    text = "send a joke " * 350  # 4,200 characters
    box.fill(text)
    expect(page.locator("[data-prompt-count]")).to_have_text(
        "Too long by 200 characters (at most 4,000)."
    )
    page.get_by_test_id("by-hand").click()
    expect(page.locator(".form-errors")).to_contain_text("at most 4000 characters")
    expect(page.get_by_placeholder("What should happen?")).to_have_value(text)


def test_title_sequences_are_not_printed_and_output_starts_the_run(
    signed_in_page: Page, fake_llm_server
) -> None:
    page = signed_in_page
    fake_llm_server.script(tool_call(TITLED_PROPOSAL))
    page.goto("/")
    page.get_by_placeholder("What should happen?").fill("set the title")
    page.get_by_test_id("generate").click()
    expect(page.get_by_test_id("query-prompt")).to_have_text("set the title")

    page.get_by_test_id("run-forward").click()
    console = page.get_by_test_id("console")
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "succeeded")
    expect(console).to_have_text("before a link after\n")
    expect(page.get_by_test_id("run-list")).not_to_contain_text("ago")


def test_a_title_sequence_split_across_chunks_is_still_dropped(signed_in_page: Page) -> None:
    page = signed_in_page
    page.goto("/")
    page.get_by_test_id("by-hand").click()  # the query page loads the console
    expect(page.get_by_test_id("run-forward")).to_be_enabled()  # the page's scripts ran
    shown = page.evaluate(
        """() => {
            const filter = new window.UndoableConsole.OscFilter();
            const chunks = ["a\\x1b", "]0;ti", "tle\\x1b", "\\\\b\\x1b]2;", "x\\x07c"];
            return chunks.map((chunk) => filter.pass(chunk)).join("");
        }"""
    )
    assert shown == "abc"
